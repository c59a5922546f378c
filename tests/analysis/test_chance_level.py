"""The chance level of `dhwt diagnose` from stand-ins drawn as their queries see them
(dhwt.analysis.knn.query_stand_in, dhwt.analysis.diagnosis._chance) against the law of a
norm-matched random stand-in: exact distributions, a closed form, and a brute force on whole
stand-ins (norm_matched_random)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dhwt.analysis import diagnosis
from dhwt.analysis.knn import norm_matched_random, query_stand_in
from dhwt.errors import DhwtError


def _cosines(s: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cosines of each query with every other row, and of each pair of queries (float64)."""
    unit = s.astype(np.float64) / np.linalg.norm(s.astype(np.float64), axis=1)[:, None]
    scores = unit[queries] @ unit.T
    others = np.delete(scores, queries, axis=1).ravel()
    pairs = scores[:, queries][np.triu_indices(len(queries), 1)]
    return others, pairs


@pytest.mark.parametrize("width, b", [(200, 40), (60, 50)])
def test_query_stand_in_keeps_norms_and_draws_the_stand_ins_cosines(width, b):
    """Rows keep their norms; a query's cosine with any other row, and two queries' cosine,
    follow the law of one coordinate of a uniform unit vector in `width` dimensions ((c + 1) / 2
    ~ Beta((width - 1) / 2, (width - 1) / 2)): the law in a stand-in of all `width` dimensions.
    Forgetting the chi-square part (cosines of b + 1 dimensions) fails the first case, a
    Bartlett diagonal of one degree of freedom for all (width - b) the second."""
    rng = np.random.default_rng(0)
    n = 1000
    norms = rng.lognormal(0, 1, n)
    generator = np.random.default_rng(1)
    others, pairs = [], []
    for _ in range(20):
        queries = np.sort(rng.choice(n, b, replace=False))
        s = query_stand_in(norms, width, queries, generator)
        assert s.shape == (n, b + 1) and s.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(s.astype(np.float64), axis=1), norms,
                                   rtol=4e-7)
        assert (s[queries, b] == 0).all()
        o, p = _cosines(s, queries)
        others.append(o)
        pairs.append(p)
    others = np.concatenate(others[:5])  # plenty: 192,000 cosines
    law = stats.beta((width - 1) / 2, (width - 1) / 2)
    for values in (others, np.concatenate(pairs)):
        assert stats.kstest((values + 1) / 2, law.cdf).pvalue > 1e-3
    if width > 2 * b:
        narrower = stats.beta(b / 2, b / 2)  # what b + 1 dimensions would give
        assert stats.kstest((others + 1) / 2, narrower.cdf).pvalue < 1e-6


def test_query_stand_in_is_seeded_and_refuses_as_many_queries_as_dimensions():
    norms = np.ones(50)
    draw = [query_stand_in(norms, 8, np.arange(3), np.random.default_rng(4)) for _ in range(2)]
    np.testing.assert_array_equal(*draw)
    with pytest.raises(DhwtError, match="needs 1 to 7 of them"):
        query_stand_in(norms, 8, np.arange(8), np.random.default_rng(0))


def _chance_overlaps(e: list[np.ndarray], k: int, metric: str, seeds: range,
                     queries: int) -> np.ndarray:
    """Per-query chance overlaps of diagnosis._chance's estimates over `seeds` (the mean of each
    estimate times its queries: the overlaps' sum)."""
    squares = [np.einsum("ij,ij->i", x, x) for x in e]
    return np.array([diagnosis._chance(*e, squares, k, metric, queries, seed, False, "cpu").mean
                     for seed in seeds])


def _brute_chance(e: list[np.ndarray], k: int, queries: int, seeds: range) -> np.ndarray:
    """The inner-product chance level of whole norm-matched random stand-ins, by float64 brute
    force over `queries` random tokens, one pair of stand-ins per seed."""
    n = len(e[0])
    means = []
    for seed in seeds:
        generator = np.random.default_rng([seed, 99])
        ids = generator.choice(n, queries, replace=False)
        sets = []
        for x in e:
            r = norm_matched_random(x, generator).astype(np.float64)
            scores = r[ids] @ r.T
            scores[np.arange(queries), ids] = -np.inf
            sets.append(np.argsort(-scores, axis=1, kind="stable")[:, :k])
        means.append(np.mean([len(np.intersect1d(a, b)) / k for a, b in zip(*sets)]))
    return np.array(means)


@pytest.mark.slow
def test_batched_chance_level_has_the_whole_stand_ins_mean():
    """Shared heavy-tailed norms (hubs: a chance level far above k / n) in 160 dimensions, so
    that 256 sampled queries go through two stand-ins of 129 columns: the mean over seeds of
    the batched estimate against a float64 brute force on whole stand-ins, within 4 standard
    errors of their difference; under cosine, against the closed form k / (n - 1) (neighbours
    of random directions are a uniform k-subset)."""
    assert 160 > diagnosis.CHANCE_BATCH + 1 and 256 > diagnosis.CHANCE_BATCH
    rng = np.random.default_rng(3)
    n, d, k, queries = 1500, 160, 10, 256
    hubs = rng.lognormal(0, 0.8, (n, 1))
    e = [(rng.standard_normal((n, d)) * hubs).astype(np.float32) for _ in range(2)]
    batched = _chance_overlaps(e, k, "ip", range(12), queries)
    brute = _brute_chance(e, k, queries, range(12))
    assert batched.mean() > 5 * k / (n - 1)  # the hubs matter: not the uniform level
    error = np.sqrt(batched.var(ddof=1) / len(batched) + brute.var(ddof=1) / len(brute))
    assert abs(batched.mean() - brute.mean()) <= 4 * error
    cos = _chance_overlaps(e, k, "cos", range(8), queries)
    uniform = k / (n - 1)
    assert abs(cos.mean() - uniform) <= 4 * cos.std(ddof=1) / np.sqrt(len(cos)) + 1e-3


def test_all_tokens_queried_or_narrow_spaces_keep_one_whole_stand_in(monkeypatch):
    """Every token queried (an exact chance level of one stand-in) and spaces at most
    CHANCE_BATCH + 1 wide are searched in one whole stand-in, as before the batches."""
    calls = []
    monkeypatch.setattr(diagnosis, "query_stand_in",
                        lambda *a, **k: calls.append(1) or query_stand_in(*a, **k))
    rng = np.random.default_rng(0)
    for n, d, queries in ((300, 200, 300), (600, diagnosis.CHANCE_BATCH + 1, 200)):
        e = [rng.standard_normal((n, d)).astype(np.float32) for _ in range(2)]
        _chance_overlaps(e, 5, "ip", range(1), queries)
    assert not calls
    e = [rng.standard_normal((600, 200)).astype(np.float32) for _ in range(2)]
    _chance_overlaps(e, 5, "ip", range(1), 200)
    assert len(calls) == 4  # two batches (128 + 72 queries) in each space
