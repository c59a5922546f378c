"""What `dhwt synth` computes (synthesize; dhwt.commands.synth is its recipe): a language with
its exact truth per objective and its split by class string, the dataset written where asked;
dhwt.report.synth_report renders it. Every check runs before anything touches the disk."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dhwt.checks import Boolean, Integer, Real, Texts, check_fields
from dhwt.directories import check_outside, check_target
from dhwt.languages.dataset import EXISTS, write_dataset
from dhwt.languages.language import OBJECTIVES, Language, load_language
from dhwt.languages.spec import parse_assignments
from dhwt.languages.splits import (SPLIT_SEED, SPLITS, TEST_FRACTION, VALID_FRACTION,
                                   check_split_options, split_of, train_strings)
from dhwt.languages.truth import GroundTruth, bayes_optimum, compute_truth


@dataclass(frozen=True)
class SynthOptions:
    """What `dhwt synth` can be asked besides the grammar and --out (see its --help):
    `KEY=VALUE` assignments to the spec, the split's fractions and seed, and whether an earlier
    dataset at --out is replaced."""

    assignments: tuple[str, ...] = ()
    valid_fraction: float = VALID_FRACTION
    test_fraction: float = TEST_FRACTION
    seed: int = SPLIT_SEED
    overwrite: bool = False

    CONSTRAINTS = {"assignments": [Texts()],
                   "valid_fraction": [Real(0.0, 1.0, high_open=True)],
                   "test_fraction": [Real(0.0, 1.0, high_open=True)], "seed": [Integer(0)],
                   "overwrite": [Boolean()]}

    def __post_init__(self) -> None:
        check_fields(self, self.CONSTRAINTS)


@dataclass(frozen=True, eq=False)
class Synthesis:
    """A language with its exact truth per objective; train: (n,) bool, the class strings of the
    train split; split: (n,) each class string's split (index into SPLITS; None when nothing
    was written and the language fixes none); out: where the dataset was written (None: not);
    seed: of the split, None where the language fixes it; train_optimum: where the train split
    holds half the strings or fewer, its own Bayes optimum per objective (accuracy,
    cross-entropy), which a model fitting those strings alone can beat the language's with."""

    language: Language
    truths: dict[str, GroundTruth]
    train: np.ndarray
    split: np.ndarray | None
    out: str | Path | None
    seed: int | None
    train_optimum: dict[str, tuple[float, float]]

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
    if out is not None:  # never inside a run or study, whose runs read their dataset
        check_outside(out, f"--out {out}")
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
    small = train is not None and 2 * train.sum() <= len(train)
    train_optimum = {objective: bayes_optimum(language.subset(train), objective)
                     for objective in OBJECTIVES} if small else {}
    return Synthesis(language, truths, train, split, out,
                     seed if language.split is None else None, train_optimum)
