"""Intervals that fit the outcome, for reports over an ensemble's seeds.

- yes/no outcomes (did a seed leave the plateau?): a count with its exact Clopper-Pearson
  interval (`clopper_pearson`);
- continuous outcomes (a loss, a distance): `summarise` gives mean ± a 95% Student-t interval only
  where that fits (at least 3 values that look unimodal), else the two groups the values fall
  in, each with its count and range (a median of a 4:4 split is a value no seed has), the
  median with its quartiles where asked (`robust`: a law of unknown shape, e.g. escape steps),
  and with fewer than 3 values the values themselves. Unimodal enough for a t-interval means
  Sarle's bimodality coefficient (skewness^2 + 1) / (excess kurtosis + 3 (n-1)^2 / ((n-2)(n-3)))
  at most 5/9, the uniform distribution's value (a screen, not a test; n >= 4), and not split by
  a known two-state outcome (the caller gives it: `groups`, e.g. seeds on and off the plateau).
  Bimodal values without a known split are grouped at their largest gap.
- a median's distribution-free interval, two order statistics (`median_interval`: timings
  paired by round, whose law is unknown);
- `bounds` clip an interval to the measure's range (a cosine lies in [-1, 1], a loss is not
  negative), and the text says so: 'm ± h, clipped to [lo, hi]';
- `mean_band` is the figures' band over seeds at each step: mean ± the 95% t half-width, none
  (nan) with fewer than 3 seeds.
- `t_interval` and `t_half` are the Student-t interval of a mean itself, the one home of that
  formula for the package and the experiments' scripts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

LEVEL = 0.95
BIMODAL = 5 / 9  # Sarle's bimodality coefficient of the uniform distribution
NON_NEGATIVE = (0.0, float("inf"))  # bounds of a loss, an excess over the optimum, a distance
SHARE = (0.0, 1.0)  # bounds of an accuracy or a KNN match
COSINE = (-1.0, 1.0)


def t_half(values, level: float = LEVEL, axis: int | None = None):
    """The half-width of the Student-t interval of the mean of `values` (over `axis`, None: all
    of them): t(0.5 + level / 2, n - 1) * s / sqrt(n), s the sample standard deviation (ddof 1);
    nan with fewer than 2 values.

    Examples:
        >>> round(float(t_half([1.0, 2.0, 3.0])), 4)  # t(0.975, 2) / sqrt(3)
        2.4841
        >>> t_half(np.array([[1.0, 2.0, 3.0], [2.0, 2.0, 2.0]]), axis=1).round(4).tolist()
        [2.4841, 0.0]
    """
    values = np.asarray(values, dtype=float)
    n = values.size if axis is None else values.shape[axis]
    if n < 2:
        shape = () if axis is None else np.delete(values.shape, axis)
        return np.full(shape, np.nan)[()]
    return stats.t.ppf(0.5 + level / 2, n - 1) * values.std(axis=axis, ddof=1) / np.sqrt(n)


def t_interval(values, level: float = LEVEL) -> tuple[float, float]:
    """The Student-t interval (low, high) of the mean of `values` at `level` (a 90% one is the
    two one-sided tests at 5% of an equivalence margin).

    Examples:
        >>> [round(x, 4) for x in t_interval([1.0, 2.0, 3.0])]
        [-0.4841, 4.4841]
        >>> [round(x, 4) for x in t_interval([1.0, 2.0, 3.0], 0.90)]
        [0.3141, 3.6859]
    """
    mean, half = float(np.mean(values)), float(t_half(values, level))
    return mean - half, mean + half


def clopper_pearson(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval for a proportion k / n: the beta quantiles.

    Examples:
        >>> [round(x, 4) for x in clopper_pearson(0, 20)]  # 0 of 20 still allows ~17%
        [0.0, 0.1684]
        >>> [round(x, 4) for x in clopper_pearson(20, 20)]
        [0.8316, 1.0]
    """
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    alpha = 1 - level
    low = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


