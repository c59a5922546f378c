"""The three candidate passes of the exact KNN engine, each forced on any machine: float32, and
bfloat16 (float32 sums, or sums rounded to bfloat16 on output) with widened scores that are
upper bounds of the exact ones. Either way the neighbours equal a float64 brute force; the bound
itself is checked against float64 products, through this machine's bfloat16 paths and through
plain float32 multiplication (rounded to bfloat16 for the rounded-output bound) everywhere."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dhwt.analysis.knn import gram
from dhwt.analysis.knn import METRICS, nearest_neighbours
from dhwt.errors import DhwtError

from tests.analysis.knn.test_exact import exact_unit_rows, oracle, tied_integers


#: The bfloat16 unit roundoff (8 significant bits, round to nearest), from torch, not gram.
U16 = torch.finfo(torch.bfloat16).eps / 2


@pytest.fixture
def fresh():
    """This process's precision choice and probes made afresh for one test, then restored."""
    with gram.fresh_probes():
        yield


@pytest.fixture(params=gram.KNN_PRECISIONS)
def precision(request, monkeypatch, fresh):
    """Each candidate pass in turn, forced through DHWT_KNN_PRECISION."""
    monkeypatch.setenv("DHWT_KNN_PRECISION", request.param)
    return request.param


@pytest.mark.parametrize("metric", METRICS)
def test_each_precision_gives_the_brute_force_neighbours(precision, metric):
    rng = np.random.default_rng(7)
    for trial in range(6):
        n, d = int(rng.integers(40, 300)), int(rng.integers(3, 40))
        k = int(rng.integers(1, min(n, 25)))
        if trial % 3 == 0:  # exact ties
            x = exact_unit_rows(rng, n, d) if metric == "cos" else tied_integers(rng, n, d)
        else:  # hubs: row scales spread over two orders of magnitude
            x = (rng.standard_normal((n, d)) * np.exp(rng.normal(0, 1.2, (n, 1))))
            x = x.astype(np.float32)
        ref, ref_scores = oracle(x, k, metric)
        for block in (32, 4096):
            got = nearest_neighbours(x, k, metric, block_size=block)
            np.testing.assert_array_equal(got.indices, ref, err_msg=f"{precision} {metric}")
            np.testing.assert_allclose(got.scores, ref_scores, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("precision", ["bfloat16", "bfloat16-output"], indirect=True)
def test_neighbours_that_bfloat16_cannot_tell_apart_are_still_exact(precision):
    """Inner products that differ only far below bfloat16's precision: the widened pass keeps
    them all as candidates, the float64 re-rank orders them."""
    rng = np.random.default_rng(3)
    x = (1 + rng.integers(0, 64, size=(150, 24)) * 2.0**-14).astype(np.float32)
    np.testing.assert_array_equal(nearest_neighbours(x, 5, "ip", block_size=64).indices,
                                  oracle(x, 5, "ip")[0])


@pytest.mark.parametrize("metric", METRICS)
def test_each_forced_precision_is_exact_on_adversarial_rows(precision, metric):
    """Through DHWT_KNN_PRECISION: near-ties within the bfloat16 bound (rows a few float32 steps
    apart in one entry), huge and tiny norms side by side (10^-15 to 10^15), zero rows (not for
    cosine), duplicated rows (exact ties)."""
    rng = np.random.default_rng(17)
    base = rng.standard_normal((40, 12)).astype(np.float32)
    near = base.copy()
    near[:, 0] = np.nextafter(near[:, 0], np.float32(np.inf) * rng.choice([-1, 1], 40))
    scales = np.float32(10.0) ** rng.integers(-15, 16, (40, 1)).astype(np.float32)
    spread = rng.standard_normal((40, 12)).astype(np.float32) * scales
    x = np.vstack([base, near, base[:10], spread,
                   np.zeros((0 if metric == "cos" else 5, 12), np.float32)])
    ref, ref_scores = oracle(x, 7, metric)
    got = nearest_neighbours(x, 7, metric, block_size=32)
    assert gram.candidate_precision() == precision
    np.testing.assert_array_equal(got.indices, ref)
    np.testing.assert_allclose(got.scores, ref_scores, rtol=1e-12, atol=1e-9)


def widened_product(left, right, gemm, rounded_output=False) -> tuple[np.ndarray, float]:
    wl, wr, scale = gram.widened(left, right, rounded_output)
    out = torch.empty(len(left), len(right))
    gemm(torch.from_numpy(wl), torch.from_numpy(wr), out)
    return out.double().numpy(), scale


@pytest.mark.parametrize("gemm", ["float32 multiplication", "this machine's bfloat16 path"])
def test_widened_scores_bound_the_exact_ones_from_above(gemm):
    mm = gram.gemm if gemm == "float32 multiplication" else gram.gemm_bfloat16
    rng = np.random.default_rng(11)
    cases = [rng.standard_normal((200, 64)),
             rng.standard_normal((200, 300)) * np.exp(rng.normal(0, 3, (200, 1))),  # wide range
             rng.standard_normal((100, 16)) * 1e-30,  # tiny values: flushed products
             np.vstack([np.zeros((3, 8)), rng.standard_normal((60, 8)) * 1e20])]
    for x in cases:
        x = x.astype(np.float32)
        for left, right in ((x, x), (x, -x[::-1].copy())):  # one matrix (symmetric) or two
            exact = left.astype(np.float64) @ right.astype(np.float64).T
            widened, scale = widened_product(left, right, mm)
            assert (widened >= exact * scale).all()
            norms = (np.linalg.norm(left.astype(np.float64), axis=1)[:, None]
                     * np.linalg.norm(right.astype(np.float64), axis=1)[None, :] * scale)
            slack = 2.5 * (2 * U16) * norms + 1e-30  # the widening stays about 2c
            assert (widened <= exact * scale + slack).all()


def _float32_then_rounded(a, b, out):
    """float32 products and sums, each sum rounded once to bfloat16 (to nearest)."""
    gram.gemm(a, b, out)
    out.copy_(out.bfloat16())


@pytest.mark.parametrize("gemm", ["float32 rounded to bfloat16", "this machine's bfloat16 path"])
def test_rounded_output_scores_bound_the_exact_ones_and_are_not_vacuous(gemm):
    """The bound of widened(..., rounded_output=True): never below the exact score, at most
    (2C + u)(1 + 2^-6) |l_i||r_j| above it (C = widening(d, True)), and on random rows the
    largest excess is within a factor 2.5 of that bound (1.8 on this machine: the widening
    column alone adds C)."""
    mm = _float32_then_rounded if gemm.startswith("float32") else gram.BfloatOutput()
    rng = np.random.default_rng(13)
    cases = [rng.standard_normal((200, 64)),
             rng.standard_normal((200, 300)) * np.exp(rng.normal(0, 3, (200, 1))),
             rng.standard_normal((100, 16)) * 1e-30,
             np.vstack([np.zeros((3, 8)), rng.standard_normal((60, 8)) * 1e20])]
    for x in cases:
        x = x.astype(np.float32)
        bound = 2 * gram.widening(x.shape[1], True) + U16
        for left, right in ((x, x), (x, -x[::-1].copy())):
            exact = left.astype(np.float64) @ right.astype(np.float64).T
            widened, scale = widened_product(left, right, mm, rounded_output=True)
            assert (widened >= exact * scale).all()
            norms = (np.linalg.norm(left.astype(np.float64), axis=1)[:, None]
                     * np.linalg.norm(right.astype(np.float64), axis=1)[None, :] * scale)
            big = norms > 1e-30
            excess = (widened - exact * scale)[big] / norms[big]
            assert excess.max() <= bound * (1 + 2.0**-6)
            assert excess.max() >= bound / 2.5


def _partial_sums_in_bfloat16(a, b, out=None):
    """A matmul that rounds its running sums to bfloat16 every 32 terms."""
    total = torch.zeros(a.shape[0], b.shape[1], dtype=torch.bfloat16)
    for s in range(0, a.shape[1], 32):
        total = (total.float() + a[:, s:s + 32].float() @ b[s:s + 32].float()).bfloat16()
    return total if out is None else out.copy_(total)


def test_a_matmul_that_rounds_partial_sums_fails_the_rounded_output_probe(monkeypatch):
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)  # no oneDNN pass
    monkeypatch.setattr(torch, "mm", _partial_sums_in_bfloat16)
    with gram.fresh_probes():
        assert gram.exact_passes() == []
    monkeypatch.setattr(torch, "mm", lambda a, b, out=None: (a.float() @ b.float()).bfloat16())
    with gram.fresh_probes():
        assert gram.exact_passes() == ["bfloat16-output"]  # float32 sums, rounded once


