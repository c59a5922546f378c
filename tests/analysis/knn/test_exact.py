"""The exact KNN engine against a brute-force oracle (full float64 matrix, lexsort with the same
tie rule), KNN match scores against hand counts, the chance baseline and the stand-in its
queries see (query_stand_in: the law of a norm-matched random stand-in's cosines), `dhwt knn`."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file
from scipy import stats

from dhwt.analysis.knn import (
    METRICS, Neighbours, chance_baseline, check_matrix, knn_match, match_neighbours,
    nearest_neighbours, norm_matched_random, query_stand_in,
)
from dhwt.analysis.knn import gram
from dhwt.analysis.matrices import load_matrix
from dhwt.errors import DhwtError


def oracle(x: np.ndarray, k: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Full score matrix in float64, self masked, lexsort (score desc, index asc)."""
    x = x.astype(np.float64)
    if metric == "cos":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    if metric == "l2":
        score = -((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=2)
    else:
        score = x @ x.T
    np.fill_diagonal(score, -np.inf)
    ids = np.broadcast_to(np.arange(len(x)), score.shape)
    order = np.lexsort((ids, -score), axis=1)[:, :k]
    return order, np.take_along_axis(score, order, axis=1)


def tied_integers(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """Small integers (exact in float32, so scores tie exactly) with varied row scales (rows
    are then often not their own nearest neighbour) and some duplicated rows."""
    x = rng.integers(-2, 3, size=(n, d)) * rng.integers(1, 4, size=(n, 1))
    x[rng.choice(n, n // 5)] = x[rng.choice(n, n // 5)]
    return x.astype(np.float32)


def exact_unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """Rows with four entries +-2^e: normalising is exact, so cosines tie exactly."""
    x = np.zeros((n, d), np.float32)
    for row in x:
        row[rng.choice(d, 4, replace=False)] = rng.choice([-1, 1], 4) * 2.0 ** rng.integers(-2, 3)
    return x


@pytest.mark.parametrize("metric", ["ip", "cos", "l2"])
def test_matches_brute_force_with_ties_across_block_sizes(metric):
    rng = np.random.default_rng(0)
    for trial in range(12):
        n, d = int(rng.integers(3, 200)), int(rng.integers(4, 9))
        k = int(rng.integers(1, n)) if trial % 3 else n - 1
        x = exact_unit_rows(rng, n, d) if metric == "cos" else tied_integers(rng, n, d)
        ref, ref_scores = oracle(x, k, metric)
        for block in (32, 64, 4096):
            got = nearest_neighbours(x, k, metric, block_size=block)
            np.testing.assert_array_equal(got.indices, ref, err_msg=f"{trial=} {block=}")
            np.testing.assert_allclose(got.scores, ref_scores, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("metric", ["ip", "cos", "l2"])
def test_matches_brute_force_on_gaussian_data_with_padding(metric):
    x = np.random.default_rng(1).standard_normal((301, 24)).astype(np.float32)
    got = nearest_neighbours(x, 7, metric, block_size=64)  # 301 rows: last block padded
    np.testing.assert_array_equal(got.indices, oracle(x, 7, metric)[0])


def test_self_is_masked_even_when_not_its_own_top_neighbour():
    x = np.array([[1, 0], [2, 0], [0, 1], [0, 3]], np.float32)
    full = x @ x.T
    assert full[0].argmax() != 0  # row 0's largest inner product is with row 1, not itself
    got = nearest_neighbours(x, 2, "ip")
    # row 0: <x0,x1>=2, <x0,x2>=0, <x0,x3>=0 -> [1, 2] (tie 0 = 0 goes to the lower id 2)
    np.testing.assert_array_equal(got.indices, [[1, 2], [0, 2], [3, 0], [2, 0]])
    assert not (got.indices == np.arange(4)[:, None]).any()


def test_rows_float32_cannot_separate_are_resolved_in_float64():
    # a huge shared component: every float32 inner product rounds to the same value, the float64
    # ones differ in the small second column
    rng = np.random.default_rng(2)
    small = rng.permutation(200).astype(np.float64)[:, None] / 200
    x = np.hstack([np.full((200, 1), 4096.0), small])
    got = nearest_neighbours(x, 5, "ip")
    np.testing.assert_array_equal(got.indices, oracle(x, 5, "ip")[0])


def _bfloat16_mm(a, b, *, out):
    """A matmul that rounds its inputs to bfloat16, as oneDNN may under torch's "bf16" setting."""
    return out.copy_(torch.matmul(a.bfloat16(), b.bfloat16()).float())


def _float32_mm(a, b, *, out):
    """A matmul at float32 accuracy (through float64), as oneDNN computes on CPUs without
    bfloat16 units."""
    return out.copy_(torch.matmul(a.double(), b.double()).float())


def _neighbour_data() -> np.ndarray:
    """Rows whose inner products differ only below bfloat16's precision (1 + small steps)."""
    rng = np.random.default_rng(3)
    return (1 + rng.integers(0, 64, size=(150, 24)) * 2.0**-14).astype(np.float32)


@pytest.mark.parametrize("mm, float32", [(_float32_mm, True), (_bfloat16_mm, False)],
                         ids=["onednn keeps float32", "onednn rounds to bfloat16"])
def test_gram_blocks_use_onednn_only_where_its_probe_shows_float32(monkeypatch, mm, float32):
    """Which branch a CPU takes is its own (oneDNN rounds to bfloat16 on AMX machines): both
    branches are forced here. Each block shape is probed once; its blocks then go to oneDNN
    only where the probe showed float32, so either way they are float32 products and the
    neighbours are exact (bfloat16 blocks would miss them: entries 1 + small differences all
    round to 1)."""
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    monkeypatch.setenv("DHWT_KNN_PRECISION", "float32")  # the float32 pass's Gram blocks
    calls = []
    monkeypatch.setattr(torch, "mm", lambda *a, **k: calls.append(1) or mm(*a, **k))
    x = _neighbour_data()
    a, out = torch.from_numpy(x), torch.empty(len(x), len(x))
    with gram.fresh_probes():
        for _ in range(2):
            gram.gemm(a, a, out)
            np.testing.assert_allclose(out.numpy(), x.astype(np.float64) @ x.T, rtol=1e-6)
        assert len(calls) == (3 if float32 else 1)  # one probe, then the blocks or none
        got = nearest_neighbours(x, 5, "ip", block_size=64)
    np.testing.assert_array_equal(got.indices, oracle(x, 5, "ip")[0])


def test_gram_blocks_use_numpy_without_onednn(monkeypatch):
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    monkeypatch.setenv("DHWT_KNN_PRECISION", "float32")
    monkeypatch.setattr(torch, "mm", lambda *a, **k: pytest.fail("torch.mm used without oneDNN"))
    x = _neighbour_data()
    with gram.fresh_probes():
        got = nearest_neighbours(x, 5, "ip", block_size=64)
    np.testing.assert_array_equal(got.indices, oracle(x, 5, "ip")[0])


@pytest.mark.parametrize("metric", METRICS)
def test_the_candidate_pass_misses_no_neighbour_in_either_scan_order(monkeypatch, metric):
    """The candidate pass must nominate the best m = k + slack rows of every row, and its m-th
    score bound every row left out, or the re-rank certifies a wrong result (a row goes to the
    brute-force fallback only where its k-th score does not beat that bound). Blocks of 320
    rows (10 tiles of 32, enough for a first block's m-th tile maximum), scanned longest row
    first (inner product) or in index order (cosine, l2); rows of spread norms (hubs)."""
    monkeypatch.setenv("DHWT_KNN_PRECISION", "float32")
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((700, 6)) * rng.lognormal(0, 1, (700, 1))).astype(np.float32)
    with gram.fresh_probes():
        got = nearest_neighbours(x, 9, metric, block_size=320)
    ref, ref_scores = oracle(x, 9, metric)
    np.testing.assert_array_equal(got.indices, ref)
    np.testing.assert_allclose(got.scores, ref_scores, rtol=1e-9, atol=1e-9)


def test_match_scores_by_hand():
    a = Neighbours("ip", np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]), np.zeros((4, 3)))
    b = Neighbours("ip", np.array([[3, 2, 1], [5, 6, 0], [4, 5, 6], [0, 1, 2]]), np.zeros((4, 3)))
    m = match_neighbours(a, b)
    np.testing.assert_array_equal(m.intersection, [3, 1, 0, 3])
    np.testing.assert_allclose(m.overlap, [1, 1 / 3, 0, 1])
    np.testing.assert_allclose(m.jaccard, [1, 1 / 5, 0, 1])  # union = 2k - |A∩B|
    assert m.mean_overlap == pytest.approx((1 + 1 / 3 + 0 + 1) / 4)
    w = np.array([0.5, 0.5, 0, 0])
    assert match_neighbours(a, b, weights=w).mean_jaccard == pytest.approx(0.5 * 1 + 0.5 / 5)


def test_identical_spaces_match_fully_and_orthogonal_transforms_keep_neighbours():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((150, 12))
    q, _ = np.linalg.qr(rng.standard_normal((12, 12)))
    m = knn_match(a, a @ q, 6)  # inner products are invariant under a rotation
    assert m.mean_jaccard == pytest.approx(1.0) and m.mean_overlap == pytest.approx(1.0)


def test_token_subset_is_the_submatrix_and_weights_average():
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((120, 8)), rng.standard_normal((120, 8))
    keep = np.arange(0, 120, 3)
    m = knn_match(a, b, 4, tokens=keep[::-1])
    ref_a, ref_b = oracle(a[keep], 4, "ip")[0], oracle(b[keep], 4, "ip")[0]
    inter = [len(set(ra) & set(rb)) for ra, rb in zip(ref_a, ref_b)]
    np.testing.assert_array_equal(m.tokens, keep)
    np.testing.assert_array_equal(m.intersection, inter)
    freq = rng.integers(0, 5, 120).astype(float)
    mw = knn_match(a, b, 4, tokens=keep, weights=freq)
    expected = (freq[keep] * np.array(inter) / 4).sum() / freq[keep].sum()
    assert mw.mean_overlap == pytest.approx(expected)


def test_norm_matched_random_keeps_norms_and_draws_directions():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 16)) * rng.lognormal(0, 1, (300, 1))
    y = norm_matched_random(x, np.random.default_rng(0))
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), np.linalg.norm(x, axis=1), rtol=1e-5)
    cos = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
    assert abs(cos.mean()) < 0.1
    np.testing.assert_array_equal(y, norm_matched_random(x, np.random.default_rng(0)))


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


