"""Exact neighbours of a seeded sample of query rows, for vocabularies too large to search whole.

Each sampled query's k nearest neighbours are exact against *all* rows (self excluded, the tie
rule of dhwt.analysis.knn, the float64 re-rank of its rerank): only the set of queries is a
sample. The mean KNN match over the queries then estimates the mean over every token, with a 95%
Student-t interval and the finite-population correction (a sample of all V tokens has no error).

Cost: one pass of the queries (q, d) against every block of rows, q V d multiply-adds per matrix
instead of V^2 d / 2: 4,096 queries of a 131,072 x 4,096 matrix are 1/16 of the full search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from dhwt.analysis.intervals import SHARE, t_half
from dhwt.analysis.knn.candidates import TILE, Best, row_candidates
from dhwt.analysis.knn.gram import BLOCK, gemm
from dhwt.analysis.knn.neighbours import Neighbours, check_k, select_tokens
from dhwt.defaults import METRICS
from dhwt.analysis.knn.rerank import SLACK, rerank, work_matrices
from dhwt.checks import check_matrix
from dhwt.errors import DhwtError

LEVEL = 0.95


@dataclass(frozen=True)
class Estimate:
    """A mean over a sample of n of the population's `population` values, with its interval
    (low == high == mean when the sample is the whole population)."""

    mean: float
    low: float
    high: float
    n: int
    population: int

    @property
    def exact(self) -> bool:
        return self.n >= self.population


def sample_queries(n: int, count: int, seed: int) -> np.ndarray:
    """`count` distinct row ids of n, drawn by numpy's generator from `seed`, sorted (all rows
    when count >= n).

    Examples:
        >>> sample_queries(10, 3, seed=0).tolist() == sample_queries(10, 3, seed=0).tolist()
        True
        >>> sample_queries(5, 9, seed=0).tolist()
        [0, 1, 2, 3, 4]
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise DhwtError(f"the number of queries must be a positive integer, got {count!r}")
    if count >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, count, replace=False))


def sampled_neighbours(x: np.ndarray, queries: np.ndarray, k: int, metric: str = "ip", *,
                       block_size: int = BLOCK, slack: int = SLACK,
                       progress: bool | None = False, name: str = "matrix",
                       device: str | torch.device = "cpu") -> Neighbours:
    """Exact k nearest neighbours (self excluded) of the rows `queries` of x among all rows.

    Row i of the result belongs to queries[i]; equal to dhwt.analysis.knn.nearest_neighbours(x,
    k, metric) restricted to those rows. device: where the float32 blocks are computed (a GPU's
    float32 matmul with TF32 off, so the rounding bound holds); the re-rank is float64 on the
    CPU.

    Examples:
        >>> import numpy as np
        >>> from dhwt.analysis.knn import nearest_neighbours
        >>> x = np.random.default_rng(0).standard_normal((300, 8))
        >>> queries = np.array([3, 50, 299])
        >>> near = sampled_neighbours(x, queries, 5)
        >>> bool((near.indices == nearest_neighbours(x, 5).indices[queries]).all())
        True
    """
    x = check_matrix(x, name)
    n = x.shape[0]
    check_k(k, n)
    if metric not in METRICS:
        raise DhwtError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    queries = select_tokens(queries, n)
    m = min(k + slack, n - 1)
    left, right, exact, error = work_matrices(x, metric, name)
    device = torch.device(device)
    q = torch.from_numpy(np.ascontiguousarray(left[queries])).to(device)
    right_t = torch.from_numpy(right)
    if device.type == "cpu":
        cand, kth = _cpu_candidates(q, right_t, queries, m, block_size, progress, name)
        return rerank(exact, cand, kth + error[queries], k, metric, queries=queries)
    best_values = torch.full((len(queries), m), -math.inf, device=device)
    best_index = torch.full((len(queries), m), n, dtype=torch.int64, device=device)
    starts = range(0, n, block_size)
    for start in tqdm(starts, desc=f"{name} queries", disable=None if progress else True):
        stop = min(start + block_size, n)
        scores = _scores(q, right_t[start:stop], device)
        inside = np.flatnonzero((queries >= start) & (queries < stop))
        scores[torch.from_numpy(inside).to(device),
               torch.from_numpy(queries[inside] - start).to(device)] = -math.inf
        values, index = torch.topk(scores, min(m, stop - start), dim=1)
        values = torch.cat([best_values, values], dim=1)
        index = torch.cat([best_index, index + start], dim=1)
        best_values, keep = torch.topk(values, m, dim=1)
        best_index = torch.gather(index, 1, keep)
    kth = best_values[:, -1].double().cpu().numpy()
    return rerank(exact, best_index.cpu().numpy(), kth + error[queries], k, metric,
                   queries=queries)