def median_interval(values, level: float = LEVEL) -> tuple[float, float]:
    """A distribution-free interval for the median of `values`: the order statistics j and
    n + 1 - j for the largest j with P(Binomial(n, 1/2) < j) <= (1 - level) / 2, which cover
    the median with probability >= level whatever the law (independent draws); (min, max),
    which cover it less often, when n is too small for any j.

    Examples:
        >>> median_interval(list(range(1, 22)))  # n 21: the 6th and 16th (coverage 97.3%)
        (6, 16)
    """
    xs, n = sorted(values), len(values)
    j = 0
    while j + 1 <= n // 2 and stats.binom.cdf(j, n, 0.5) <= (1 - level) / 2:
        j += 1
    return (xs[j - 1], xs[n - j]) if j else (xs[0], xs[-1])


def count_text(k: int, n: int) -> str:
    """'k of n (95% CI lo-hi)' with the exact interval, as a share.

    Examples:
        >>> count_text(2, 20)
        '2 of 20 (10%, exact 95% CI 1.2-31.7%)'
    """
    low, high = clopper_pearson(k, n)
    return f"{k} of {n} ({100 * k / n:.0f}%, exact 95% CI {100 * low:.1f}-{100 * high:.1f}%)"


def bimodality(values: np.ndarray) -> float:
    """Sarle's bimodality coefficient of 4 or more values (0 when they are all equal)."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    if n < 4:
        raise ValueError(f"the bimodality coefficient needs 4 or more values, got {n}")
    if np.ptp(values) == 0:
        return 0.0
    skew = stats.skew(values, bias=False)
    kurt = stats.kurtosis(values, bias=False)
    return float((skew**2 + 1) / (kurt + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3))))


@dataclass(frozen=True)
class Summary:
    """How `summarise` described some values: kind "t" (centre = mean, low/high its 95%
    t-interval, clipped to the measure's range; `half` its half-width before clipping),
    "groups" (`groups`: the two groups of values, lower first, each sorted; centre the median,
    low/high the least and largest value), "quartiles" (centre = median, low/high the
    quartiles) or "values" (fewer than 3: `values` themselves, centre their mean)."""

    kind: str
    centre: float
    low: float
    high: float
    values: tuple[float, ...]
    half: float = float("nan")
    groups: tuple[tuple[float, ...], ...] = ()

    def text(self, digits: int = 3) -> str:
        """One table cell: 'm ± h' (', clipped to [lo, hi]' where the interval was clipped to
        the measure's range), 'two groups: n at a to b; m at c to d', 'median m [q1, q3]' or the
        values."""
        f = f".{digits}f"
        if self.kind == "t":
            text = f"{self.centre:{f}} ± {self.half:{f}}"
            if self.low > self.centre - self.half or self.high < self.centre + self.half:
                text += f", clipped to [{self.low:{f}}, {self.high:{f}}]"
            return text
        if self.kind == "groups":
            return "two groups: " + "; ".join(_group(g, f) for g in self.groups)
        if self.kind == "quartiles":
            return f"median {self.centre:{f}} [{self.low:{f}}, {self.high:{f}}]"
        return ", ".join(f"{v:{f}}" for v in self.values) or "-"


def _group(values: tuple[float, ...], f: str) -> str:
    """'n at a to b' of sorted values ('n at a' where they print alike)."""
    low, high = f"{values[0]:{f}}", f"{values[-1]:{f}}"
    return f"{len(values)} at {low}" + ("" if low == high else f" to {high}")


def summarise(values, *, groups=None, robust: bool = False, bimodal: bool | None = None,
              bounds: tuple[float, float] | None = None) -> Summary:
    """Values over seeds, summarised as fits them (see the module docstring). `groups`: (n,)
    bools of a known two-state outcome (seeds on and off the plateau): where both states occur
    the values are given as those two groups. `robust`: the median [quartiles]. `bimodal` True
    groups the values at their largest gap, False gives a t-interval (n >= 3), None decides by
    the bimodality coefficient. `bounds` clip the interval (a cosine: (-1, 1)).

    Examples:
        >>> summarise([1.0, 2.0, 3.0]).text()  # t(0.975, 2) * 1 / sqrt(3)
        '2.000 ± 2.484'
        >>> two_modes = [0.51, 0.52, 0.50, 0.51, 0.50, 0.52, 0.93, 0.94, 0.92, 0.93]
        >>> summarise(two_modes).text(2)  # bimodality coefficient 0.60 > 5/9
        'two groups: 6 at 0.50 to 0.52; 4 at 0.92 to 0.94'
        >>> few = [0.51, 0.52, 0.50, 0.51, 0.93, 0.94, 0.92, 0.93]
        >>> summarise(few).text(2)  # coefficient 0.47: with few values the screen is weak
        '0.72 ± 0.19'
        >>> summarise(few, groups=[0, 0, 0, 0, 1, 1, 1, 1]).text(2)  # so say it where known
        'two groups: 4 at 0.50 to 0.52; 4 at 0.92 to 0.94'
        >>> summarise([3.0, 9.0, 4.0, 5.0], robust=True).text(1)  # escape steps, say
        'median 4.5 [3.8, 6.0]'
        >>> summarise([0.4, 0.6]).text(1)
        '0.4, 0.6'
        >>> summarise([0.95, 0.99, 0.97], bounds=(-1, 1)).text()  # a cosine's t-interval, clipped
        '0.970 ± 0.050, clipped to [0.920, 1.000]'
        >>> summarise([0.001, 0.002, 0.09], bounds=(0, np.inf)).text()  # a loss is not negative
        '0.031 ± 0.127, clipped to [0.000, 0.158]'
    """
    values = np.asarray(values, dtype=float).ravel()
    n = len(values)
    if n < 3:
        centre = float(values.mean()) if n else float("nan")
        return Summary("values", centre, centre, centre, tuple(values.tolist()))
    if groups is not None and 0 < np.count_nonzero(groups) < n:
        state = np.asarray(groups, bool)
        return _groups(values, values[state], values[~state])
    if robust:
        q1, median, q3 = np.quantile(values, [0.25, 0.5, 0.75])
        return Summary("quartiles", float(median), float(q1), float(q3), tuple(values.tolist()))
    if bimodal is None:
        bimodal = n >= 4 and bimodality(values) > BIMODAL
    if bimodal and np.ptp(values) > 0:
        ordered = np.sort(values)
        cut = int(np.argmax(np.diff(ordered))) + 1  # at the largest gap
        return _groups(values, ordered[:cut], ordered[cut:])
    centre = float(values.mean())
    half = float(t_half(values))
    low, high = centre - half, centre + half
    if bounds is not None:
        low, high = max(low, float(bounds[0])), min(high, float(bounds[1]))
    return Summary("t", centre, low, high, tuple(values.tolist()), half)


def _groups(values: np.ndarray, a: np.ndarray, b: np.ndarray) -> Summary:
    """The summary of `values` as the two groups a and b (the one of lower median first)."""
    pair = sorted((tuple(np.sort(g).tolist()) for g in (a, b)), key=np.median)
    return Summary("groups", float(np.median(values)), float(values.min()), float(values.max()),
                   tuple(values.tolist()), groups=tuple(pair))


def mean_band(values: np.ndarray, axis: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Mean over `axis` (the members) and the half-width of its 95% Student-t interval; the
    half-width is nan (no band) with fewer than 3 members.

    Examples:
        >>> mean, half = mean_band(np.array([[1.0, 2.0, 3.0]]))  # t(0.975, 2) / sqrt(3)
        >>> mean.tolist(), round(float(half[0]), 4)
        ([2.0], 2.4841)
        >>> mean_band(np.array([[1.0, 2.0]]))[1].tolist()
        [nan]
    """
    mean = values.mean(axis=axis)
    if values.shape[axis] < 3:
        return mean, np.full_like(mean, np.nan)
    return mean, t_half(values, axis=axis)