def test_chance_baseline_shared_norms_beat_uniform_chance_under_ip_only():
    rng = np.random.default_rng(6)
    n, d, k = 400, 32, 10
    norms = rng.lognormal(0, 1.0, (n, 1))  # shared heavy-tailed norms: hub tokens in both
    a, b = rng.standard_normal((n, d)) * norms, rng.standard_normal((n, d)) * norms
    uniform = k / (n - 1)
    ip = chance_baseline(a, b, k, "ip", generator=np.random.default_rng(0))
    cos = chance_baseline(a, b, k, "cos", generator=np.random.default_rng(0))
    assert ip.mean_overlap > 4 * uniform  # hubs are everybody's neighbours in both spaces
    assert cos.mean_overlap == pytest.approx(uniform, abs=0.02)  # norms do not matter


@pytest.mark.parametrize("call, message", [
    (lambda: knn_match(np.ones((5, 2)), np.ones((6, 2)), 2), "row counts must be equal"),
    (lambda: knn_match(np.eye(5), np.eye(5), 5), "1 <= k < number of tokens"),
    (lambda: knn_match(np.eye(5), np.eye(5), 0), "1 <= k < number of tokens"),
    (lambda: knn_match(np.eye(5), np.eye(5), 2, tokens=[0, 1]), "1 <= k < number of tokens (2)"),
    (lambda: knn_match(np.eye(5) * np.nan, np.eye(5), 2), "NaN or infinite"),
    (lambda: knn_match(np.eye(5), np.full((5, 5), np.inf), 2), "B has NaN or infinite"),
    (lambda: knn_match(np.eye(5), np.eye(5), 2, metric="dot"), "metric must be one of"),
    (lambda: knn_match(np.zeros((5, 2)), np.eye(5)[:, :2], 2, metric="cos"), "row 0 is zero"),
    (lambda: knn_match(np.ones(5), np.ones(5), 2), "2-D matrix"),
    (lambda: knn_match(np.eye(5), np.eye(5), 2, tokens=[0, 9]), "token ids must lie in"),
    (lambda: knn_match(np.eye(5), np.eye(5), 2, weights=[1, 2]), "one value per token"),
    (lambda: knn_match(np.eye(5), np.eye(5), 2, weights=-np.ones(5)), "non-negative"),
])
def test_bad_input_is_a_dhwt_error(call, message):
    with pytest.raises(DhwtError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


def _snapshot(run_dir, step, inp, out):
    folder = run_dir / "embeddings"
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"step": str(step), "tied": "false", "seeds": json.dumps([1, 2]),
            "vocab": json.dumps([str(i) for i in range(inp.shape[1])])}
    save_file({"input": inp, "output": out}, str(folder / f"step_{step:07d}.safetensors"),
              metadata=meta)


