"""The chance level of `dhwt diagnose` (dhwt.analysis.diagnosis.diagnose), estimated from
stand-ins drawn as their queries see them (dhwt.analysis.knn.query_stand_in), against the law of
a norm-matched random stand-in: a closed form, and a brute force on whole stand-ins
(norm_matched_random)."""

from __future__ import annotations

import numpy as np
import pytest

from dhwt.analysis import diagnosis
from dhwt.analysis.knn import norm_matched_random, query_stand_in


def _chance_overlaps(e: list[np.ndarray], k: int, metric: str, seeds: range,
                     queries: int) -> np.ndarray:
    """The chance levels diagnose estimates from `queries` query tokens, one per seed in `seeds`."""
    return np.array([diagnosis.diagnose(*e, k=k, metric=metric, chance_queries=queries,
                                        seed=seed).chance.mean for seed in seeds])


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
