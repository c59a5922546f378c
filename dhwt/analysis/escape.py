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
with exact Clopper-Pearson intervals (dhwt.analysis.intervals), counts at several cuts (CUTS) and
the state each member ends in (optimum, partial, plateau: STATES), since the midpoint was chosen,
not checked against partial solutions.

Between two arms, the test fits the design:
- arms of different seeds (independent samples): the two-sided log-rank test (scipy.stats) and
  the Fisher exact test of the counts;
- arms that share seeds (`paired`): per seed, which arm left first, over the seeds still on the
  plateau in both where the arms part (`parting_step`: an untie@N run is its tied twin, bit for
  bit, up to step N, so escapes before N are one event, not two), by an exact sign test (the
  stratified log-rank test with one member per arm and seed). An independent-sample test there
  counts the shared events twice.
What a null result excludes is the interval of the difference in shares (`difference_interval`);
what a design can find at all, its minimum detectable difference (`detectable`, exact Fisher
power), not post-hoc power. Several tests in one report: Holm's adjustment (`holm`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

from dhwt.analysis.intervals import LEVEL
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
    return threshold_at(truth, 0.5)


def threshold_at(truth, share: float) -> float:
    """The cross-entropy B + share (H - B): `share` of the plateau's excess over the optimum.

    Examples:
        >>> from types import SimpleNamespace
        >>> round(threshold_at(SimpleNamespace(marginal_entropy=1.2, bayes_cross_entropy=0.5),
        ...                    0.9), 12)
        1.13
    """
    return (1 - share) * truth.bayes_cross_entropy + share * truth.marginal_entropy


def escapes(records: list[dict], truth, share: float = 0.5) -> Escapes:
    """The escape step of each member from a run's metrics.jsonl records ("population" lines),
    at the cut threshold_at(truth, share) (default the midpoint).

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
    cut = threshold_at(truth, share)
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
    leaves faster. Nan where neither arm has an escape. For independent arms only: arms that
    share seeds are compared by `paired`."""
    if not (a.escaped.any() or b.escaped.any()):
        return float("nan"), float("nan")
    result = stats.logrank(_censored(a), _censored(b))
    return float(result.statistic), float(result.pvalue)


#: Cuts at which the report counts escapes: a member is off at cut q when its cross-entropy is
#: below B + q (H - B), q the share of the plateau's excess left (0.5: the midpoint).
CUTS = (0.25, 0.5, 0.75, 0.9)
#: The three states at the end, by the same share of the plateau's excess: "optimum" below
#: STATES[0], "plateau" at or above STATES[1], "partial" in between (on the authors' EXor strings
#: a partial solution sits at about 1.04 nats, 0.77 of the way up from the optimum).
STATES = (0.25, 0.9)


def end_states(records: list[dict], truth) -> dict[str, int]:
    """How many members end at the optimum, in a partial state, or on the plateau (STATES), by
    their exact population cross-entropy at the last recorded step.

    Examples:
        >>> from types import SimpleNamespace
        >>> truth = SimpleNamespace(marginal_entropy=1.2, bayes_cross_entropy=0.5)
        >>> rows = [{"split": "population", "step": 10, "member": m, "seed": m, "loss": l}
        ...         for m, l in enumerate((0.52, 1.04, 1.2, 1.19))]
        >>> end_states(rows, truth)
        {'optimum': 1, 'partial': 1, 'plateau': 2}
    """
    steps, loss = metric_table(records, SPLIT, "loss")
    if not len(steps):
        raise ValueError("no exact population fit in these metrics")
    low, high = (threshold_at(truth, share) for share in STATES)
    last = loss[-1]
    return {"optimum": int((last < low).sum()),
            "partial": int(((last >= low) & (last < high)).sum()),
            "plateau": int((last >= high).sum())}