def test_cli_on_snapshots_and_files(tmp_path, cli):
    rng = np.random.default_rng(7)
    inp, out = (rng.standard_normal((2, 60, 6)).astype(np.float32) for _ in range(2))
    _snapshot(tmp_path / "run", 100, inp, out)
    np.save(tmp_path / "a.npy", out[1])
    code, text, _ = cli(["knn", f"{tmp_path / 'run'}@last", str(tmp_path / "a.npy"),
                         "--side-a", "output", "--member-a", "1", "--k", "4",
                         "--per-token", str(tmp_path / "t.csv")])
    assert code == 0
    assert "jaccard  1.0000" in text and "overlap  1.0000" in text and "chance" in text
    rows = np.loadtxt(tmp_path / "t.csv", delimiter=",", skiprows=1)
    assert rows.shape == (60, 5) and (rows[:, 1] == 4).all()

    (tmp_path / "tokens.txt").write_text("0 2 4 6 8 10 12 14")
    torch.save({"w": torch.from_numpy(inp[0])}, tmp_path / "c.pt")
    code, text, _ = cli(["knn", f"{tmp_path / 'run'}@100", str(tmp_path / "c.pt"), "--k", "3",
                         "--tokens", str(tmp_path / "tokens.txt"), "--score", "overlap",
                         "--no-baseline"])
    assert code == 0 and "overlap  1.0000" in text and "jaccard" not in text
    assert "8 tokens from" in text and "chance" not in text


