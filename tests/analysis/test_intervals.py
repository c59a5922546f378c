"""Intervals that fit the outcome, against closed forms and brute force."""

import numpy as np
import pytest
from scipy import stats

from dhwt.analysis.intervals import (BIMODAL, bimodality, clopper_pearson, count_text, mean_band,
                                     median_interval,
                                     summarise)


@pytest.mark.parametrize("k, n", [(0, 5), (1, 5), (2, 20), (10, 40), (40, 40)])
def test_clopper_pearson_solves_the_binomial_tails(k, n):
    """The exact interval's ends are where a binomial tail equals 2.5% (scipy.stats.binom, not
    the beta quantiles the implementation uses)."""
    low, high = clopper_pearson(k, n)
    if k > 0:
        assert stats.binom.sf(k - 1, n, low) == pytest.approx(0.025, abs=1e-9)
    else:
        assert low == 0.0
    if k < n:
        assert stats.binom.cdf(k, n, high) == pytest.approx(0.025, abs=1e-9)
    else:
        assert high == 1.0


def test_clopper_pearson_covers_at_least_95_percent():
    """Enumerating every outcome k of n = 12: the interval covers p with probability >= 0.95
    for every p (the interval is exact, hence conservative)."""
    n = 12
    bounds = [clopper_pearson(k, n) for k in range(n + 1)]
    for p in np.linspace(0.001, 0.999, 199):
        cover = sum(stats.binom.pmf(k, n, p) for k, (lo, hi) in enumerate(bounds) if lo <= p <= hi)
        assert cover >= 0.95 - 1e-12


def test_clopper_pearson_refuses_impossible_counts():
    with pytest.raises(ValueError):
        clopper_pearson(3, 2)
    with pytest.raises(ValueError):
        clopper_pearson(0, 0)


def test_count_text_states_the_interval():
    low, high = clopper_pearson(0, 40)
    assert count_text(0, 40) == f"0 of 40 (0%, exact 95% CI 0.0-{100 * high:.1f}%)"


def test_bimodality_coefficient_closed_forms():
    """Sarle's coefficient tends to 5/9 for a uniform and 1/3 for a normal distribution."""
    grid = (np.arange(20000) + 0.5) / 20000
    assert bimodality(grid) == pytest.approx(BIMODAL, abs=2e-3)
    assert bimodality(stats.norm.ppf(grid)) == pytest.approx(1 / 3, abs=5e-3)
    assert bimodality(np.r_[np.zeros(20), np.ones(20)]) > BIMODAL  # two point masses (1 in the limit)
    assert bimodality(np.ones(5)) == 0.0
    with pytest.raises(ValueError):
        bimodality([1.0, 2.0, 3.0])


def test_summarise_picks_the_summary_that_fits():
    rng = np.random.default_rng(0)
    unimodal = rng.normal(1.0, 0.1, 40)
    s = summarise(unimodal)
    half = unimodal.std(ddof=1) / np.sqrt(40) * stats.t.ppf(0.975, 39)
    assert s.kind == "t" and s.centre == pytest.approx(unimodal.mean())
    assert (s.high - s.low) / 2 == pytest.approx(half)
    bimodal = np.r_[rng.normal(1.2, 0.01, 30), rng.normal(0.55, 0.01, 10)]
    s = summarise(bimodal)
    assert s.kind == "groups" and [len(g) for g in s.groups] == [10, 30]
    low, high = np.sort(bimodal[30:]), np.sort(bimodal[:30])
    assert s.text() == (f"two groups: 10 at {low[0]:.3f} to {low[-1]:.3f}; "
                        f"30 at {high[0]:.3f} to {high[-1]:.3f}")
    robust = summarise(unimodal, robust=True)
    assert robust.kind == "quartiles" and robust.centre == pytest.approx(np.median(unimodal))
    assert robust.text().startswith("median ")


def test_a_known_split_gives_its_two_groups_not_a_median_no_seed_has():
    """4 seeds on the plateau and 4 off: the median (0.72) lies between the groups; the
    summary gives each group's count and range (lower first), whatever the screen says."""
    values = [0.93, 0.51, 0.94, 0.52, 0.92, 0.50, 0.93, 0.51]
    off = [False, True, False, True, False, True, False, True]
    s = summarise(values, groups=off)
    assert s.text(2) == "two groups: 4 at 0.50 to 0.52; 4 at 0.92 to 0.94"
    assert summarise(values, groups=[True] * 8).kind == "t"  # one state: no known split
    assert summarise([0.5, 0.5, 0.9], groups=[True, True, False]).text(1) == (
        "two groups: 2 at 0.5; 1 at 0.9")
    assert summarise([0.3, 0.7]).kind == "values" and summarise([0.3, 0.7]).text(1) == "0.3, 0.7"
    assert summarise([]).text() == "-"


def test_cosine_intervals_stay_in_range_and_say_they_were_clipped():
    values = np.array([0.999, 0.90, 0.999, 0.97])
    s = summarise(values, bimodal=False, bounds=(-1, 1))
    half = values.std(ddof=1) / 2 * stats.t.ppf(0.975, 3)
    assert s.high == 1.0 and s.low == pytest.approx(values.mean() - half)
    assert s.text() == f"{values.mean():.3f} ± {half:.3f}, clipped to [{s.low:.3f}, 1.000]"
    assert not s.text().startswith("median")  # not to be read as median [quartiles]


def test_an_interval_of_a_quantity_that_cannot_be_negative_stops_at_0():
    values = [0.001, 0.002, 0.09]
    half = np.std(values, ddof=1) / np.sqrt(3) * stats.t.ppf(0.975, 2)
    assert np.mean(values) - half < 0  # the t-interval itself reaches below 0
    s = summarise(values, bounds=(0, np.inf))
    assert s.low == 0.0 and s.high == pytest.approx(np.mean(values) + half)
    assert s.text().endswith(f"clipped to [0.000, {s.high:.3f}]")
    assert summarise(values).text() == f"{np.mean(values):.3f} ± {half:.3f}"  # unbounded: as is


def test_mean_band_matches_textbook_t_quantile():
    values = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]])  # one snapshot, five members
    mean, half = mean_band(values, axis=1)
    # t(0.975, df=4) = 2.776 from printed tables; sd = sqrt(2.5)
    assert mean[0] == pytest.approx(3.0)
    assert half[0] == pytest.approx(2.776 * np.sqrt(2.5) / np.sqrt(5), rel=1e-3)
    assert np.isnan(mean_band(values[:, :2], axis=1)[1][0])  # no band from 2 members


@pytest.mark.parametrize("n", [1, 5, 6, 11, 21, 40])
def test_median_interval_is_the_narrowest_pair_of_order_statistics_covering_95(n):
    """Coverage of (X_(j), X_(n+1-j)) is P(j <= Binomial(n, 1/2) <= n - j), summed here term by
    term from math.comb: at least 95% for the pair returned, under 95% for the next one in."""
    from math import comb

    def coverage(j: int) -> float:
        return sum(comb(n, i) for i in range(j, n - j + 1)) / 2**n

    values = list(range(100, 100 + n))  # the k-th smallest is 99 + k
    low, high = median_interval(values[::-1])
    j = low - 99
    assert high == 100 + n - j
    if coverage(1) < 0.95:  # too few values for any interval: the range
        assert (low, high) == (100, 99 + n)
    else:
        assert coverage(j) >= 0.95 and (j + 1 > n // 2 or coverage(j + 1) < 0.95)
