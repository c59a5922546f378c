"""Linear CKA, orthogonal Procrustes and mutual k-NN against closed forms and independent
implementations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import ortho_group

from dhwt.analysis import similarity
from dhwt.analysis.similarity import linear_cka, mutual_knn, procrustes, whole_space
from dhwt.errors import DhwtError


def kernel_cka(x: np.ndarray, y: np.ndarray) -> float:
    """The sample-space form: HSIC of linear kernels, n x n (Kornblith et al., eq. 3)."""
    n = len(x)
    h = np.eye(n) - np.ones((n, n)) / n
    k, l = h @ x @ x.T @ h, h @ y @ y.T @ h
    return float((k * l).sum() / np.sqrt((k * k).sum() * (l * l).sum()))


@pytest.fixture
def spaces():
    rng = np.random.default_rng(0)
    return rng.standard_normal((200, 12)), rng.standard_normal((200, 7))


def test_cka_matches_the_kernel_form_and_streams_chunks(spaces, monkeypatch):
    x, y = spaces
    y = y + x[:, :7] * 0.5  # related spaces
    monkeypatch.setattr(similarity, "CHUNK", 33)  # several chunks, a ragged last one
    assert linear_cka(x, y) == pytest.approx(kernel_cka(x, y), rel=1e-10)


def test_cka_invariances(spaces):
    x, _ = spaces
    q = ortho_group.rvs(12, random_state=1)
    assert linear_cka(x, x @ q) == pytest.approx(1.0, abs=1e-12)
    assert linear_cka(x, 3.7 * x) == pytest.approx(1.0, abs=1e-12)
    assert linear_cka(x, x + 5.0) == pytest.approx(1.0, abs=1e-12)  # centring removes shifts
    rng = np.random.default_rng(2)
    independent = linear_cka(rng.standard_normal((4000, 8)), rng.standard_normal((4000, 8)))
    assert independent < 0.01


def test_procrustes_recovers_a_rotation(spaces):
    x, _ = spaces
    r = ortho_group.rvs(12, random_state=3)
    fit = procrustes(x, x @ r)
    np.testing.assert_allclose(fit.rotation, r, atol=1e-10)
    assert fit.error == pytest.approx(0.0, abs=1e-10) and fit.error_before > 1.0


def test_procrustes_with_noise_beats_every_angle_of_a_grid():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((100, 2))
    angle = 0.7
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    y = x @ rot + 0.3 * rng.standard_normal((100, 2))
    fit = procrustes(x, y)
    np.testing.assert_allclose(fit.rotation.T @ fit.rotation, np.eye(2), atol=1e-12)
    grid = np.linspace(0, 2 * np.pi, 20000)
    errors = [np.linalg.norm(x @ np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]) - y)
              for t in grid]
    assert fit.error * np.linalg.norm(y) <= min(errors) + 1e-9


def test_procrustes_between_widths_has_orthonormal_columns(spaces):
    x, y = spaces
    fit = procrustes(x, y)  # 12 -> 7
    assert fit.rotation.shape == (12, 7)
    np.testing.assert_allclose(fit.rotation.T @ fit.rotation, np.eye(7), atol=1e-12)
    assert np.isnan(fit.error_before)
    others = [ortho_group.rvs(12, random_state=s)[:, :7] for s in range(200)]  # random maps
    best = min(np.linalg.norm(x @ q - y) for q in others) / np.linalg.norm(y)
    assert fit.error < best


def test_mutual_knn_against_scikit_learn(spaces):
    from sklearn.neighbors import NearestNeighbors

    x, _ = spaces
    rng = np.random.default_rng(5)
    y = x + 0.5 * rng.standard_normal(x.shape)
    k = 5
    found = [NearestNeighbors(n_neighbors=k + 1, metric="cosine", algorithm="brute").fit(m)
             .kneighbors(m, return_distance=False)[:, 1:] for m in (x, y)]  # column 0 = self
    expected = np.mean([len(set(a) & set(b)) / k for a, b in zip(*found)])
    assert mutual_knn(x, y, k) == pytest.approx(expected)


def test_bad_input():
    with pytest.raises(DhwtError, match="same tokens"):
        linear_cka(np.ones((5, 2)), np.ones((4, 2)))
    with pytest.raises(DhwtError, match="constant"):
        linear_cka(np.ones((5, 2)), np.eye(5))
    with pytest.raises(DhwtError, match="NaN"):
        procrustes(np.full((5, 2), np.nan), np.ones((5, 2)))


@pytest.mark.parametrize("float32", [False, True])
def test_procrustes_of_a_copy_is_zero_and_of_a_rotation_matches_scipy(float32):
    """The error is evaluated on the rows in either mode (the closed form's square root once
    gave about 1e-4 for a copy from float32 blocks), against scipy's orthogonal_procrustes."""
    from scipy.linalg import orthogonal_procrustes

    rng = np.random.default_rng(9)
    x = (0.02 * rng.standard_normal((1000, 64)) + 0.01).astype(np.float32)
    fit = whole_space(x, x.copy(), float32=float32).procrustes
    assert fit.error < 1e-12 and fit.error_before == 0
    for y in (x @ ortho_group.rvs(64, random_state=1), rng.standard_normal(x.shape)):
        y = y.astype(np.float32)
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        rotation, _ = orthogonal_procrustes(x64, y64)
        expected = np.linalg.norm(x64 @ rotation - y64) / np.linalg.norm(y64)
        assert whole_space(x, y, float32=float32).procrustes.error == pytest.approx(
            expected, abs=1e-6)
    other = rng.standard_normal((1000, 40)).astype(np.float32)  # 64 -> 40: no identity
    fit = whole_space(x, other, float32=float32).procrustes
    assert np.isnan(fit.error_before)
    assert fit.error == pytest.approx(procrustes(x.astype(np.float64), other).error, rel=1e-6)