@pytest.mark.parametrize("args, message", [
    (["A", "missing.npy"], "missing.npy is not a file"),
    (["RUN@7", "A"], "no snapshot at step 7"),
    (["A", "junk.npy"], "cannot read"),
    (["A", "B", "--k", "60"], "1 <= k < number of tokens (60)"),
    (["A", "B", "--tokens", "nope.txt"], "does not exist"),
    (["A", "two.safetensors"], "none is named 'input'"),
    (["A", "short.npy"], "row counts must be equal"),
])
def test_cli_errors_are_one_line(tmp_path, cli, args, message):
    rng = np.random.default_rng(8)
    _snapshot(tmp_path / "run", 100, *(rng.standard_normal((1, 60, 4)).astype(np.float32),) * 2)
    np.save(tmp_path / "a.npy", rng.standard_normal((60, 4)))
    np.save(tmp_path / "short.npy", rng.standard_normal((50, 4)))
    (tmp_path / "junk.npy").write_bytes(b"not an array")
    save_file({"x": np.ones((60, 2), np.float32), "y": np.ones((60, 2), np.float32)},
              str(tmp_path / "two.safetensors"))
    names = {"A": "a.npy", "B": "a.npy", "RUN@7": "run@7"}
    argv = ["knn"] + [str(tmp_path / names.get(a, a)) if not a.startswith("-") and not
                      a.isdigit() else a for a in args]
    code, out, err = cli(argv)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err


def test_load_matrix_picks_member_and_tensor(tmp_path):
    x = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    np.save(tmp_path / "x.npy", x)
    np.testing.assert_array_equal(load_matrix(str(tmp_path / "x.npy"), member=1).values, x[1])
    with pytest.raises(DhwtError, match="member 2 does not exist"):
        load_matrix(str(tmp_path / "x.npy"), member=2)
    save_file({"output": x[0], "input": x[1]}, str(tmp_path / "s.safetensors"))
    np.testing.assert_array_equal(
        load_matrix(str(tmp_path / "s.safetensors"), side="output").values, x[0])


@pytest.mark.parametrize("largest", [1e18, 1e154, 1e300, np.finfo(np.float64).max])
def test_values_too_large_for_float32_scores_are_refused_by_name(largest):
    """Squared, 1e300 is past float64's range: the check itself must not overflow."""
    x = np.ones((3, 4))
    x[1, 2] = -largest
    with pytest.raises(DhwtError, match=r"X has values too large for float32 scores \(max "
                                        r"\|value\| .*, at most 5e\+17 for 4 columns\)"):
        check_matrix(x, "X")
    x[1, 2] = -4.9e17  # 4 * (4.9e17)^2 < 1e36: scores fit float32
    assert check_matrix(x, "X") is x