def _cpu_candidates(q: torch.Tensor, right: torch.Tensor, queries: np.ndarray, m: int,
                    block_size: int, progress: bool | None,
                    name: str) -> tuple[np.ndarray, np.ndarray]:
    """(len(q), m) row ids of the best m other rows of every query under the float32 score
    q_i . right_j (gram.gemm), and the score of each query's m-th candidate: blocks of rows
    filtered through tile maxima and merged as in the full search (candidates.row_candidates and
    candidates.Best: 1/5 of the time of a top-m selection per block)."""
    n = len(right)
    block = max(block_size - block_size % TILE, TILE)
    best = Best(len(q), m, columns=n)
    buffer = torch.empty(len(q) * min(block, -(-n // TILE) * TILE))
    starts = list(range(0, n, block))
    if (n - starts[-1]) % TILE and n - starts[-1] > TILE:  # whole tiles, then what is padded
        starts.append(n - (n - starts[-1]) % TILE)
    for first, (start, stop) in enumerate(tqdm(list(zip(starts, [*starts[1:], n])),
                                               desc=f"{name} queries",
                                               disable=None if progress else True)):
        width = -(-(stop - start) // TILE) * TILE
        rows = right[start:stop]
        if width > stop - start:  # zero rows up to whole tiles, never candidates
            rows = torch.cat([rows, rows.new_zeros(width - (stop - start), rows.shape[1])])
        g_t = buffer[: len(q) * width].view(len(q), width)
        gemm(q, rows, g_t)
        g = g_t.numpy()
        g[:, stop - start:] = -np.inf
        inside = np.flatnonzero((queries >= start) & (queries < stop))
        g[inside, queries[inside] - start] = -np.inf  # self is never a neighbour
        found, cols, vals = row_candidates(g, best.threshold(0, len(q)), m if first == 0 else 0)
        best.merge(0, found, cols + start, vals)
    return best.index, best.values[:, -1].astype(np.float64)


def _scores(q: torch.Tensor, rows: torch.Tensor, device: torch.device) -> torch.Tensor:
    """q @ rows.T in float32: gram.gemm on the CPU, cuBLAS without TF32 on a GPU."""
    if device.type == "cpu":
        out = torch.empty(len(q), len(rows))
        gemm(q, rows, out)
        return out
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return q @ rows.to(device, non_blocking=True).T
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def mean_estimate(values: np.ndarray, population: int, level: float = LEVEL,
                  bounds: tuple[float, float] = SHARE) -> Estimate:
    """The mean of per-token values sampled without replacement from `population` tokens, with
    its Student-t interval times the finite-population correction sqrt((N - n) / (N - 1)),
    clipped to the values' range `bounds` (a KNN match lies in [0, 1]; a chance level near 0
    has no interval below it).

    Examples:
        >>> import numpy as np
        >>> e = mean_estimate(np.array([0.0, 1.0] * 50), population=10_000)
        >>> round(e.mean, 2), round(e.high - e.mean, 3)
        (0.5, 0.099)
        >>> e = mean_estimate(np.array([0.0, 1.0]), population=2)  # the whole population
        >>> (e.low, e.mean, e.high)
        (0.5, 0.5, 0.5)
        >>> mean_estimate(np.array([0.0] * 99 + [0.1]), population=10_000).low  # not below 0
        0.0
    """
    values = np.asarray(values, np.float64)
    n = len(values)
    if n == 0 or population < n:
        raise DhwtError(f"need 1 <= sample size <= population, got {n} of {population}")
    mean = float(values.mean())
    if n >= population or n < 2:
        half = 0.0 if n >= population else math.inf
    else:
        correction = math.sqrt((population - n) / (population - 1))
        half = float(t_half(values, level)) * correction
    return Estimate(mean=mean, low=max(mean - half, bounds[0]), high=min(mean + half, bounds[1]),
                    n=n, population=population)
