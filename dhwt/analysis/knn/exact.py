"""Exact k nearest neighbours of every row of an embedding matrix, and KNN Match Similarity.

KNN Match Similarity of two spaces A and B (same tokens, any widths): for token i, N_A(i) and
N_B(i) are its k nearest neighbours among the other rows (self excluded by masking, since under
inner product a row is often not its own top neighbour). Two scores per token:
  Jaccard  |N_A ∩ N_B| / |N_A ∪ N_B|   (what the Butterfly Effect post defines), and
  overlap  |N_A ∩ N_B| / k             (what its code computed; = mutual-kNN alignment).
Both are reported; averages are plain or weighted (e.g. by token frequency).

Metrics: "ip" (raw inner product, the reference study's), "cos" (cosine), "l2" (Euclidean). The
ranking score is higher-is-nearer: <x_i, x_j>, cos(x_i, x_j), or -||x_i - x_j||^2.

Ties: neighbours are ordered by score, higher first, and equal scores by lower row index first,
so the result is a function of the matrix alone. Scores are float64: values equal in exact
arithmetic that float64 rounds apart (cosines of integer rows, say, or squared distances next to
rows 1e15 times longer) are ordered by their rounded values, which another float64 brute force
with another summation order may round otherwise (a fuzz of 300 such matrices found only these).

Exactness: a blocked pass over the Gram matrix nominates the best m candidates of every row (same
tie rule); their scores are then recomputed in float64 and the top k taken. A row is certified
when its k-th float64 score beats a bound on every row left out; a row that is not (near-ties
across the boundary) is searched again by brute force in float64. So the result always equals a
float64 brute force (full matrix, same tie rule). The pass runs in one of two precisions, chosen
per process by probes (candidate_precision): float32 (m = k + 4, bound: the m-th float32 score
plus its rounding bound), or bfloat16 where oneDNN computes bfloat16 products into float32 sums
several times faster (AMX): every score is then widened to an upper bound of the exact one
(_widened: at most about 1.6% of |x_i||x_j| above it) and m = k + 12.

Cost: the Gram matrix is symmetric, so each off-diagonal block G = X_I X_J^T is computed once and
read twice, by the rows of I (along its rows) and by the rows of J (along its columns): half the
blocks of a full search. float32 blocks are products by oneDNN's AVX-512 kernel where a probe
shows that it keeps float32 (see _gemm): about 2x numpy's OpenBLAS on AMD AVX-512 CPUs; bfloat16
blocks run at about 3.5x numpy's float32 on an Intel Xeon with AMX. phase_times() says where
the time goes.
Memory stays bounded: one block (block_size^2 floats) at a time, never V x V, and a float64 copy
of the matrix for the re-rank only up to 512 MiB (_COPY_BYTES). Inside a block, a
row only looks at the entries that can beat its current k+slack-th candidate: tile maxima (w
consecutive entries) are compared with that threshold first and only the few tiles that pass
are read. Under inner product the rows are scanned longest first, so that every row's first
block holds the long rows that are most rows' neighbours: its threshold starts near its final
value and later blocks offer few candidates (18 per row in all instead of 58 on the GPT-2-sized
benchmark).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from dhwt.errors import DhwtError

METRICS = ("ip", "cos", "l2")
#: Entries per tile of the threshold filter; blocks are multiples of it (rows padded).
TILE = 32
#: Default rows per block: a 6144 x 6144 float32 block is 144 MiB (5-7% faster than 4096 here).
BLOCK = 6144
#: Extra float32 candidates per row re-ranked in float64 (guards against float32 rounding).
SLACK = 4
#: Extra candidates per row in a bfloat16 pass (at least), whose scores are upper bounds at most
#: about 1.6% of |x_i||x_j| above the exact ones (see _widened); on bench_knn's data k + 12
#: leaves no row to the brute-force fallback, k + 6 leaves 3% of them.
WIDE_SLACK = 12
#: Precisions of the candidate pass; candidate_precision() chooses one per process.
PRECISIONS = ("float32", "bfloat16")
#: Neighbours per token unless asked otherwise (the reference study's k), see default_k.
DEFAULT_K = 10
_LOWEST = float(np.finfo(np.float32).min)


@dataclass(frozen=True)
class Neighbours:
    """The k nearest neighbours of every row, best first.

    indices: (n, k) int64 row ids (self never included); scores: (n, k) float64 ranking scores
    (higher is nearer: inner product, cosine, or minus the squared Euclidean distance).
    """

    metric: str
    indices: np.ndarray
    scores: np.ndarray

    @property
    def k(self) -> int:
        return self.indices.shape[1]


@dataclass(frozen=True)
class KnnMatch:
    """KNN Match Similarity of two spaces, per token and averaged.

    tokens: (n,) row ids compared (into the original matrices); intersection: (n,) |N_A ∩ N_B|;
    weights: (n,) averaging weights summing to 1 (uniform unless frequency weights were given).
    """

    k: int
    metric: str
    tokens: np.ndarray
    intersection: np.ndarray
    weights: np.ndarray

    @property
    def jaccard(self) -> np.ndarray:
        """Per token |N_A ∩ N_B| / |N_A ∪ N_B| (the union has 2k - |∩| members)."""
        return self.intersection / (2 * self.k - self.intersection)

    @property
    def overlap(self) -> np.ndarray:
        """Per token |N_A ∩ N_B| / k."""
        return self.intersection / self.k

    @property
    def mean_jaccard(self) -> float:
        return float(self.weights @ self.jaccard)

    @property
    def mean_overlap(self) -> float:
        return float(self.weights @ self.overlap)


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
    wide = metric != "l2" and candidate_precision() == "bfloat16"
    m = min(k + (max(slack, WIDE_SLACK) if wide else slack), n - 1)
    with _phase("other"):
        left, right, exact, error = _work_matrices(x, metric, name)
        if wide:
            left, right, scale = _widened(left, right)
        # inner products: the longest rows first, so that every row meets its likely neighbours
        # (the long rows, "hubs") in its first block and later blocks offer few candidates
        order = (np.argsort(-np.einsum("ij,ij->i", x, x), kind="stable") if metric == "ip"
                 else None)
    cand, kth = _candidates(left, right, n, m, block_size - block_size % TILE, progress, order,
                            _gemm_bfloat16 if wide else _gemm)
    with _phase("rerank"):
        return _rerank(exact, cand, kth / scale if wide else kth + error, k, metric)


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


def match_neighbours(na: Neighbours, nb: Neighbours, *, tokens: np.ndarray | None = None,
                     weights: np.ndarray | None = None) -> KnnMatch:
    """KNN match of two neighbour sets over the same rows; tokens names the rows (default
    0..n-1), weights (n,) sums to 1 (default uniform)."""
    if na.indices.shape != nb.indices.shape or na.metric != nb.metric:
        raise DhwtError(f"neighbour sets differ: {na.indices.shape} {na.metric} vs "
                        f"{nb.indices.shape} {nb.metric}")
    n, k = na.indices.shape
    inter = (na.indices[:, :, None] == nb.indices[:, None, :]).any(axis=2).sum(axis=1)
    return KnnMatch(
        k=k, metric=na.metric,
        tokens=np.arange(n) if tokens is None else np.asarray(tokens),
        intersection=inter.astype(np.int64),
        weights=np.full(n, 1.0 / n) if weights is None else np.asarray(weights, np.float64),
    )


def norm_matched_random(x: np.ndarray, generator: np.random.Generator) -> np.ndarray:
    """A float32 matrix with the row norms of x and independent uniformly random row directions.

    The directions are torch's normal draws (4x numpy's speed here: a 131,072 x 4,096 stand-in
    takes seconds) from a seed taken from `generator`, made in chunks of rows so that no float64
    copy of x is held."""
    x = np.asarray(x)
    torch_generator = torch.Generator().manual_seed(int(generator.integers(2**63 - 1)))
    out = torch.empty(x.shape)
    for s in range(0, len(x), _CHUNK):
        rows = torch.from_numpy(np.asarray(x[s:s + _CHUNK], np.float32))
        torch.randn(rows.shape, generator=torch_generator, out=out[s:s + _CHUNK])
        out[s:s + _CHUNK] *= (torch.linalg.vector_norm(rows.double(), dim=1)
                              / torch.linalg.vector_norm(out[s:s + _CHUNK], dim=1)
                              ).float()[:, None]
    return out.numpy()


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


# --- validation ---------------------------------------------------------------------------------

def check_matrix(x: object, name: str) -> np.ndarray:
    """x as a 2-D float array with at least two rows and finite values, or DhwtError."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.asarray(x)
    if x.ndim != 2:
        raise DhwtError(f"{name} must be a 2-D matrix (tokens x dimensions), got shape {x.shape}")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise DhwtError(f"{name} must hold numbers, got dtype {x.dtype}")
    if x.shape[0] < 2 or x.shape[1] < 1:
        raise DhwtError(f"{name} needs at least 2 rows and 1 column, got shape {x.shape}")
    # NaN propagates; torch's threads: 2 GB in a fraction of a second
    largest = _largest(x if x.dtype in (np.float32, np.float64) else x.astype(np.float64))
    if not math.isfinite(largest):
        finite = np.isfinite(x).all(axis=1)
        row = int(np.flatnonzero(~finite)[0])
        raise DhwtError(f"{name} has NaN or infinite values ({int((~finite).sum())} rows, "
                        f"first row {row})")
    limit = math.sqrt(1e36 / x.shape[1])  # squaring the largest would overflow a float
    if largest > limit:
        raise DhwtError(f"{name} has values too large for float32 scores (max |value| "
                        f"{largest:.3g}, at most {limit:.3g} for {x.shape[1]} columns); scale it "
                        "down")
    return x