@dataclass(frozen=True)
class Paired:
    """Two arms compared seed by seed (they share seeds), over the seeds still on the plateau in
    both after step `start` (where the arms part: before it they are one computation) up to
    `horizon` (the earlier arm's last step). first_a / first_b: seeds where that arm left first
    (the other later or not by the horizon); same: both at one step, or neither. off_a / off_b:
    seeds off the plateau by the horizon. p: exact two-sided sign test of first_a against first_b
    (nan where no seed differs): the stratified log-rank test with one member per arm and seed."""

    start: int
    horizon: int
    n: int
    first_a: int
    first_b: int
    same: int
    off_a: int
    off_b: int
    p: float


def paired(a: Escapes, b: Escapes, start: int = 0) -> Paired:
    """Compare arms a and b that share seeds, per seed, after step `start` (see Paired).

    Examples:
        >>> a = Escapes((1, 2, 3, 4), np.array([5, 30, 40, 90]),
        ...             np.array([True, True, True, False]), np.zeros(4, bool), 0.0, 90)
        >>> b = Escapes((4, 3, 2, 1), np.array([60, 90, 50, 5]),
        ...             np.array([True, False, True, True]), np.zeros(4, bool), 0.0, 90)
        >>> r = paired(a, b, start=10)  # seed 1 left at 5 in both: before the arms part
        >>> r.n, r.first_a, r.first_b, r.same, r.off_a, r.off_b
        (3, 2, 1, 0, 2, 2)
    """
    if sorted(a.seeds) != sorted(b.seeds):
        raise ValueError("paired arms must hold the same seeds")
    horizon = min(a.last, b.last)
    at = {seed: i for i, seed in enumerate(b.seeds)}
    order = [at[seed] for seed in a.seeds]
    ta = np.where(a.escaped & (a.step <= horizon), a.step, np.inf)
    tb = np.where(b.escaped & (b.step <= horizon), b.step, np.inf)[order]
    keep = (ta > start) & (tb > start)
    ta, tb = ta[keep], tb[keep]
    first_a, first_b = int((ta < tb).sum()), int((tb < ta).sum())
    p = (float(stats.binomtest(first_a, first_a + first_b).pvalue) if first_a + first_b
         else float("nan"))
    return Paired(start, int(horizon), int(keep.sum()), first_a, first_b,
                  int((ta == tb).sum()), int(np.isfinite(ta).sum()), int(np.isfinite(tb).sum()),
                  p)


def parting_step(a, b) -> int:
    """The step after which two runs' computations differ: their first tie switch that leaves
    them in different tying states, when their configs (data, model, seeds, optimiser, tie
    penalty) are otherwise equal; else 0. `a`, `b`: dhwt.config.run.TrainConfig.

    Examples:
        >>> from dhwt.config.run import TrainConfig
        >>> tied = TrainConfig(grammar="parity", steps=100, tie_schedule="tied")
        >>> parting_step(tied, TrainConfig(grammar="parity", steps=100,
        ...                                tie_schedule="untie@40"))
        40
        >>> parting_step(tied, TrainConfig(grammar="parity", steps=100, tie_schedule="untie@40",
        ...                                lr=0.1))
        0
    """
    same = all(getattr(a, part) == getattr(b, part) for part in ("data", "model", "members",
                                                                  "optim"))
    if not same or a.tying.tie_penalty != b.tying.tie_penalty:
        return 0
    sa, sb = a.tying.tie_schedule, b.tying.tie_schedule
    for step in sorted({0, *(e.step for e in sa.events), *(e.step for e in sb.events)}):
        if _tied_after(sa, step) != _tied_after(sb, step):
            return step
    return 0


def _tied_after(schedule, step: int) -> tuple[bool, str]:
    """The tying state after `step` updates, with how the last switch merged."""
    state = (schedule.initial_tied, "")
    for event in schedule.events:
        if event.step <= step:
            state = (event.action == "tie", str(event))
    return state


