"""What `dhwt synth` does: load a grammar, compute its exact ground truth, optionally write the
dataset (synthesize), and the summary to print (synth). Every check runs before anything
touches the disk."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dhwt.directories import check_target
from dhwt.languages.dataset import EXISTS, write_dataset
from dhwt.languages.language import OBJECTIVES, Language, load_language
from dhwt.languages.spec import parse_assignments
from dhwt.languages.splits import (SPLIT_SEED, SPLITS, TEST_FRACTION, VALID_FRACTION,
                                   check_split_options, split_of, train_strings)
from dhwt.languages.summary import format_summary
from dhwt.languages.truth import GroundTruth, compute_truth


@dataclass(frozen=True, eq=False)
class Synthesis:
    """A language with its exact truth per objective; train: (n,) bool, the class strings of the
    train split; split: (n,) each class string's split (index into SPLITS; None when nothing
    was written and the language fixes none); out: where the dataset was written (None: not);
    seed: of the split, None where the language fixes it."""

    language: Language
    truths: dict[str, GroundTruth]
    train: np.ndarray
    split: np.ndarray | None
    out: str | Path | None
    seed: int | None

    @property
    def sizes(self) -> dict[str, int] | None:
        """Class strings per split, where the split is known."""
        if self.split is None:
            return None
        return {name: int((self.split == i).sum()) for i, name in enumerate(SPLITS)}


def synthesize(grammar: str, assignments: Sequence[str] = (), out: str | Path | None = None, *,
               valid_fraction: float = VALID_FRACTION, test_fraction: float = TEST_FRACTION,
               seed: int = SPLIT_SEED, overwrite: bool = False) -> Synthesis:
    """The grammar (a built-in name or a TOML path) with `KEY=VALUE` assignments applied and its
    truth; with `out`, the dataset is written there too."""
    check_split_options(valid_fraction, test_fraction, seed)  # even when nothing is written
    inputs = [grammar] if Path(grammar).is_file() else []
    if out is not None:
        check_target(Path(out), "dataset", overwrite=overwrite, inputs=inputs, exists=EXISTS)
    language = load_language(grammar, parse_assignments(assignments))
    if language.split is not None:
        split = split_of(language, valid_fraction, test_fraction, seed)
        train = split == 0
    else:
        split = None if out is None else split_of(language, valid_fraction, test_fraction, seed)
        train = train_strings(len(language.probs), valid_fraction, test_fraction, seed)
    truths = {objective: compute_truth(language, objective) for objective in OBJECTIVES}
    if out is not None:
        write_dataset(language, out, valid_fraction=valid_fraction, test_fraction=test_fraction,
                      seed=seed, overwrite=overwrite, inputs=inputs, truths=truths)
    return Synthesis(language, truths, train, split, out,
                     seed if language.split is None else None)


def synth(grammar: str, assignments: Sequence[str] = (), out: str | Path | None = None, *,
          valid_fraction: float = VALID_FRACTION, test_fraction: float = TEST_FRACTION,
          seed: int = SPLIT_SEED, overwrite: bool = False) -> str:
    """Summary text of synthesize's language (and what was written)."""
    return summary_text(synthesize(grammar, assignments, out, valid_fraction=valid_fraction,
                                   test_fraction=test_fraction, seed=seed, overwrite=overwrite))


def summary_text(result: Synthesis) -> str:
    """What `dhwt synth` prints."""
    summary = format_summary(result.language, result.truths, result.train)
    if result.out is None:
        return f"{summary}\n(no --out given: nothing written)"
    sizes = ", ".join(f"{name} {n}" for name, n in result.sizes.items())
    how = "the language's own split" if result.seed is None else f"seed {result.seed}"
    return f"{summary}\nwrote {result.out}: spec.toml, vocab.json, strings.npz, truth.json " \
           f"(strings: {sizes}; {how})"
