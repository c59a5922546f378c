"""What an input/output KNN match of one untied model supports: the decision of the DH reading,
for `dhwt analyze` and `dhwt diagnose`; dhwt.report.dh_reading_report words it.

An untied model's input rows tend to gather semantically equivalent tokens (proofs/T3) and its
output rows conditionally equivalent ones (proofs/T1, T2), and a tied model pays where the two
relations differ (proofs/T4). The reading describes how far the two neighbourhoods agree, by
the overlap's share of the way from chance to identity (EXCESS_AGREE, EXCESS_PARTLY: words for a
description, not a verdict), then places it on the calibration measured on synthetic languages
(dhwt.analysis.calibration, experiments/dh_calibration) where one exists at its k and metric.
There, at the default k = 10 / inner product, models where DH holds and where it is fully
violated show the same excess, and tying cost under 0.0004 nats at every level, while on
WikiText-2 tying cost far more at a small overlap (FINDINGS, dh_findings.json): the overlap does
not say whether tying is cheap, and the reading does not claim it; a tied run decides.

Tie history. After an untie the two matrices start as one copy, so their neighbourhoods agree
because of the copy, not the data: an untie@20 run read at step 40 shares 88% of its
neighbourhoods. Measured on WikiText-2 (bpe:2048, d 64, experiments/tying_wikitext, 3 seeds
each): untied at step 800, the overlap falls from 1 to 0.46-0.51 200 steps later (copy residue
0.38), 0.26-0.33 at 400 (0.58), 0.12-0.16 at 800 (0.79); untied at 400 or 160 and read at
1,600, it is 0.06-0.09 (residue 1.03) and 0.05-0.06 (1.16), against 0.017-0.027 for models
untied from the start (residue 1.35-1.37). So the reading is withheld while the copy residue
(dhwt.analysis.similarity.copy_residue) is below COPY_RESIDUE, and flagged after it: the copy
still inflates the overlap (FINDINGS' copy_inflation).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from dhwt.analysis.calibration import CalibrationTable, Reading, calibrated_reading, packaged
from dhwt.analysis.knn_curves import excess_over_chance
from dhwt.config.schedule import TieHistory

#: At least this share of the way from chance to identity: "largely agree".
EXCESS_AGREE = 0.5
#: Below this share: "disagree (near chance)"; in between: "partly agree".
EXCESS_PARTLY = 0.15
#: After an untie, no reading while ||E_in - E_out||_F / ||E_out||_F is below this.
COPY_RESIDUE = 1.0
#: The measured findings the reading cites, each with the study and command that measured it.
FINDINGS = Path(__file__).with_name("dh_findings.json")


@cache
def findings() -> dict[str, Any]:
    """The measured findings of FINDINGS (prices of tying measured elsewhere, how well the
    overlap predicts a price, how much a copy inflates the overlap)."""
    return json.loads(FINDINGS.read_text("utf-8"))


@dataclass(frozen=True)
class DhReading:
    """What one untied model's input/output match supports.

    agreement: how far the two neighbourhoods agree, by the excess over chance: "largely"
    (>= EXCESS_AGREE), "partly" (>= EXCESS_PARTLY), else "at-chance" (at most twice chance),
    "above-chance" or, with a chance level of 0, "far-from-identity"; None: no excess over
    chance (e.g. no untied snapshot);
    calibrated: its place on the calibration at (k, metric) (None: none there, or withheld);
    history: how the member came to be untied (None: not known); withheld: the two matrices
    are still close to the copy they were right after an untie (residue < COPY_RESIDUE), so
    nothing is read; flagged: untied from a copy, so the overlap is an upper bound."""

    overlap: float
    chance: float
    excess: float
    agreement: str | None
    k: int | None = None
    metric: str | None = None
    calibrated: Reading | None = None
    history: TieHistory | None = None
    residue: float | None = None
    withheld: bool = False

    @property
    def flagged(self) -> bool:
        return self.history is not None and self.history.untied_at is not None


def agreement(value: float, chance: float) -> str | None:
    """How far the neighbourhoods agree (DhReading.agreement), None without an excess over
    chance.

    Examples:
        >>> agreement(0.9, 0.02), agreement(0.03, 0.02), agreement(0.3, 0.02)
        ('largely', 'at-chance', 'partly')
    """
    excess = excess_over_chance(value, chance)
    if not math.isfinite(excess):
        return None
    if excess >= EXCESS_AGREE:
        return "largely"
    if excess >= EXCESS_PARTLY:
        return "partly"
    if value <= 2 * chance:
        return "at-chance"
    return "above-chance" if chance > 0 else "far-from-identity"


def is_withheld(history: TieHistory, residue: float) -> bool:
    """Whether a member with this history and copy residue is too close to its copy to read.

    Examples:
        >>> is_withheld(TieHistory(step=40, untied_at=20), residue=0.1)
        True
        >>> is_withheld(TieHistory(step=40, untied_at=None), residue=0.1)
        False
    """
    return history.untied_at is not None and residue < COPY_RESIDUE


def dh_reading(value: float, chance: float, *, k: int | None = None, metric: str | None = None,
               history: TieHistory | None = None, residue: float | None = None,
               vocab: int | None = None, width: int | None = None,
               table: CalibrationTable | None = None) -> DhReading:
    """The reading of one member's input/output match `value` beside its `chance` level.

    k, metric: how it was measured; the calibration at (k, metric) (`table`, by default the
    packaged one) places it, where one exists. history, residue: its tie history and copy
    residue; when both are known and the copy is still close, the reading is withheld. vocab,
    width: the model's vocabulary size and d_model (a model far from the calibration's, or of
    unknown size, is not placed on its violation scale).

    Examples:
        >>> r = dh_reading(0.9, 0.02)
        >>> r.agreement, r.calibrated, r.withheld
        ('largely', None, False)
        >>> dh_reading(0.9, 0.02, history=TieHistory(40, 20), residue=0.1).withheld
        True
    """
    excess = excess_over_chance(value, chance)
    base = DhReading(overlap=float(value), chance=float(chance), excess=excess,
                     agreement=agreement(value, chance), k=k, metric=metric, history=history,
                     residue=residue)
    if history is not None and residue is not None and is_withheld(history, residue):
        return replace(base, withheld=True)
    if base.agreement is None:
        return base
    if table is None and k is not None and metric is not None:
        table = packaged(k, metric)
    if table is None:
        return base
    return replace(base, calibrated=calibrated_reading(value, chance, table, vocab=vocab,
                                                       width=width))
