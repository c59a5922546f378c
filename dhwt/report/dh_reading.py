"""What an input/output KNN match of one untied model says about tying: the one home of the DH
reading, for `dhwt analyze` and `dhwt diagnose`.

An untied model's input rows tend to gather semantically equivalent tokens (proofs/T3:
swap-symmetric data keeps equal input rows equal) and its output rows conditionally equivalent
ones (proofs/T1, T2: at the optimum u1 - u2 is orthogonal to every h(r), and output rows of a
~cnd pair contract). Tying makes one vector serve both; where the two relations differ a tied
model pays excess cross-entropy (proofs/T4, the price B(δ)). So when the input and output
neighbourhoods of a trained untied model agree far above chance, the geometry the two relations
induce is largely shared and tying is likely cheap; near chance, it is likely costly. The cut
points (EXCESS_AGREE, EXCESS_PARTLY of the way from chance to identity) are a heuristic, not a
theorem: neighbourhoods are a coarse, global proxy for "~sem and ~cnd coincide", and an output
bias removes the price of violations that are frequency ratios alone (T4 c). Confirm with a tied
run.

Tie history. After an untie the two matrices start as one copy, so their neighbourhoods agree
because of the copy, not the data: an untie@20 run read at step 40 shares 88% of its
neighbourhoods. Measured on WikiText-2 (bpe:2048, d 64, experiments/tying_wikitext, 3 seeds
each): untied at step 800, the overlap falls from 1 to 0.46-0.51 200 steps later (copy residue
0.38), 0.30 at 400 (0.58), 0.13 at 800 (0.79); untied at 400 or 160 and read at 1,600, it is
0.06-0.09 (residue 1.03) and 0.05-0.06 (1.16), against 0.017-0.027 for models untied from the
start (residue 1.35-1.37). So the reading is withheld while the copy residue
(dhwt.analysis.similarity.copy_residue) is below COPY_RESIDUE, and flagged after it: the copy
still inflates the overlap two- to fourfold there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dhwt.analysis.knn_curves import excess_over_chance
from dhwt.config.schedule import TieSchedule

#: At least this share of the way from chance to identity: "largely agree".
EXCESS_AGREE = 0.5
#: Below this share: "disagree (near chance)"; in between: "partly agree".
EXCESS_PARTLY = 0.15
#: After an untie, no reading while ||E_in - E_out||_F / ||E_out||_F is below this.
COPY_RESIDUE = 1.0


def dh_reading(value: float, chance: float, score: str = "overlap") -> str:
    """One line on what an input/output KNN match of one untied model suggests about tying.

    Examples:
        >>> dh_reading(0.9, 0.02)[-36:]
        'largely agree; tying is likely cheap'
    """
    excess = excess_over_chance(value, chance)
    if not math.isfinite(excess):
        return "no reading (no untied snapshot)"
    head = (f"input and output neighbourhoods share {100 * value:.1f}% ({score}) vs chance "
            f"{100 * chance:.1f}%")
    if excess >= EXCESS_AGREE:
        return (f"{head}: the semantic (input) and distributional (output) geometry largely "
                "agree; tying is likely cheap")
    if excess >= EXCESS_PARTLY:
        return (f"{head}: the semantic and distributional geometry partly agree; tying will "
                "likely cost something, compare with a tied run")
    level = ("at chance level" if value <= 2 * chance else
             f"{value / chance:.0f}x chance but far from identity" if chance > 0 else
             "far from identity")
    return (f"{head}: the semantic and distributional geometry mostly disagree ({level}); "
            "tying is likely costly")


@dataclass(frozen=True)
class TieHistory:
    """How a member came to be untied at `step`: untied_at None means untied from the start
    (independent matrices); else the step of its last untie, when both were one copy."""

    step: int
    untied_at: int | None

    @property
    def since(self) -> int | None:
        return None if self.untied_at is None else self.step - self.untied_at

    def describe(self) -> str:
        if self.untied_at is None:
            return "untied from the start (independent matrices)"
        return f"untied at step {self.untied_at}, {self.since} steps before this snapshot"


def tie_history(schedule: TieSchedule, step: int) -> TieHistory | None:
    """The history of a member trained by `schedule`, read at `step` (None: tied there; a switch
    at N takes effect after N updates, so a snapshot of step N shows it).

    Examples:
        >>> from dhwt.config.schedule import TieSchedule
        >>> tie_history(TieSchedule.parse("untie@20", 100), 40)
        TieHistory(step=40, untied_at=20)
        >>> tie_history(TieSchedule.parse("untie@20", 100), 10) is None
        True
    """
    tied, untied_at = schedule.initial_tied, None
    for event in schedule.events:
        if event.step > step:
            break
        tied = event.action == "tie"
        untied_at = None if tied else event.step
    return None if tied else TieHistory(step, untied_at)


def withheld(history: TieHistory, residue: float) -> str | None:
    """Why the reading is withheld for a member with this history and copy residue
    (dhwt.analysis.similarity.copy_residue), or None.

    Examples:
        >>> withheld(TieHistory(step=40, untied_at=20), residue=0.1)[:60]
        'withheld: untied at step 20, 20 steps before this snapshot, '
        >>> withheld(TieHistory(step=40, untied_at=None), residue=0.1) is None
        True
    """
    if history.untied_at is None or residue >= COPY_RESIDUE:
        return None
    return (f"withheld: {history.describe()}, the two matrices still differ by only "
            f"{residue:.2f} of the output matrix (< {COPY_RESIDUE}): their neighbourhoods agree "
            "because they were one copy, not because of the data; read a later snapshot")


def copy_flag(history: TieHistory) -> str:
    """The warning a reading carries when the member was untied from a copy ('' otherwise).

    Examples:
        >>> copy_flag(TieHistory(step=1600, untied_at=None))
        ''
    """
    if history.untied_at is None:
        return ""
    return (f" [flag: {history.describe()}; the copy still inflates the overlap (2-4x an "
            "independent start at a residue of 1-1.2 on WikiText-2): an upper bound on what the "
            "data alone gives]")
