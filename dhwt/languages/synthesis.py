"""What `dhwt synth` computes (dhwt.commands.synth): a language with its exact truth per
objective and its split by class string; dhwt.report.synth_report renders it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dhwt.languages.language import Language
from dhwt.languages.splits import SPLITS
from dhwt.languages.truth import GroundTruth


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
