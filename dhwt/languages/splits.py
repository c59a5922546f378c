"""Train/valid/test splits by class string: a seeded shuffle, valid and test carved off the front.
Whole class strings are held out (every variant rendering of a held-out string is unseen).
A language may fix its own split instead (parity's strings = "paper": the authors'); then the
split options must stay at their defaults (`split_of`)."""

from __future__ import annotations

import math

import numpy as np

from dhwt.defaults import SPLIT_SEED, TEST_FRACTION, VALID_FRACTION
from dhwt.errors import DhwtError
from dhwt.filenames import SPLITS  # noqa: F401 (a split id indexes it; its home is filenames)


def check_split_options(valid_fraction: float, test_fraction: float, seed: int) -> None:
    """DhwtError unless the fractions are in [0, 1) with room left for training and the seed is a
    non-negative integer (whatever the language: its size is checked by make_splits)."""
    for name, f in (("valid_fraction", valid_fraction), ("test_fraction", test_fraction)):
        if not (isinstance(f, (int, float)) and math.isfinite(f) and 0.0 <= f < 1.0):
            raise DhwtError(f"{name} must be in [0, 1), got {f!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise DhwtError(f"the split seed must be a non-negative integer, got {seed!r}")
    if valid_fraction + test_fraction >= 1.0:
        raise DhwtError(f"valid_fraction + test_fraction must be below 1 (training needs "
                        f"strings), got {valid_fraction} + {test_fraction}")


def make_splits(n_strings: int, valid_fraction: float, test_fraction: float,
                seed: int) -> np.ndarray:
    """(n_strings,) int8 split ids (index into SPLITS). A split with a fraction > 0 gets
    round(fraction * n) strings but at least one; train keeps at least one."""
    check_split_options(valid_fraction, test_fraction, seed)
    sizes = _held_out(n_strings, valid_fraction, test_fraction)
    if n_strings - sum(sizes) < 1:
        raise DhwtError(f"the language has {n_strings} strings: too few for valid_fraction "
                        f"{valid_fraction} and test_fraction {test_fraction} with a training "
                        "string left (lower the fractions)")
    order = np.random.default_rng(seed).permutation(n_strings)
    split = np.zeros(n_strings, dtype=np.int8)
    split[order[: sizes[0]]] = 1
    split[order[sizes[0]: sizes[0] + sizes[1]]] = 2
    return split


def split_of(language, valid_fraction: float = VALID_FRACTION,
             test_fraction: float = TEST_FRACTION, seed: int = SPLIT_SEED) -> np.ndarray:
    """(n,) int8 split ids of `language`'s class strings: the split it fixes itself, else
    make_splits with these options. Options other than the defaults are refused for a language
    that fixes its split (they would be ignored)."""
    check_split_options(valid_fraction, test_fraction, seed)
    if language.split is None:
        return make_splits(len(language.probs), valid_fraction, test_fraction, seed)
    given = [f"{name} {value}" for name, value, default in (
        ("valid_fraction", valid_fraction, VALID_FRACTION),
        ("test_fraction", test_fraction, TEST_FRACTION), ("split seed", seed, SPLIT_SEED))
        if value != default]
    if given:
        raise DhwtError(f"language {language.name!r} fixes its own split (train "
                        f"{int((language.split == 0).sum())}, valid "
                        f"{int((language.split == 1).sum())}, test "
                        f"{int((language.split == 2).sum())}); leave the split options at their "
                        f"defaults (got {', '.join(given)})")
    return language.split


def train_strings(n_strings: int, valid_fraction: float, test_fraction: float,
                  seed: int) -> np.ndarray | None:
    """(n_strings,) bool: the class strings make_splits keeps for training, or None where it
    would refuse (no string left for training); for a summary that writes nothing."""
    if n_strings - sum(_held_out(n_strings, valid_fraction, test_fraction)) < 1:
        return None
    return make_splits(n_strings, valid_fraction, test_fraction, seed) == 0


def _held_out(n_strings: int, valid_fraction: float, test_fraction: float) -> list[int]:
    """[valid, test] sizes: round(fraction * n_strings), at least one for a fraction > 0."""
    return [max(1, round(f * n_strings)) if f > 0 else 0 for f in (valid_fraction, test_fraction)]