BOTH = ["bfloat16", "bfloat16-output"]


@pytest.mark.parametrize("passes, speedups, chosen", [
    ([], {}, "float32"),
    (BOTH, {"bfloat16": 3.0, "bfloat16-output": 3.5}, "bfloat16-output"),
    (BOTH, {"bfloat16": 3.0, "bfloat16-output": 2.5}, "bfloat16"),
    (["bfloat16-output"], {"bfloat16": 9.0, "bfloat16-output": 2.5}, "bfloat16-output"),
    (BOTH, {"bfloat16": 1.9, "bfloat16-output": 1.5}, "float32"),
])
def test_the_fastest_exact_pass_is_chosen(passes, speedups, chosen):
    assert gram.fastest(passes, speedups) == chosen


@pytest.mark.parametrize("rounded_output", [False, True])
def test_the_widening_column_is_the_least_bfloat16_value_at_or_above_c_times_the_norm(
        rounded_output):
    """widened's extra column of the left side is C |l_i| (C = widening(d)) rounded up to a
    bfloat16 value: never below it, and the next bfloat16 value down is below it. Entries of at
    most 3/4 in magnitude keep the scales at 1; the row norms span 60 orders of magnitude, and a
    zero row gives 0."""
    rng = np.random.default_rng(8)
    d = 16
    rows = rng.uniform(-0.75, 0.75, (300, d)) * 10.0 ** rng.integers(-30, 1, (300, 1))
    left = np.vstack([rows, np.zeros((1, d)), np.full((1, d), 0.75)]).astype(np.float32)
    right = np.full((5, d), 0.75, np.float32)
    wide, _, scale = gram.widened(left, right, rounded_output)
    assert scale == 1
    exact = gram.widening(d, rounded_output) * np.linalg.norm(left.astype(np.float64), axis=1)
    up = wide[:, d]
    assert (up >= exact).all()
    assert (torch.from_numpy(up).bfloat16().float().numpy() == up).all()  # bfloat16 values
    below = (up.view(np.uint32) - 0x10000).view(np.float32)  # the next bfloat16 down
    assert ((below < exact) | (up == exact)).all()


