"""Sampled queries: each query's neighbours equal the full exact search's, on every metric and
with ties; the interval of the mean behaves as sampling theory says."""

from __future__ import annotations

import numpy as np
import torch
import pytest
from scipy import stats

from dhwt.analysis.knn import match_neighbours, nearest_neighbours
from dhwt.analysis.knn.sample import mean_estimate, sample_queries, sampled_neighbours
from dhwt.errors import DhwtError


@pytest.mark.parametrize("metric", ["ip", "cos", "l2"])
@pytest.mark.parametrize("kind", ["gaussian", "ties"])
def test_sampled_rows_equal_the_full_search(metric, kind):
    rng = np.random.default_rng(1)
    if kind == "ties":  # small integers: many equal scores, the tie rule decides
        x = rng.integers(-2, 3, (260, 4)).astype(np.float32)
        x[np.all(x == 0, axis=1)] = 1.0  # cosine needs non-zero rows
    else:
        x = rng.standard_normal((260, 8)) * rng.lognormal(0, 1, (260, 1))
    queries = sample_queries(260, 50, seed=2)
    full = nearest_neighbours(x, 7, metric)
    for block in (64, 6144):
        near = sampled_neighbours(x, queries, 7, metric, block_size=block)
        np.testing.assert_array_equal(near.indices, full.indices[queries])
        np.testing.assert_allclose(near.scores, full.scores[queries], rtol=1e-12)


def test_sampled_match_is_the_full_match_restricted():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((150, 6)), rng.standard_normal((150, 6))
    queries = sample_queries(150, 30, seed=0)
    match = match_neighbours(sampled_neighbours(a, queries, 5), sampled_neighbours(b, queries, 5),
                             tokens=queries)
    na, nb = nearest_neighbours(a, 5), nearest_neighbours(b, 5)
    expected = [len(set(na.indices[q]) & set(nb.indices[q])) for q in queries]
    assert match.intersection.tolist() == expected and match.tokens.tolist() == queries.tolist()


def test_interval_covers_the_population_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(4)
    population = rng.integers(0, 11, 5000) / 10  # overlaps with k = 10
    truth = population.mean()
    covered = 0
    for trial in range(400):
        ids = rng.choice(5000, 200, replace=False)
        e = mean_estimate(population[ids], 5000)
        covered += e.low <= truth <= e.high
    assert 0.92 <= covered / 400 <= 0.98  # binomial sd of the share: about 0.011


def test_a_chance_level_near_0_has_no_interval_below_0():
    values = np.r_[np.zeros(99), 0.1]  # a chance overlap: nearly every stand-in shares nothing
    half = values.std(ddof=1) / 10 * stats.t.ppf(0.975, 99) * np.sqrt(9900 / 9999)
    assert values.mean() - half < 0  # the t-interval itself reaches below 0
    e = mean_estimate(values, 10_000)
    assert e.low == 0.0 and e.high == pytest.approx(values.mean() + half)
    assert mean_estimate(1 - values, 10_000).high == 1.0  # nor above 1


def test_finite_population_correction_and_bad_samples():
    values = np.random.default_rng(5).random(90)
    wide, narrow = mean_estimate(values, 10**9), mean_estimate(values, 100)
    ratio = (narrow.high - narrow.mean) / (wide.high - wide.mean)
    assert ratio == pytest.approx(np.sqrt(10 / 99), rel=1e-6)
    with pytest.raises(DhwtError, match="sample size"):
        mean_estimate(values, 50)
    with pytest.raises(DhwtError, match="positive integer"):
        sample_queries(10, 0, seed=0)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no GPU: the CUDA path is run where one is")
def test_a_gpu_search_equals_the_cpu_search():
    x = np.random.default_rng(6).standard_normal((3000, 32)) * np.random.default_rng(7).lognormal(
        0, 1, (3000, 1))
    queries = sample_queries(3000, 300, seed=1)
    for metric in ("ip", "cos", "l2"):
        cpu = sampled_neighbours(x, queries, 10, metric)
        gpu = sampled_neighbours(x, queries, 10, metric, device="cuda", block_size=1024)
        np.testing.assert_array_equal(gpu.indices, cpu.indices)
