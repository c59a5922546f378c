"""The exact k nearest neighbours of every row by a blocked search of the Gram matrix, and
KNN Match Similarity of two spaces (definitions and tie rule: dhwt.analysis.knn).

Exactness: a blocked pass over the Gram matrix nominates the best m candidates of every row (same
tie rule); their scores are then recomputed in float64 and the top k taken. A row is certified
when its k-th float64 score beats a bound on every row left out; a row that is not (near-ties
across the boundary) is searched again by brute force in float64. So the result always equals a
float64 brute force (full matrix, same tie rule). The pass runs in one of two precisions, chosen
per process by probes (candidate_precision): float32 (m = k + 4, bound: the m-th float32 score
plus its rounding bound), or bfloat16 where oneDNN computes bfloat16 products into float32 sums
several times faster (AMX): every score is then widened to an upper bound of the exact one
(gram.widened: at most about 1.6% of |x_i||x_j| above it) and m = k + 12; or bfloat16-output,
the same sums rounded to bfloat16 on output where that is faster still (half the bytes
written), the widening covering that rounding too (2.7%) and m = k + 16.

Cost: the Gram matrix is symmetric, so each off-diagonal block G = X_I X_J^T is computed once and
read twice, by the rows of I (along its rows) and by the rows of J (along its columns): half the
blocks of a full search. float32 blocks are products by oneDNN's AVX-512 kernel where a probe
shows that it keeps float32 (see gram.gemm), faster than numpy's OpenBLAS, and bfloat16 blocks
faster still where the CPU has AMX (the ratios: experiments/benchmarks/README.md). phase_times()
says where the time goes.
Memory stays bounded: one block (block_size^2 floats) at a time, never V x V, and a float64 copy
of the matrix for the re-rank only up to 512 MiB (rerank's _COPY_BYTES). Inside a block, a
row only looks at the entries that can beat its current k+slack-th candidate: tile maxima (w
consecutive entries) are compared with that threshold first and only the few tiles that pass
are read. Under inner product the rows are scanned longest first, so that every row's first
block holds the long rows that are most rows' neighbours: its threshold starts near its final
value and later blocks offer few candidates (18 per row in all instead of 58 on the GPT-2-sized
benchmark).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch
from tqdm import tqdm

from dhwt.analysis.knn.candidates import TILE, Best, column_candidates, row_candidates
from dhwt.analysis.knn.gram import (BLOCK, BfloatOutput, candidate_precision, gemm,
                                    gemm_bfloat16, row_squares, widened)
from dhwt.analysis.knn.neighbours import (DEFAULT_K, KnnMatch, Neighbours, average_weights,
                                          check_k, match_neighbours, select_tokens)
from dhwt.defaults import METRICS
from dhwt.analysis.knn.rerank import SLACK, rerank, work_matrices
from dhwt.checks import check_matrix
from dhwt.errors import DhwtError

#: Extra candidates per row in each bfloat16 pass (at least), whose scores are upper bounds at
#: most about 1.6% (bfloat16-output: 2.7%) of |x_i||x_j| above the exact ones (see gram.widened);
#: on bench_knn's data k + 12 leaves no row to the brute-force fallback, k + 6 leaves 3% of them;
#: with bfloat16 output k + 12 leaves 0.1% of them (30,000 rows), k + 16 one row.
WIDE_SLACK = {"bfloat16": 12, "bfloat16-output": 16}



def nearest_neighbours(x: np.ndarray, k: int, metric: str = "ip", *, block_size: int = BLOCK,
                       slack: int = SLACK, progress: bool | None = False,
                       name: str = "matrix", device: str | torch.device = "cpu") -> Neighbours:
    """Exact k nearest neighbours (self excluded) of every row of x (n, d); see the module doc.
    device: a GPU searches every row against all rows there (float32 blocks without TF32,
    dhwt.analysis.knn.sample), the re-rank stays float64 on the CPU; the result is the same.

    Examples:
        >>> import numpy as np
        >>> x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
        >>> near = nearest_neighbours(x, 1, "l2")  # row 0's tie (rows 1 and 2) goes to row 1
        >>> near.indices.ravel().tolist(), near.scores.ravel().tolist()  # -||x_i - x_j||^2
        ([1, 0, 0, 1], [-1.0, -1.0, -1.0, -41.0])
        >>> nearest_neighbours(x, 2, "ip").indices.tolist()  # inner product: the long row is a hub
        [[1, 2], [3, 0], [3, 0], [1, 2]]
    """
    x = check_matrix(x, name)
    n = x.shape[0]
    check_k(k, n)
    if metric not in METRICS:
        raise DhwtError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < TILE:
        raise DhwtError(f"block_size must be an integer >= {TILE}, got {block_size!r}")
    if isinstance(slack, bool) or not isinstance(slack, int) or slack < 0:
        raise DhwtError(f"slack must be a non-negative integer, got {slack!r}")
    if torch.device(device).type != "cpu":
        from dhwt.analysis.knn.sample import sampled_neighbours

        return sampled_neighbours(x, np.arange(n), k, metric, block_size=block_size,
                                  slack=slack, progress=progress, name=name, device=device)
    # bfloat16 bounds are relative to |left_i| |right_j|: loose for l2's augmented rows
    precision = candidate_precision()
    wide = metric != "l2" and precision != "float32"
    m = min(k + (max(slack, WIDE_SLACK[precision]) if wide else slack), n - 1)
    with _phase("other"):
        left, right, exact, error = work_matrices(x, metric, name)
        if wide:
            left, right, scale = widened(left, right, precision == "bfloat16-output")
        # inner products: the longest rows first, so that every row meets its likely neighbours
        # (the long rows, "hubs") in its first block and later blocks offer few candidates
        order = (np.argsort(-np.einsum("ij,ij->i", x, x), kind="stable") if metric == "ip"
                 else None)
    cand, kth = _candidates(left, right, n, m, block_size - block_size % TILE, progress, order,
                            (gemm if not wide else gemm_bfloat16 if precision == "bfloat16"
                             else BfloatOutput()))
    with _phase("rerank"):
        return rerank(exact, cand, kth / scale if wide else kth + error, k, metric)


def knn_match(a: np.ndarray, b: np.ndarray, k: int = DEFAULT_K, metric: str = "ip", *,
              tokens: np.ndarray | None = None, weights: np.ndarray | None = None,
              block_size: int = BLOCK, progress: bool | None = False,
              device: str | torch.device = "cpu") -> KnnMatch:
    """KNN Match Similarity of spaces a (V, d_a) and b (V, d_b), searched on `device`.

    tokens: row ids to keep (e.g. tokens seen in training): neighbours are then searched among
    these rows only and scores averaged over them. weights: (V,) non-negative per-token weights
    of the average (e.g. training frequencies), restricted to `tokens`; zero weights leave a token
    out of the average but not out of the neighbour search.

    Examples:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> a = rng.standard_normal((50, 8))
        >>> rotation, _ = np.linalg.qr(rng.standard_normal((8, 8)))
        >>> match = knn_match(a, 2 * a @ rotation, k=5)  # a rotated, scaled copy: same neighbours
        >>> round(match.mean_jaccard, 6), round(match.mean_overlap, 6), match.intersection.shape
        (1.0, 1.0, (50,))
        >>> match = knn_match(a, rng.standard_normal((50, 8)), k=5, tokens=np.arange(10))
        >>> match.tokens.tolist() == list(range(10)), match.jaccard.shape  # rows 0-9 searched
        (True, (10,))
    """
    a, b = check_matrix(a, "A"), check_matrix(b, "B")
    if a.shape[0] != b.shape[0]:
        raise DhwtError(f"A has {a.shape[0]} rows and B has {b.shape[0]}; KNN match compares "
                        "the same tokens in both, so the row counts must be equal")
    ids = select_tokens(tokens, a.shape[0])
    w = average_weights(weights, a.shape[0], ids)
    check_k(k, len(ids))
    if len(ids) < a.shape[0]:
        a, b = a[ids], b[ids]
    na = nearest_neighbours(a, k, metric, block_size=block_size, progress=progress, name="A",
                            device=device)
    nb = nearest_neighbours(b, k, metric, block_size=block_size, progress=progress, name="B",
                            device=device)
    return match_neighbours(na, nb, tokens=ids, weights=w)


def norm_matched_random(x: np.ndarray, generator: np.random.Generator) -> np.ndarray:
    """A float32 matrix with the row norms of x and independent uniformly random row directions.

    The directions are torch's normal draws (4x numpy's speed here: a 131,072 x 4,096 stand-in
    takes seconds) from a seed taken from `generator`, made in chunks of rows so that no float64
    copy of x is held."""
    x = np.asarray(x)
    torch_generator = torch.Generator().manual_seed(int(generator.integers(2**63 - 1)))
    out = torch.empty(x.shape)
    for s in range(0, len(x), _CHUNK):
        rows = np.asarray(x[s:s + _CHUNK], np.float32)
        torch.randn(rows.shape, generator=torch_generator, out=out[s:s + _CHUNK])
        out[s:s + _CHUNK] *= (torch.from_numpy(np.sqrt(row_squares(rows)))
                              / torch.linalg.vector_norm(out[s:s + _CHUNK], dim=1)
                              ).float()[:, None]
    return out.numpy()


def query_stand_in(norms: np.ndarray, width: int, queries: np.ndarray,
                   generator: np.random.Generator) -> np.ndarray:
    """The norm-matched random stand-in (norm_matched_random) of an (n, width) matrix with row
    norms `norms`, as its rows `queries` (b of them, b < width) see it: an (n, b + 1) float32
    matrix whose rows have those norms and whose scores between each query and every row have
    the joint law of the stand-in's (inner products, so cosines and distances too). n b normal
    draws and a b + 1 wide search instead of n width of each.

    Why: the stand-in's rows are |x_j| g_j / |g_j|, g_j independent standard normal. Rotate the
    space so that the queries' g_i span the first b axes (the rotation depends on them alone):
    they become (l_i, 0) with L L^T = G_Q G_Q^T, a b x b Wishart matrix with width degrees of
    freedom, whose Cholesky factor L is drawn by Bartlett's decomposition (L_ii^2 chi-square
    with width - i degrees, i = 0..b-1, L_ij standard normal below the diagonal); every other
    g_j stays standard normal and independent of them: its first b coordinates h_j are b normal
    draws and the squared norm of the rest c_j^2 a chi-square draw with width - b degrees. So
    row j is |x_j| (h_j, c_j) / |(h_j, c_j)| and query row i is |x_i| (l_i, 0) / |l_i|; the
    scores between two rows that are not queries are not the stand-in's (unused).

    Examples:
        >>> import numpy as np
        >>> norms = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
        >>> s = query_stand_in(norms, 100, np.array([1, 3]), np.random.default_rng(0))
        >>> s.shape, np.allclose(np.linalg.norm(s, axis=1), norms)
        ((5, 3), True)
    """
    norms, queries = np.asarray(norms, np.float64), np.asarray(queries)
    b = len(queries)
    if not 0 < b < width:
        raise DhwtError(f"a stand-in seen from its queries needs 1 to {width - 1} of them (fewer "
                        f"than its {width} dimensions), got {b}")
    torch_generator = torch.Generator().manual_seed(int(generator.integers(2**63 - 1)))
    out = torch.randn(len(norms), b + 1, generator=torch_generator).numpy()  # (h_j, unused)
    out[:, b] = np.sqrt(generator.chisquare(width - b, len(norms)))
    out *= (norms / np.sqrt(row_squares(out))).astype(np.float32)[:, None]
    spanned = np.tril(torch.randn(b, b, generator=torch_generator, dtype=torch.float64).numpy(),
                      -1)
    spanned[np.diag_indices(b)] = np.sqrt(generator.chisquare(width - np.arange(b)))
    out[queries, :b] = spanned * (norms[queries] / np.linalg.norm(spanned, axis=1))[:, None]
    out[queries, b] = 0
    return out


#: Rows per chunk of norm_matched_random.
_CHUNK = 4096


def chance_baseline(a: np.ndarray, b: np.ndarray, k: int = DEFAULT_K, metric: str = "ip", *,
                    generator: np.random.Generator, tokens: np.ndarray | None = None,
                    weights: np.ndarray | None = None, block_size: int = BLOCK,
                    progress: bool | None = False,
                    device: str | torch.device = "cpu") -> KnnMatch:
    """KNN match of norm-matched random stand-ins for a and b (same row norms, random
    directions), computed exactly as knn_match: what shared norms (hub tokens) give by chance."""
    a, b = check_matrix(a, "A"), check_matrix(b, "B")
    return knn_match(norm_matched_random(a, generator), norm_matched_random(b, generator), k,
                     metric, tokens=tokens, weights=weights, block_size=block_size,
                     progress=progress, device=device)


#: Seconds per phase while phase_times() collects them, else None.
_PHASES: dict[str, float] | None = None


@contextmanager
def phase_times() -> Iterator[dict[str, float]]:
    """Seconds the neighbour searches run inside spend per phase: "gemm" (the Gram blocks),
    "filter" (tile maxima and the entries that pass), "merge" (into each row's best m),
    "rerank" (float64 scores, certificate, brute force of uncertified rows), "other" (setup).
    For benchmarks; phases add up over every search inside.

    Examples:
        >>> import numpy as np
        >>> with phase_times() as seconds:
        ...     _ = nearest_neighbours(np.eye(40), 3)
        >>> sorted(seconds)
        ['filter', 'gemm', 'merge', 'other', 'rerank']
    """
    global _PHASES
    saved, _PHASES = _PHASES, dict.fromkeys(("gemm", "filter", "merge", "rerank", "other"), 0.0)
    try:
        yield _PHASES
    finally:
        _PHASES = saved


@contextmanager
def _phase(name: str) -> Iterator[None]:
    """Add the time spent inside to phase `name` while phase_times() collects."""
    if _PHASES is None:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        _PHASES[name] += time.perf_counter() - start


def _candidates(left: np.ndarray, right: np.ndarray, n: int, m: int, block: int,
                progress: bool | None, order: np.ndarray | None = None,
                multiply: Callable[..., None] = gemm) -> tuple[np.ndarray, np.ndarray]:
    """(n, m) row ids of the best m other rows of every row under the float32 score
    left_i . right_j (symmetric in i, j) as `multiply` computes it, ties to the
    lower index; and (n,) the score of each row's m-th candidate (every other row scores at
    most that).

    order: a permutation of the rows to scan them in (blocks of consecutive rows in that order;
    the block pairs row-major, so that block 0 is every row's first block). Ties among float32
    scores then go to the lower position in `order`; the float64 re-rank restores the rule."""
    padded = -(-n // TILE) * TILE
    if order is not None or padded != n:  # one copy each, shared when left is right
        same = right is left
        left = _arranged(left, order, padded)
        right = left if same else _arranged(right, order, padded)
    bounds = [(s, min(s + block, padded)) for s in range(0, padded, block)]
    pairs = [(i, j) for i in range(len(bounds)) for j in range(i, len(bounds))]
    seen: set[int] = set()  # blocks whose rows have met a block already
    best = Best(padded, m)
    buffer = torch.empty(min(block, padded) ** 2)
    left_t, right_t = torch.from_numpy(left), torch.from_numpy(right)
    for i, j in tqdm(pairs, desc="knn blocks", disable=None if progress else True):
        (r0, r1), (c0, c1) = bounds[i], bounds[j]
        g_t = buffer[: (r1 - r0) * (c1 - c0)].view(r1 - r0, c1 - c0)
        with _phase("gemm"):
            multiply(left_t[r0:r1], right_t[c0:c1], g_t)
        g = g_t.numpy()
        with _phase("filter"):
            g[max(n - r0, 0):] = -np.inf  # padding rows and columns never qualify
            g[:, max(n - c0, 0):] = -np.inf
            if i == j:
                np.fill_diagonal(g, -np.inf)  # self is never a neighbour
            rows, cols, vals = row_candidates(g, best.threshold(r0, r1), 0 if i in seen else m)
        with _phase("merge"):
            best.merge(r0, rows, cols + c0, vals)
        if i != j:
            with _phase("filter"):
                rows, cols, vals = column_candidates(g, best.threshold(c0, c1),
                                                      0 if j in seen else m)
            with _phase("merge"):
                best.merge(c0, rows, cols + r0, vals)
        seen |= {i, j}
    index, kth = best.index[:n], best.values[:n, -1].astype(np.float64)
    if order is None:
        return index, kth
    found = np.empty_like(index)
    found[order] = order[index]  # the row at position p is order[p]
    unsorted = np.empty_like(kth)
    unsorted[order] = kth
    return found, unsorted


def _arranged(x: np.ndarray, order: np.ndarray | None, padded: int) -> np.ndarray:
    """The rows of x in `order` (all if None), then zero rows up to `padded` rows."""
    out = np.zeros((padded, x.shape[1]), np.float32)
    if order is None:
        out[: len(x)] = x
    else:  # torch's gather of rows: all threads, 4x numpy's take here
        torch.index_select(torch.from_numpy(x), 0, torch.from_numpy(order),
                           out=torch.from_numpy(out[: len(x)]))
    return out
