"""The two candidate passes of the exact KNN engine, each forced on any machine: float32, and
bfloat16 with widened scores that are upper bounds of the exact ones. Either way the neighbours
equal a float64 brute force; the bound itself is checked against float64 products, through the
oneDNN path where this machine has one and through plain float32 multiplication everywhere."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dhwt.analysis.knn import gram
from dhwt.analysis.knn import METRICS, nearest_neighbours
from dhwt.errors import DhwtError

from tests.analysis.test_knn import exact_unit_rows, oracle, tied_integers


@pytest.fixture(params=gram.PRECISIONS)
def precision(request, monkeypatch):
    monkeypatch.setattr(gram, "_PRECISION", request.param)
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


def test_neighbours_that_bfloat16_cannot_tell_apart_are_still_exact(monkeypatch):
    """Inner products that differ only far below bfloat16's precision: the widened pass keeps
    them all as candidates, the float64 re-rank orders them."""
    monkeypatch.setattr(gram, "_PRECISION", "bfloat16")
    rng = np.random.default_rng(3)
    x = (1 + rng.integers(0, 64, size=(150, 24)) * 2.0**-14).astype(np.float32)
    np.testing.assert_array_equal(nearest_neighbours(x, 5, "ip", block_size=64).indices,
                                  oracle(x, 5, "ip")[0])


def widened_product(left, right, gemm) -> tuple[np.ndarray, float]:
    wl, wr, scale = gram.widened(left, right)
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
            slack = 2.5 * (2 * gram._U16) * norms + 1e-30  # the widening stays about 2c
            assert (widened <= exact * scale + slack).all()


def test_bfloat16_rounding_up():
    values = np.array([0.0, 1.0, 1 + 2.0**-20, 3.14159, 1e-30, 7.5e7, 2.0**-126])
    up = gram._bfloat16_up(values)
    assert (up >= values).all()
    assert (torch.from_numpy(up).bfloat16().float().numpy() == up).all()  # bfloat16 values
    below = (up.view(np.uint32) - 0x10000).view(np.float32)  # the next bfloat16 down
    assert ((below < values) | (up == values)).all()


def test_the_precision_is_probed_once_and_may_be_forced(monkeypatch):
    monkeypatch.setattr(gram, "_PRECISION", None)
    monkeypatch.setenv("DHWT_KNN_PRECISION", "float32")
    assert gram.candidate_precision() == "float32"
    monkeypatch.setattr(gram, "_PRECISION", None)
    monkeypatch.setenv("DHWT_KNN_PRECISION", "float16")
    with pytest.raises(DhwtError, match="DHWT_KNN_PRECISION must be one of"):
        gram.candidate_precision()
    monkeypatch.delenv("DHWT_KNN_PRECISION")
    monkeypatch.setattr(gram, "_PRECISION", None)
    monkeypatch.setattr(gram, "_ONEDNN_BFLOAT16", None)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    assert gram.candidate_precision() == "float32"  # no oneDNN: no bfloat16 pass
    monkeypatch.setattr(gram, "_bfloat16_speedup", lambda: pytest.fail("probed twice"))
    assert gram.candidate_precision() == "float32"


def test_a_onednn_that_rounds_its_sums_fails_the_bfloat16_probe(monkeypatch):
    """A matmul whose sums are not float32 (here: rounded to bfloat16) must not be used."""
    def rounded_mm(a, b, out):
        return out.copy_((a @ b).bfloat16().float())

    monkeypatch.setattr(gram, "_ONEDNN_BFLOAT16", None)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    monkeypatch.setattr(torch, "mm", rounded_mm)
    assert gram._onednn_bfloat16() is False


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