def default_k(n: int) -> int:
    """DEFAULT_K, capped at (n - 1) // 2 (at least 1) for n tokens.

    Each token has n - 1 candidate neighbours; as k nears n - 1 any two spaces share almost all
    of them (at k = n - 1 the overlap is 1 whatever the spaces, and chance is near k / (n - 1)),
    so the cap keeps k at most half the candidates, where the score can still tell spaces apart.
    """
    return max(1, min(DEFAULT_K, (n - 1) // 2))


def choose_k(k: int | None, n: int) -> tuple[int, str]:
    """(k, note) for n tokens: k itself when given (checked later), else default_k(n) with the
    note ' (the default 10 capped for 7 tokens)' when the cap applied ('' otherwise), for the
    output to say which k was used."""
    if k is not None:
        return k, ""
    chosen = default_k(n)
    return chosen, (f" (the default {DEFAULT_K} capped for {n} tokens)"
                    if chosen != DEFAULT_K else "")


def check_k(k: object, n: int) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k < n:
        raise DhwtError(f"k must be an integer with 1 <= k < number of tokens ({n}), got {k!r}")


def select_tokens(tokens: np.ndarray | None, n: int) -> np.ndarray:
    """Sorted unique row ids to keep (all rows if None), validated against n rows."""
    if tokens is None:
        return np.arange(n)
    ids = np.asarray(tokens)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise DhwtError(f"tokens must be a 1-D list of integer token ids, got {ids.dtype} "
                        f"shape {ids.shape}")
    if len(ids) and (ids.min() < 0 or ids.max() >= n):
        raise DhwtError(f"token ids must lie in [0, {n}), got values from {ids.min()} to "
                        f"{ids.max()}")
    return np.unique(ids)


def average_weights(weights: np.ndarray | None, n: int, ids: np.ndarray) -> np.ndarray:
    """Averaging weights over ids, normalised to sum 1 (uniform if None)."""
    if weights is None:
        return np.full(len(ids), 1.0 / max(len(ids), 1))
    w = np.asarray(weights, np.float64)
    if w.shape != (n,):
        raise DhwtError(f"weights must have one value per token ({n}), got shape {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any():
        raise DhwtError("weights must be finite and non-negative")
    w = w[ids]
    if w.sum() <= 0:
        raise DhwtError("the weights of the selected tokens sum to 0; nothing to average")
    return w / w.sum()


# --- the engine ---------------------------------------------------------------------------------

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


#: Unit roundoff of float32.
_U32 = 2.0**-24


#: A float64 copy of the matrix up to this size is kept for the re-rank (gathering float64
#: rows is 1.5-2x faster than gathering and converting); larger matrices convert on demand.
_COPY_BYTES = 512 * 2**20


class _Exact:
    """Rows of the matrix in float64 as the final scores use them (cosine: divided by their
    norm): made on demand, or from a float64 copy of the whole matrix once keep_whole() asked
    for one and it is at most _COPY_BYTES."""

    def __init__(self, x: np.ndarray, norms: np.ndarray | None) -> None:
        self.x, self.norms = x, norms
        self.whole: torch.Tensor | None = None

    def keep_whole(self) -> None:
        """Keep a float64 copy from now on (worth it when about every row will be gathered)."""
        if self.whole is None and self.x.shape[0] * self.x.shape[1] * 8 <= _COPY_BYTES:
            self.whole = torch.from_numpy(self._made(slice(None)))

    def _made(self, rows: np.ndarray | slice) -> np.ndarray:
        values = self.x[rows].astype(np.float64)
        return values if self.norms is None else values / self.norms[rows][..., None]

    def __getitem__(self, rows: np.ndarray | slice) -> np.ndarray:
        return self.rows(rows).numpy()

    def rows(self, rows: np.ndarray | slice) -> torch.Tensor:
        """The float64 rows `rows` (an index array of any shape, or a slice) as a tensor."""
        if self.whole is None:
            return torch.from_numpy(self._made(rows))
        if isinstance(rows, slice):
            return self.whole[rows]
        flat = torch.from_numpy(np.ascontiguousarray(rows).reshape(-1))
        return torch.index_select(self.whole, 0, flat).view(*rows.shape, -1)


def _work_matrices(x: np.ndarray, metric: str,
                   name: str) -> tuple[np.ndarray, np.ndarray, _Exact, np.ndarray]:
    """float32 (left, right) with left @ right.T the ranking score; the float64 rows the final
    scores are computed from; and per row i a bound on |float32 score(i, j) - exact score(i, j)|
    over all j (rounding of the inputs and of a length-d float32 dot product, times 2 for
    safety)."""
    gamma = 2 * (x.shape[1] + 6) * _U32
    sq = np.einsum("ij,ij->i", x, x, dtype=np.float64)
    if metric == "ip":
        norms = np.sqrt(sq)
        work = np.ascontiguousarray(x, np.float32)
        return work, work, _Exact(x, None), gamma * norms * norms.max()
    if metric == "cos":
        norms = np.sqrt(sq)
        if (norms == 0).any():
            row = int(np.flatnonzero(norms == 0)[0])
            raise DhwtError(f"{name} row {row} is zero: its cosine is undefined")
        exact = _Exact(x, norms)
        work = np.ascontiguousarray(exact[:], np.float32)
        return work, work, exact, np.full(len(x), gamma)
    # Centred rows (distances do not change; float32 cancels less), and
    # -||xi - xj||^2 = <2 xi, xj> - |xi|^2 - |xj|^2 = <[2 xi, -|xi|^2, 1], [xj, 1, -|xj|^2]>.
    centred = x - x.mean(axis=0, dtype=np.float64)
    sq = np.einsum("ij,ij->i", centred, centred)[:, None]
    ones = np.ones_like(sq)
    left = np.ascontiguousarray(np.hstack([2 * centred, -sq, ones]), np.float32)
    right = np.ascontiguousarray(np.hstack([centred, ones, -sq]), np.float32)
    norms = np.sqrt(sq[:, 0])
    return left, right, _Exact(x, None), gamma * 2 * (norms + norms.max()) ** 2


class _Best:
    """The best m candidates of every row so far, in the order (value desc, index asc); empty
    slots hold -inf and the index `rows` (past every row)."""

    def __init__(self, rows: int, m: int) -> None:
        self.m = m
        self.values = np.full((rows, m), -np.inf, np.float32)
        self.index = np.full((rows, m), rows, np.int64)
        self._index_bits = int(rows).bit_length()

    def threshold(self, start: int, stop: int) -> np.ndarray:
        """The value a new candidate must reach (>=) to enter rows start..stop-1."""
        return np.maximum(self.values[start:stop, -1], _LOWEST)

    def merge(self, start: int, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> None:
        """Add candidates (start + rows[i], cols[i], vals[i]), pairs never seen before."""
        if not len(rows):
            return
        m = self.m
        counts = np.bincount(rows)
        touched = np.flatnonzero(counts)
        slot = (np.cumsum(counts > 0) - 1)[rows]  # row -> its place among the touched rows
        counts = counts[touched]
        touched += start
        r = np.concatenate([np.repeat(np.arange(len(touched)), m), slot])
        c = np.concatenate([self.index[touched].reshape(-1), cols])
        v = np.concatenate([self.values[touched].reshape(-1), vals])
        order = _lexsort(r, v, c, self._index_bits)
        first = np.cumsum(counts + m) - (counts + m)
        keep = order[(first[:, None] + np.arange(m)).reshape(-1)]
        self.values[touched] = v[keep].reshape(-1, m)
        self.index[touched] = c[keep].reshape(-1, m)


def _lexsort(r: np.ndarray, v: np.ndarray, c: np.ndarray, c_bits: int) -> np.ndarray:
    """The order by r ascending, then v (float32) descending, then c ascending: one sort of an
    int64 key packing the three when they fit in 63 bits, else numpy's lexsort."""
    r_bits = max(int(r[-1]), 1).bit_length()
    if r_bits + 32 + c_bits > 63:
        return np.lexsort((c, -v, r))
    key = (r.astype(np.int64) << (32 + c_bits)) | (_descending(v) << c_bits) | c
    return np.argsort(key)


def _descending(v: np.ndarray) -> np.ndarray:
    """int64 in [0, 2^32) that falls as the float32 v rises (IEEE bits made monotone)."""
    bits = (v + np.float32(0)).view(np.int32).astype(np.int64)  # + 0 turns -0.0 into 0.0
    ascending = np.where(bits >= 0, bits, -(bits & 0x7FFFFFFF) - 1) + 2**31
    return 2**32 - 1 - ascending


def _candidates(left: np.ndarray, right: np.ndarray, n: int, m: int, block: int,
                progress: bool | None, order: np.ndarray | None = None,
                gemm: Callable[..., None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(n, m) row ids of the best m other rows of every row under the float32 score
    left_i . right_j (symmetric in i, j) as `gemm` (default _gemm) computes it, ties to the
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
    best = _Best(padded, m)
    buffer = torch.empty(min(block, padded) ** 2)
    left_t, right_t = torch.from_numpy(left), torch.from_numpy(right)
    for i, j in tqdm(pairs, desc="knn blocks", disable=None if progress else True):
        (r0, r1), (c0, c1) = bounds[i], bounds[j]
        g_t = buffer[: (r1 - r0) * (c1 - c0)].view(r1 - r0, c1 - c0)
        with _phase("gemm"):
            (gemm or _gemm)(left_t[r0:r1], right_t[c0:c1], g_t)
        g = g_t.numpy()
        with _phase("filter"):
            g[max(n - r0, 0):] = -np.inf  # padding rows and columns never qualify
            g[:, max(n - c0, 0):] = -np.inf
            if i == j:
                np.fill_diagonal(g, -np.inf)  # self is never a neighbour
            rows, cols, vals = _row_candidates(g, best.threshold(r0, r1), 0 if i in seen else m)
        with _phase("merge"):
            best.merge(r0, rows, cols + c0, vals)
        if i != j:
            with _phase("filter"):
                rows, cols, vals = _column_candidates(g, best.threshold(c0, c1),
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


def _gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """out = a @ b.T in float32, by oneDNN's AVX-512 kernel where it is checked to compute in
    float32, else by numpy.

    Why: numpy's and faiss's OpenBLAS run their AVX2 (Haswell) kernel on AMD AVX-512 CPUs and
    torch's MKL its AVX2 path, while oneDNN picks kernels by instruction set: about 2x faster
    here. torch sends a float32 matmul to oneDNN only when its mkldnn matmul precision is
    "bf16", which *allows* oneDNN to round the inputs to bfloat16 (e.g. on CPUs with AMX), and
    that would void the float32 rounding bound of the certificate. So every block shape is
    first run on a probe that bfloat16 cannot hold, and kept only if it comes out at float32
    accuracy."""
    shape = (a.shape[0], b.shape[0], a.shape[1])
    if shape not in _ONEDNN_FLOAT32:
        _ONEDNN_FLOAT32[shape] = _onednn_is_float32(shape, out)
    if _ONEDNN_FLOAT32[shape]:
        with _onednn_matmul():
            torch.mm(a, b.T, out=out)
    else:
        np.matmul(a.numpy(), b.numpy().T, out=out.numpy())


#: Block shape (rows, columns, width) -> whether oneDNN's matmul computed it in float32.
_ONEDNN_FLOAT32: dict[tuple[int, int, int], bool] = {}


@contextmanager
def _onednn_matmul() -> Iterator[None]:
    """torch's float32 matmuls go to oneDNN inside (the setting is process-wide)."""
    saved = torch.backends.mkldnn.matmul.fp32_precision
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    try:
        yield
    finally:
        torch.backends.mkldnn.matmul.fp32_precision = saved


def _onednn_is_float32(shape: tuple[int, int, int], out: torch.Tensor) -> bool:
    """Whether oneDNN's matmul of this shape keeps float32 inputs: every entry 1 + 2^-10 (which
    bfloat16 rounds to 1) must give d (1 + 2^-10)^2 within the float32 bound (out is scratch)."""
    if not (torch.backends.mkldnn.is_available()
            and hasattr(torch.backends.mkldnn, "matmul")):
        return False
    rows, cols, d = shape
    value = 1 + 2.0**-10
    with _onednn_matmul():
        torch.mm(torch.full((rows, d), value), torch.full((cols, d), value).T, out=out)
    exact = d * value * value
    tolerance = 2 * (d + 6) * _U32 * exact
    return exact - tolerance <= out.amin().item() and out.amax().item() <= exact + tolerance


# --- the bfloat16 candidate pass ----------------------------------------------------------------

#: Unit roundoff of bfloat16 (8 significant bits, round to nearest).
_U16 = 2.0**-8
#: The precision chosen by candidate_precision() in this process (None: not yet).
_PRECISION: str | None = None
#: Whether oneDNN multiplies bfloat16 values exactly into float32 sums here (None: not probed).
_ONEDNN_BFLOAT16: bool | None = None


def candidate_precision() -> str:
    """The precision of the candidate pass in this process, chosen at its first use by probes,
    not by the CPU's vendor: "bfloat16" where oneDNN's bfloat16 matmul computes bfloat16 values
    into exact float32 sums (a precision probe) and a block of Gram entries at least twice as
    fast as the float32 path (a speed probe of about a tenth of a second), else "float32".
    Either way the neighbours are exact (the float64 re-rank and its certificate); bfloat16 only
    trades a faster Gram for more candidates. DHWT_KNN_PRECISION=float32|bfloat16 forces one."""
    global _PRECISION
    if _PRECISION is None:
        forced = os.environ.get("DHWT_KNN_PRECISION")
        if forced is not None and forced not in PRECISIONS:
            raise DhwtError(f"DHWT_KNN_PRECISION must be one of {', '.join(PRECISIONS)}, got "
                            f"{forced!r}")
        _PRECISION = forced or ("bfloat16" if _onednn_bfloat16() and _bfloat16_speedup() >= 2
                                else "float32")
    return _PRECISION


def _onednn_bfloat16() -> bool:
    """Whether oneDNN's matmul with bfloat16 allowed multiplies bfloat16 values (as float32
    tensors) exactly and sums in float32: on random bfloat16 values every entry must lie within
    the float32 summation bound of the float64 product (cached)."""
    global _ONEDNN_BFLOAT16
    if _ONEDNN_BFLOAT16 is None:
        _ONEDNN_BFLOAT16 = False
        if torch.backends.mkldnn.is_available() and hasattr(torch.backends.mkldnn, "matmul"):
            generator = torch.Generator().manual_seed(0)
            a, b = (torch.randn(256, 512, generator=generator).bfloat16().float()
                    for _ in range(2))
            out = torch.empty(256, 256)
            with _onednn_matmul():
                torch.mm(a, b.T, out=out)
            exact = a.double() @ b.double().T
            bound = 2 * 514 * _U32 * (a.double().abs() @ b.double().abs().T)
            _ONEDNN_BFLOAT16 = bool(((out.double() - exact).abs() <= bound).all())
    return _ONEDNN_BFLOAT16


def _bfloat16_speedup(size: int = 2048, width: int = 512) -> float:
    """How many times faster a size x size x width Gram block is with bfloat16 allowed in
    oneDNN than on the float32 path (_gemm); the best of three runs each."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, width, generator=generator).bfloat16().float()
    out = torch.empty(size, size)
    seconds = []
    for gemm in (_gemm, _gemm_bfloat16):
        gemm(a, a, out)  # warm up (and the float32 path's own probe)
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            gemm(a, a, out)
            runs.append(time.perf_counter() - start)
        seconds.append(min(runs))
    return seconds[0] / seconds[1]


def _gemm_bfloat16(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """out = a @ b.T for float32 a, b holding bfloat16 values: by oneDNN with bfloat16 allowed
    where its probe passed (on AMX, several times the float32 speed), else by _gemm. Either way
    the products are exact and the sums float32, the error model of _widened."""
    if _onednn_bfloat16():
        with _onednn_matmul():
            torch.mm(a, b.T, out=out)
    else:
        _gemm(a, b, out)


def _widened(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(left', right', scale): float32 matrices of bfloat16 values whose product, summed in
    float32 from exact products (_gemm_bfloat16), is for every (i, j) at least scale times the
    exact left_i . right_j, and at most about 2c |left_i| |right_j| above it (c ~ 2^-7).

    How: left and right are scaled by powers of two to entries of at most 1 (exact), rounded to
    bfloat16 (relative error u = 2^-8 each), and given two more columns, [c |l_i|, delta] and
    [|r_j|, 1], rounded up, that add at least c |l_i| |r_j| + delta. c = 2u + u^2 + 2 gamma
    (gamma: float32 summation over d + 2 terms) covers the rounding of the inputs
    ((2u + u^2) |l_i| |r_j|) and of the sums; delta covers values flushed to zero below 2^-126
    (at most 2^-126 per entry and product). When left is right (inner product, cosine) both
    sides get [sqrt(c) |x_i|, sqrt(delta)] instead and stay one matrix, so the Gram stays
    symmetric and is stored once."""
    d = left.shape[1]
    symmetric = left is right
    scales = [2.0 ** -math.ceil(math.log2(max(_largest(side), 2.0**-100)))
              for side in ((left,) if symmetric else (left, right))]
    gamma = (d + 2) * _U32 / (1 - (d + 2) * _U32)
    c = 2 * _U16 + _U16**2 + 2 * gamma
    delta = 4.0 ** math.ceil(math.log(8 * (d + 2) * 2.0**-126, 4))  # an even power of two
    sides = (((left, scales[0], math.sqrt(c), math.sqrt(delta)),) if symmetric else
             ((left, scales[0], c, delta), (right, scales[1], 1.0, 1.0)))
    widened = []
    for side, scale, factor, last in sides:
        out = np.empty((len(side), d + 2), np.float32)
        np.multiply(side, np.float32(scale), out=out[:, :d])
        norms = np.sqrt(np.einsum("ij,ij->i", out[:, :d], out[:, :d], dtype=np.float64))
        out[:, d] = _bfloat16_up(factor * norms)
        out[:, d + 1] = last  # a power of two: exact
        rounded = torch.from_numpy(out[:, :d]).bfloat16()  # to nearest
        out[:, :d] = rounded.float().numpy()
        widened.append(out)
    return widened[0], widened[-1], scales[0] * scales[-1]


def _largest(x: np.ndarray) -> float:
    """max |x| of a float32 or float64 array (torch's aminmax: no temporary copy, all threads;
    NaN if x holds one)."""
    low, high = torch.aminmax(torch.from_numpy(x))
    return max(-float(low), float(high))


def _bfloat16_up(values: np.ndarray) -> np.ndarray:
    """Non-negative float64 values rounded up to bfloat16 values (as float32)."""
    as32 = values.astype(np.float32)
    as32 = np.where(as32 < values, np.nextafter(as32, np.float32(np.inf)), as32)
    bits = as32.view(np.uint32)
    up = (bits & 0xFFFF) != 0
    bits = np.where(up, (bits & 0xFFFF0000) + 0x10000, bits).astype(np.uint32)
    return bits.view(np.float32)


def _row_candidates(g: np.ndarray, threshold: np.ndarray,
                    m: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Entries g[r, c] >= threshold[r], found through maxima of row tiles g[r, t*w:(t+1)*w]
    (torch's max pooling is 2x faster than its amax and 5x faster than numpy on this reduction
    over a short inner axis).

    m > 0 (a row's first block): the threshold is raised to the m-th largest tile maximum of
    the row, which still keeps at least m entries (one per such tile)."""
    tiles = g.reshape(g.shape[0], -1, TILE)
    tile_max = F.max_pool1d(torch.from_numpy(g)[None], TILE)[0].numpy()
    if 0 < m <= tile_max.shape[1]:
        kth = np.partition(tile_max, -m, axis=1)[:, -m]
        threshold = np.maximum(threshold, kth)
    flag_r, flag_t = np.nonzero(tile_max >= threshold[:, None])
    values = tiles[flag_r, flag_t]  # (flagged, w)
    hit, within = np.nonzero(values >= threshold[flag_r][:, None])
    return flag_r[hit], flag_t[hit] * TILE + within, values[hit, within]


def _column_candidates(g: np.ndarray, threshold: np.ndarray,
                       m: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The entries of g.T at or above threshold, i.e. (c, r) with g[r, c] >= threshold[c],
    found through maxima of column tiles g[t*w:(t+1)*w, c]; m as in _row_candidates."""
    tiles = g.reshape(-1, TILE, g.shape[1])  # (t, w, c)
    tile_max = torch.from_numpy(tiles).amax(dim=1).numpy()  # torch's: 2x numpy's here
    if 0 < m <= tile_max.shape[0]:
        threshold = np.maximum(threshold, np.partition(tile_max, -m, axis=0)[-m])
    flag_t, flag_c = np.nonzero(tile_max >= threshold[None, :])
    values = tiles[flag_t, :, flag_c]  # (flagged, w)
    hit, within = np.nonzero(values >= threshold[flag_c][:, None])
    return flag_c[hit], flag_t[hit] * TILE + within, values[hit, within]


def _rerank(exact: _Exact, cand: np.ndarray, bound: np.ndarray, k: int, metric: str,
            chunk: int = 128, queries: np.ndarray | None = None) -> Neighbours:
    """Recompute the candidates' scores in float64 and keep the best k (ties: lower index), a
    chunk of rows at a time (128: their gathered candidates stay in cache, 3x faster than 1024).

    cand[i] holds candidates of row queries[i] (default: of row i). A row is certified when its
    k-th float64 score beats `bound` (the m-th float32 score plus the rounding bound): then no
    row outside the candidates can be among the best k. Other rows (near-ties across the
    candidate boundary, e.g. many equal scores) are searched again by brute force in float64
    against every row."""
    n, m = cand.shape
    ids = np.arange(n) if queries is None else np.asarray(queries)
    total = len(exact.x)
    if cand.size >= total:  # the gathers touch every row about once or more
        exact.keep_whole()
    indices = np.empty((n, k), np.int64)
    scores = np.empty((n, k), np.float64)
    for s in range(0, n, chunk):
        rows = exact.rows(ids[s:s + chunk])
        others = exact.rows(cand[s:s + chunk])
        if metric == "l2":
            score = -((others - rows[:, None, :]) ** 2).sum(dim=2).numpy()
        else:
            score = torch.bmm(others, rows[:, :, None])[:, :, 0].numpy()
        order = np.lexsort((cand[s:s + chunk], -score), axis=1)[:, :k]
        indices[s:s + chunk] = np.take_along_axis(cand[s:s + chunk], order, axis=1)
        scores[s:s + chunk] = np.take_along_axis(score, order, axis=1)
    if m < total - 1:
        redo = np.flatnonzero(scores[:, -1] <= bound)
        for s in range(0, len(redo), 256):
            rows = redo[s:s + 256]
            indices[rows], scores[rows] = _best(_brute_scores(exact, ids[rows], metric), k)
    return Neighbours(metric=metric, indices=indices, scores=scores)


def _best(score: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best columns of each row of `score` (value desc, index asc) and their values:
    only the entries at or above each row's k-th largest value are sorted."""
    kth = np.partition(score, score.shape[1] - k, axis=1)[:, score.shape[1] - k]
    r, c = np.nonzero(score >= kth[:, None])
    v = score[r, c]
    order = np.lexsort((c, -v, r))
    first = np.searchsorted(r[order], np.arange(len(score)))  # where each row starts
    take = order[(first[:, None] + np.arange(k)).reshape(-1)]
    return c[take].reshape(-1, k), v[take].reshape(-1, k)


def _brute_scores(exact: _Exact, rows: np.ndarray, metric: str,
                  chunk: int = 16384) -> np.ndarray:
    """float64 scores of `rows` against every row, self set to -inf (the other rows made
    float64 a chunk at a time: no float64 copy of the whole matrix)."""
    mine = exact[rows]
    n = len(exact.x)
    score = np.empty((len(rows), n))
    for s in range(0, n, chunk):
        others = exact[slice(s, s + chunk)]
        score[:, s:s + chunk] = mine @ others.T
        if metric == "l2":
            score[:, s:s + chunk] = (2 * score[:, s:s + chunk] - (mine**2).sum(axis=1)[:, None]
                                     - (others**2).sum(axis=1)[None, :])
    score[np.arange(len(rows)), rows] = -np.inf
    return score
