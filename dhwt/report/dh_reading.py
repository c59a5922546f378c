"""What an input/output KNN match of one untied model says: the one home of the DH reading,
for `dhwt analyze` and `dhwt diagnose`.

An untied model's input rows tend to gather semantically equivalent tokens (proofs/T3) and its
output rows conditionally equivalent ones (proofs/T1, T2), and a tied model pays where the two
relations differ (proofs/T4). The reading describes how far the two neighbourhoods agree, by
the overlap's share of the way from chance to identity (EXCESS_AGREE, EXCESS_PARTLY: words for a
description, not a verdict), then what the calibration supports about DH and tying
(dhwt.analysis.calibration, measured in experiments/dh_calibration): on small synthetic
languages at the default k = 10 / inner product, models where DH holds and where it is fully
violated show the same excess, and tying cost under 0.0004 nats at every level; on WikiText-2
tying cost 21% perplexity at an overlap of 0.02-0.03 (experiments/tying_wikitext). So the
overlap does not say whether tying is cheap, and the reading does not claim it: a tied run
decides.

Tie history. After an untie the two matrices start as one copy, so their neighbourhoods agree
because of the copy, not the data: an untie@20 run read at step 40 shares 88% of its
neighbourhoods. Measured on WikiText-2 (bpe:2048, d 64, experiments/tying_wikitext, 3 seeds
each): untied at step 800, the overlap falls from 1 to 0.46-0.51 200 steps later (copy residue
0.38), 0.26-0.33 at 400 (0.58), 0.12-0.16 at 800 (0.79); untied at 400 or 160 and read at
1,600, it is 0.06-0.09 (residue 1.03) and 0.05-0.06 (1.16), against 0.017-0.027 for models
untied from the start (residue 1.35-1.37). So the reading is withheld while the copy residue
(dhwt.analysis.similarity.copy_residue) is below COPY_RESIDUE, and flagged after it: the copy
still inflates the overlap two- to fourfold there.
"""

from __future__ import annotations

import math

from dhwt.analysis.knn_curves import excess_over_chance
from dhwt.config.schedule import TieHistory

#: At least this share of the way from chance to identity: "largely agree".
EXCESS_AGREE = 0.5
#: Below this share: "disagree (near chance)"; in between: "partly agree".
EXCESS_PARTLY = 0.15
#: After an untie, no reading while ||E_in - E_out||_F / ||E_out||_F is below this.
COPY_RESIDUE = 1.0


def dh_reading(value: float, chance: float, score: str = "overlap", *, k: int | None = None,
               metric: str | None = None, vocab: int | None = None,
               width: int | None = None) -> str:
    """One line on what an input/output KNN match of one untied model shows, with what the
    calibration at (k, metric) supports (dhwt.analysis.calibration; none at other settings).
    vocab, width: the model's vocabulary size and d_model; a model far from the calibration's,
    or of unknown size, gets no synthetic violation level and no synthetic price of tying.

    Examples:
        >>> dh_reading(0.9, 0.02)[:88]
        'input and output neighbourhoods share 90.0% (overlap) vs chance 2.0%: they largely agree'
        >>> "not calibrated at k 5 / cos" in dh_reading(0.9, 0.02, k=5, metric="cos")
        True
    """
    excess = excess_over_chance(value, chance)
    if not math.isfinite(excess):
        return "no reading (no untied snapshot)"
    head = (f"input and output neighbourhoods share {100 * value:.1f}% ({score}) vs chance "
            f"{100 * chance:.1f}%")
    if excess >= EXCESS_AGREE:
        words = "largely agree"
    elif excess >= EXCESS_PARTLY:
        words = "partly agree"
    else:
        level = ("at chance level" if value <= 2 * chance else
                 f"{value / chance:.0f}x chance but far from identity" if chance > 0 else
                 "far from identity")
        words = f"mostly disagree ({level})"
    calibrated = _calibrated(value, chance, k, metric, vocab, width)
    return f"{head}: they {words}; {calibrated}; a tied run decides"


def _calibrated(value: float, chance: float, k: int | None, metric: str | None,
                vocab: int | None, width: int | None) -> str:
    from dhwt.analysis.calibration import calibrated_reading, packaged

    table = packaged(k, metric) if k is not None and metric is not None else None
    if table is None:
        where = f" at k {k} / {metric}" if k is not None else ""
        return f"what this implies for DH and tying is not calibrated{where}"
    return calibrated_reading(value, chance, table, vocab=vocab, width=width).text


def describe(history: TieHistory) -> str:
    """How the member came to be untied, in words.

    Examples:
        >>> describe(TieHistory(step=40, untied_at=20))
        'untied at step 20, 20 steps before this snapshot'
    """
    if history.untied_at is None:
        return "untied from the start (independent matrices)"
    return f"untied at step {history.untied_at}, {history.since} steps before this snapshot"


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
    return (f"withheld: {describe(history)}, the two matrices still differ by only "
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
    return (f" [flag: {describe(history)}; the copy still inflates the overlap (2-4x an "
            "independent start at a residue of 1-1.2 on WikiText-2): an upper bound on what the "
            "data alone gives]")


def member_reading(value: float, chance: float, *, k: int | None = None,
                   metric: str | None = None, history: TieHistory | None = None,
                   residue: float | None = None, vocab: int | None = None,
                   width: int | None = None) -> str:
    """The reading of one member: withheld right after an untie (when its history and copy
    residue are known), else dh_reading (vocab, width: the model's size) with the copy flag of
    its history.

    Examples:
        >>> member_reading(0.9, 0.02, history=TieHistory(40, 20), residue=0.1)[:9]
        'withheld:'
    """
    if history is not None and residue is not None:
        reason = withheld(history, residue)
        if reason is not None:
            return reason
    flag = copy_flag(history) if history is not None else ""
    return dh_reading(value, chance, k=k, metric=metric, vocab=vocab, width=width) + flag