def difference_interval(k1: int, n1: int, k2: int, n2: int,
                        level: float = LEVEL) -> tuple[float, float]:
    """95% interval of the difference of two independent shares k1/n1 - k2/n2: Newcombe's hybrid
    score interval (method 10 of Newcombe 1998, from the two Wilson intervals). For two arms that
    share seeds whose outcomes agree more often than chance, it is wider than a paired interval:
    conservative.

    Examples:
        >>> [round(x, 4) for x in difference_interval(56, 70, 48, 80)]  # Newcombe's Table II
        [0.0524, 0.3339]
        >>> [round(x, 4) for x in difference_interval(0, 10, 0, 10)]
        [-0.2775, 0.2775]
    """
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = _wilson(k1, n1, level)
    l2, u2 = _wilson(k2, n2, level)
    return (p1 - p2 - math.hypot(p1 - l1, u2 - p2), p1 - p2 + math.hypot(u1 - p1, p2 - l2))


def _wilson(k: int, n: int, level: float) -> tuple[float, float]:
    z = stats.norm.ppf(0.5 + level / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def fisher_rejects(n1: int, n2: int, alpha: float = 0.05) -> np.ndarray:
    """(n1 + 1, n2 + 1) bool: which outcomes (k1 of n1, k2 of n2) a two-sided Fisher exact test
    rejects at level `alpha` (p: the probability, given both margins, of the tables no more
    likely than the one seen, as scipy.stats.fisher_exact computes it)."""
    reject = np.zeros((n1 + 1, n2 + 1), bool)
    for total in range(n1 + n2 + 1):
        k1 = np.arange(max(0, total - n2), min(n1, total) + 1)
        pmf = stats.hypergeom.pmf(k1, n1 + n2, n1, total)
        p = (pmf[None, :] <= pmf[:, None] * (1 + 1e-7)).astype(float) @ pmf
        reject[k1, total - k1] = p <= alpha
    return reject


def fisher_power(p1: float, p2: float, n1: int, n2: int | None = None, alpha: float = 0.05,
                 rejects: np.ndarray | None = None) -> float:
    """Exact power of the two-sided Fisher exact test at level `alpha` to tell shares p1 and p2
    apart with n1 and n2 (default n1) seeds per arm: the binomial probability of the outcomes it
    rejects (`rejects`: fisher_rejects(n1, n2, alpha), when already computed)."""
    n2 = n1 if n2 is None else n2
    if rejects is None:
        rejects = fisher_rejects(n1, n2, alpha)
    w1 = stats.binom.pmf(np.arange(n1 + 1), n1, p1)
    w2 = stats.binom.pmf(np.arange(n2 + 1), n2, p2)
    return float(w1 @ rejects @ w2)


def detectable(p0: float, n1: int, n2: int | None = None, *, power: float = 0.8,
               alpha: float = 0.05, grid: int = 1000) -> tuple[float, float]:
    """The minimum detectable difference of a design: the smallest shares below and above `p0`
    (the share of an arm with n2 seeds, default n1) that an arm of n1 seeds must have for a
    two-sided Fisher exact test at level `alpha` to tell them apart with probability `power`,
    by exact power on a grid of `grid` shares; nan on a side where no share reaches it.

    Examples:
        >>> low, high = detectable(0.3, 40)
        >>> round(low, 2), round(high, 2)
        (0.05, 0.63)
    """
    n2 = n1 if n2 is None else n2
    rejects = fisher_rejects(n1, n2, alpha)
    shares = np.linspace(0, 1, grid + 1)
    w1 = stats.binom.pmf(np.arange(n1 + 1)[None, :], n1, shares[:, None])
    w2 = stats.binom.pmf(np.arange(n2 + 1), n2, p0)
    reach = w1 @ rejects @ w2 >= power
    below = shares[(shares < p0) & reach]
    above = shares[(shares > p0) & reach]
    return (float(below.max()) if len(below) else float("nan"),
            float(above.min()) if len(above) else float("nan"))


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjustment of p-values for a family of tests (nan stays nan): a test
    survives at level alpha when its adjusted p is at most alpha.

    Examples:
        >>> holm([0.01, 0.04, 0.03]).round(2).tolist()  # 3 x 0.01, then max(2 x 0.03, ...)
        [0.03, 0.06, 0.06]
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full(len(p), np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    order = valid[np.argsort(p[valid], kind="stable")]
    m, running = len(order), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out