def test_the_precision_is_probed_once_and_may_be_forced(monkeypatch):
    monkeypatch.setenv("DHWT_KNN_PRECISION", "float32")
    with gram.fresh_probes():
        assert gram.candidate_precision() == "float32"
    monkeypatch.setenv("DHWT_KNN_PRECISION", "float16")
    with gram.fresh_probes(), pytest.raises(DhwtError, match="DHWT_KNN_PRECISION must be one of"):
        gram.candidate_precision()
    monkeypatch.delenv("DHWT_KNN_PRECISION")
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    monkeypatch.setattr(torch, "mm", _partial_sums_in_bfloat16)
    with gram.fresh_probes():
        assert gram.candidate_precision() == "float32"  # no exact bfloat16 matmul: float32
        monkeypatch.setattr(torch.backends.mkldnn, "is_available",
                            lambda: pytest.fail("probed twice"))
        monkeypatch.setattr(torch, "mm", lambda *a, **k: pytest.fail("probed twice"))
        assert gram.candidate_precision() == "float32"


def test_a_onednn_that_rounds_its_sums_fails_the_bfloat16_probe(monkeypatch):
    """A matmul whose sums are not float32 (here: rounded to bfloat16) must not be used."""
    def rounded_mm(a, b, out=None):
        rounded = (a @ b).bfloat16().float()
        return rounded if out is None else out.copy_(rounded)

    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    monkeypatch.setattr(torch, "mm", rounded_mm)
    with gram.fresh_probes():
        assert "bfloat16" not in gram.exact_passes()


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no GPU: the CUDA path is run where one is")
@pytest.mark.parametrize("metric", METRICS)
def test_a_gpu_search_gives_the_brute_force_neighbours(metric):
    rng = np.random.default_rng(5)
    x = tied_integers(rng, 3000, 16) if metric != "cos" else exact_unit_rows(rng, 3000, 16)
    got = nearest_neighbours(x, 10, metric, device="cuda", block_size=1024)
    np.testing.assert_array_equal(got.indices, oracle(x, 10, metric)[0])


def test_knn_on_a_missing_gpu_is_one_error_line(cli, tmp_path):
    np.save(tmp_path / "a.npy", np.eye(6, dtype=np.float32))
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    code, out, err = cli(["knn", tmp_path / "a.npy", tmp_path / "a.npy", "--k", 2,
                          "--device", "cuda"])
    assert code == 2 and out == "" and err.startswith("error: device cuda asks for a GPU")
    code, out, _ = cli(["knn", tmp_path / "a.npy", tmp_path / "a.npy", "--k", 2,
                        "--device", "cpu", "--no-baseline"])
    assert code == 0 and "overlap" in out
