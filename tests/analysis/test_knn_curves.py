"""Similarity curves over snapshot steps, against a float64 brute force on hand-made run dirs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from dhwt.analysis.knn import norm_matched_random
from dhwt.analysis.knn_curves import Source, similarity_curves
from dhwt.errors import DhwtError
from dhwt.runs.snapshots import save_snapshot

V, D = 70, 6


def write_run(path, steps, inputs, outputs=None, tied=False):
    """A run dir with only embeddings/: inputs[t] / outputs[t] are (S, V, d) arrays."""
    for t, step in enumerate(steps):
        x = torch.tensor(inputs[t], dtype=torch.float32)
        y = x if tied else torch.tensor(outputs[t], dtype=torch.float32)
        save_snapshot(path / "embeddings", step, x, y, tied=tied,
                      seeds=list(range(1, x.shape[0] + 1)), vocab=tuple(map(str, range(V))))
    return path


def brute_neighbours(x, k):
    """float64 full score matrix, self masked, ties to the lower index."""
    x = np.asarray(x, np.float64)
    score = x @ x.T
    np.fill_diagonal(score, -np.inf)
    order = np.lexsort((np.broadcast_to(np.arange(len(x)), score.shape), -score), axis=1)
    return order[:, :k]


def brute_match(x, y, k):
    """(mean jaccard, mean overlap)."""
    a, b = brute_neighbours(x, k), brute_neighbours(y, k)
    inter = np.array([len(set(r) & set(s)) for r, s in zip(a, b)])
    return (inter / (2 * k - inter)).mean(), (inter / k).mean()


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_curves_equal_a_brute_force_at_every_step(tmp_path, rng):
    steps = [0, 5, 10]
    # low rank + noise, so neighbourhoods of different members share something
    base = rng.standard_normal((V, 2))
    inputs = [np.stack([base @ rng.standard_normal((2, D)) + 0.5 * rng.standard_normal((V, D))
                        for _ in range(3)]) for _ in steps]
    outputs = [rng.standard_normal((3, V, D)) * rng.lognormal(0, 0.5, (1, V, 1)) for _ in steps]
    run = write_run(tmp_path / "r", steps, inputs, outputs)
    sources = [Source(f"m{m}", run, m) for m in range(3)]
    k = 4
    result = similarity_curves(sources, k=k, seed=3, block_size=32)
    assert list(result.steps) == steps and result.n_tokens == V
    pairs = {(c.a, c.b, c.side): c for c in result.of_kind("pair")}
    assert len(pairs) == 3 * 2 and len(result.of_kind("dh")) == 3
    for t, step in enumerate(steps):
        for i, j in itertools.combinations(range(3), 2):
            for side, mats in (("input", inputs), ("output", outputs)):
                curve = pairs[(f"m{i}", f"m{j}", side)]
                jac, ov = brute_match(mats[t][i], mats[t][j], k)
                assert curve.values["jaccard"][t] == pytest.approx(jac, abs=1e-12)
                assert curve.values["overlap"][t] == pytest.approx(ov, abs=1e-12)
                # the chance level: brute force on the documented stand-ins
                si = SIDES_INDEX[side]
                ra = norm_matched_random(mats[t][i], np.random.default_rng([3, step, i, si]))
                rb = norm_matched_random(mats[t][j], np.random.default_rng([3, step, j, si]))
                cj, co = brute_match(ra, rb, k)
                assert curve.values["chance_jaccard"][t] == pytest.approx(cj, abs=1e-12)
                assert curve.values["chance_overlap"][t] == pytest.approx(co, abs=1e-12)
        for dh in result.of_kind("dh"):
            m = int(dh.a[1:])
            jac, ov = brute_match(inputs[t][m], outputs[t][m], k)
            assert dh.values["overlap"][t] == pytest.approx(ov, abs=1e-12)
            assert dh.values["jaccard"][t] == pytest.approx(jac, abs=1e-12)


SIDES_INDEX = {"input": 0, "output": 1}


def test_identical_members_score_one_and_random_ones_score_chance(tmp_path, rng):
    steps = [0, 1, 2, 3]
    same = [np.repeat(rng.standard_normal((1, 300, 8)), 2, axis=0) for _ in steps]
    independent = [rng.standard_normal((2, 300, 8)) for _ in steps]
    run = write_run(tmp_path / "same", steps, same, independent)
    result = similarity_curves([Source("a", run, 0), Source("b", run, 1)], k=5, dh=False)
    by_side = {c.side: c for c in result.curves}
    for name in ("jaccard", "overlap"):  # weights 1/n summed: 1 up to rounding
        np.testing.assert_allclose(by_side["input"].values[name], 1.0, rtol=0, atol=1e-12)
    # independent Gaussian rows: the measure is at its chance level (the std of one step's mean
    # overlap is about 0.004 here; 4 steps averaged, two of them differenced)
    out = by_side["output"].values
    assert abs(out["overlap"].mean() - out["chance_overlap"].mean()) < 0.012
    assert out["overlap"].mean() < 0.1  # far from identity


def test_tied_runs_have_no_dh_curve_and_one_side(tmp_path, rng):
    steps = [0, 4]
    run = write_run(tmp_path / "t", steps, [rng.standard_normal((2, V, D)) for _ in steps],
                    tied=True)
    result = similarity_curves([Source("a", run, 0), Source("b", run, 1)], k=3)
    assert result.tied_everywhere
    assert [c.side for c in result.curves] == ["input"]


def test_an_untied_member_whose_matrices_agree_scores_one(tmp_path, rng):
    x = [rng.standard_normal((1, V, D))]
    run = write_run(tmp_path / "u", [0], x, [2.0 * x[0]])  # scaling keeps ip neighbours
    result = similarity_curves([Source("a", run, 0)], k=5, pairs=False)
    (dh,) = result.of_kind("dh")
    assert dh.values["overlap"][0] == pytest.approx(1.0, abs=1e-12) and dh.values["chance_overlap"][0] < 0.5


def test_token_subset_and_two_runs(tmp_path, rng):
    steps = [0, 3]
    a = [rng.standard_normal((1, V, D)) for _ in steps]
    b = [x + 0.3 * rng.standard_normal(x.shape) for x in a]
    ra = write_run(tmp_path / "a", steps, a, a)
    rb = write_run(tmp_path / "b", steps[1:], b[1:], b[1:])  # run b lacks step 0
    keep = np.arange(0, V, 2)
    result = similarity_curves([Source("a", ra, 0), Source("b", rb, 0)], k=4, tokens=keep,
                               dh=False, chance=False, measures=("knn", "cka"))
    curve = next(c for c in result.curves if c.side == "input")
    assert np.isnan(curve.values["overlap"][0])  # no snapshot of b at step 0
    jac, ov = brute_match(a[1][0][keep], b[1][0][keep], 4)
    assert curve.values["overlap"][1] == pytest.approx(ov)
    assert curve.values["jaccard"][1] == pytest.approx(jac)
    assert 0.5 < curve.values["cka"][1] <= 1.0
    assert "chance_overlap" not in curve.values


@pytest.mark.parametrize("kwargs, message", [
    ({"k": 70}, "k must be an integer"),
    ({"measures": "knn,foo"}, "unknown similarity measure 'foo'"),
    ({"metric": "dot"}, "metric must be one of"),
])
def test_bad_options_are_one_line_errors(tmp_path, rng, kwargs, message):
    run = write_run(tmp_path / "r", [0], [rng.standard_normal((2, V, D))], tied=True)
    with pytest.raises(DhwtError, match=message):
        similarity_curves([Source("a", run, 0), Source("b", run, 1)], **kwargs)


def test_a_member_that_does_not_exist(tmp_path, rng):
    run = write_run(tmp_path / "r", [0], [rng.standard_normal((2, V, D))], tied=True)
    with pytest.raises(DhwtError, match="member 5 does not exist"):
        similarity_curves([Source("a", run, 0), Source("b", run, 5)])
