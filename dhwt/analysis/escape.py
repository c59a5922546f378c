"""Leaving the unigram plateau, as a time-to-event outcome.

On EXor-like tasks a small model first predicts the target marginal (the plateau) and may, at a
step that varies wildly with the seed, start to use the context. The criterion, on the exact
population cross-entropy CE(t) recorded during training (record.population_every; no sampling
noise, dhwt.analysis.population):

    a member has left the plateau at step t when CE(t) < (H + B) / 2,

H the entropy of the target marginal (the plateau's cross-entropy) and B the Bayes optimum: its
excess over Bayes is below half the plateau's. Its escape step is the first recorded step where
this holds; a member for which it never holds is censored at its last recorded step. A member
can fall back onto the plateau later (the periodic learning rate returns to its peak every
period); `final_off` says where each member ends.

Per arm: Kaplan-Meier survival ("still on the plateau") with a log-log 95% band, escape counts
with exact Clopper-Pearson intervals (dhwt.analysis.intervals), and a two-sided log-rank test
between two arms (scipy.stats).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

from dhwt.runs.metrics import metric_table

SPLIT = "population"


@dataclass(frozen=True)
class Escapes:
    """Per member (seed order as recorded): `step` the escape step, or the censoring step
    (`last`, the last recorded step) where `escaped` is False; `final_off` off the plateau at
    the last step."""

    seeds: tuple[int, ...]
    step: np.ndarray
    escaped: np.ndarray
    final_off: np.ndarray
    threshold: float
    last: int


def threshold(truth) -> float:
    """The cross-entropy below which a member is off the plateau: midway between the plateau
    (the target marginal's entropy) and the Bayes optimum."""
    return (truth.marginal_entropy + truth.bayes_cross_entropy) / 2


def escapes(records: list[dict], truth) -> Escapes:
    """The escape step of each member from a run's metrics.jsonl records ("population" lines).

    Examples:
        >>> from types import SimpleNamespace
        >>> truth = SimpleNamespace(marginal_entropy=1.2, bayes_cross_entropy=0.5)
        >>> rows = [{"split": "population", "step": s, "member": m, "seed": 40 + m, "loss": l}
        ...         for s, losses in ((0, (1.2, 1.2)), (1000, (0.8, 1.2)), (2000, (1.1, 1.19)))
        ...         for m, l in enumerate(losses)]
        >>> e = escapes(rows, truth)  # threshold 0.85
        >>> e.step.tolist(), e.escaped.tolist(), e.final_off.tolist()
        ([1000, 2000], [True, False], [False, False])
    """
    steps, loss = metric_table(records, SPLIT, "loss")
    if not len(steps):
        raise ValueError("no exact population fit in these metrics; train with "
                         "record.population_every > 0")
    if np.isnan(loss).any():
        raise ValueError("population lines are missing for some member at some step")
    seeds = dict(sorted((r["member"], r["seed"]) for r in records if r["split"] == SPLIT))
    cut = threshold(truth)
    off = loss < cut
    escaped = off.any(axis=0)
    first = np.where(escaped, off.argmax(axis=0), len(steps) - 1)
    return Escapes(tuple(seeds.values()), steps[first], escaped, off[-1], cut, int(steps[-1]))


def _censored(e: Escapes) -> stats.CensoredData:
    return stats.CensoredData(uncensored=e.step[e.escaped], right=e.step[~e.escaped])


def kaplan_meier(e: Escapes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(steps, survival, low, high): the Kaplan-Meier estimate of P(still on the plateau after
    step t) at each distinct recorded time, with its 95% log-log band (Greenwood; none where
    the survival is 0, where the band is undefined). No escape: survival 1 throughout.

    Examples:
        >>> e = Escapes((1, 2, 3, 4, 5), np.array([1, 2, 2, 3, 4]),
        ...             np.array([True, True, False, True, False]), np.zeros(5, bool), 0.0, 4)
        >>> kaplan_meier(e)[1].round(3).tolist()  # 4/5, then x 3/4, then x 1/2
        [0.8, 0.6, 0.3, 0.3]
    """
    if not e.escaped.any():
        steps = np.unique(e.step)
        ones = np.ones(len(steps))
        return steps, ones, ones, ones
    sf = stats.ecdf(_censored(e)).sf
    with warnings.catch_warnings():  # undefined where survival is 0 or 1: no band there
        warnings.simplefilter("ignore", RuntimeWarning)
        band = sf.confidence_interval(method="log-log")
    survival = sf.probabilities
    low, high = band.low.probabilities, band.high.probabilities
    return (sf.quantiles, survival, np.where(np.isnan(low), survival, low),
            np.where(np.isnan(high), survival, high))


def logrank(a: Escapes, b: Escapes) -> tuple[float, float]:
    """(z, two-sided p) of the log-rank test that arms a and b leave the plateau at the same
    rate: z = (escapes in a - their expectation under that hypothesis) / sd, so z > 0 when a
    leaves faster. Nan where neither arm has an escape."""
    if not (a.escaped.any() or b.escaped.any()):
        return float("nan"), float("nan")
    result = stats.logrank(_censored(a), _censored(b))
    return float(result.statistic), float(result.pvalue)