def _float64_blocks(x, y):
    """Centred float64 Gram blocks, computed here without the module's code."""
    xc = x.astype(np.float64) - x.astype(np.float64).mean(axis=0)
    yc = y.astype(np.float64) - y.astype(np.float64).mean(axis=0)
    return xc.T @ xc, yc.T @ yc, xc.T @ yc


@pytest.mark.parametrize("case", ["gaussian", "shifted far from 0", "hubs", "widths 48 -> 40"])
def test_float32_blocks_stay_within_their_stated_bound(case):
    """whole_space(..., float32=True) against the float64 blocks, within CKA's relative bound
    in its docstring; the Procrustes errors within float32 rounding of the float64 ones."""
    rng = np.random.default_rng(21)
    n, d = 2 * similarity.GRAM_ROWS + 1000, 48  # several chunks of GRAM_ROWS rows, one partial
    x = rng.standard_normal((n, d))
    y = 0.5 * x @ rng.standard_normal((d, 40 if case.startswith("widths") else d))
    y += rng.standard_normal(y.shape)
    if case == "shifted far from 0":  # the mean dwarfs the spread: centring keeps the bound
        x, y = x + 1e3, y - 3e3
    if case == "hubs":
        scale = np.exp(rng.normal(0, 1.5, (n, 1)))
        x, y = x * scale, y * scale
    x, y = x.astype(np.float32), y.astype(np.float32)
    old = whole_space(x, y)
    new = whole_space(x, y, float32=True)
    eps = similarity.GRAM_EPSILON
    cxx, cyy, cxy = _float64_blocks(x, y)
    centred = [np.linalg.norm(np.asarray(side, np.float64)
                              - np.asarray(side.mean(axis=0, dtype=np.float64), np.float32))
               for side in (x, y)]
    e_xx, e_yy, e_xy = (eps * centred[0] ** 2, eps * centred[1] ** 2,
                        eps * centred[0] * centred[1])
    relative = ((1 + e_xy / np.linalg.norm(cxy)) ** 2
                / ((1 - e_xx / np.linalg.norm(cxx)) * (1 - e_yy / np.linalg.norm(cyy))) - 1)
    assert abs(new.cka - old.cka) <= relative * old.cka + 1e-12
    for name in ("error", "error_before"):  # float32 products and differences on the rows
        r_old, r_new = (getattr(fit.procrustes, name) for fit in (old, new))
        assert r_new == pytest.approx(r_old, rel=1e-5, nan_ok=True), name


def test_float32_blocks_keep_constant_spaces_and_float64_inputs_exact():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3000, 8)).astype(np.float32)
    constant = np.tile(rng.standard_normal(8).astype(np.float32), (3000, 1))
    assert np.isnan(whole_space(x, constant, align=False, float32=True).cka)
    x64 = x.astype(np.float64) + 1e-9 * rng.standard_normal(x.shape)  # float64: not rounded
    fast, exact = whole_space(x64, 2 * x64, float32=True), whole_space(x64, 2 * x64)
    assert fast.cka == exact.cka
    assert (fast.procrustes.error, fast.procrustes.error_before) == (
        exact.procrustes.error, exact.procrustes.error_before)


def test_copy_residue_against_float64_differences():
    """float32 differences: exact for a copy after an untie (entries within a factor 2 of each
    other), else within a relative 2^-24 of the float64 residue."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3000, 40)).astype(np.float32)
    for y, rel in ((x + np.float32(1e-3) * rng.standard_normal(x.shape).astype(np.float32), 0),
                   (rng.standard_normal(x.shape).astype(np.float32), 2.0**-24)):
        d = x.astype(np.float64) - y.astype(np.float64)
        exact = np.sqrt((d * d).sum() / (y.astype(np.float64) ** 2).sum())
        assert abs(similarity.copy_residue(x, y) - exact) <= (rel + 1e-12) * exact  # + sums
