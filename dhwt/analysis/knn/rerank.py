"""The float64 re-rank both neighbour searches end with: the candidates' scores recomputed in
float64, the best k kept, and rows whose k-th score does not beat the candidate pass's bound
searched again by brute force; and the float32 work matrices and rounding bounds it starts from."""

from __future__ import annotations

import numpy as np
import torch

from dhwt.analysis.knn.gram import U32, row_squares
from dhwt.analysis.knn.neighbours import Neighbours
from dhwt.errors import DhwtError

#: Extra float32 candidates per row re-ranked in float64 (guards against float32 rounding).
SLACK = 4
#: A float64 copy of the matrix up to this size is kept for the re-rank (gathering float64
#: rows is 1.5-2x faster than gathering and converting); larger matrices convert on demand.
#: The rows are gathered by numpy's take: 2-4x torch's index_select of float64 rows here.
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
        return torch.from_numpy(np.take(self.whole.numpy(), rows, axis=0))


def work_matrices(x: np.ndarray, metric: str,
                  name: str) -> tuple[np.ndarray, np.ndarray, _Exact, np.ndarray]:
    """float32 (left, right) with left @ right.T the ranking score; the float64 rows the final
    scores are computed from; and per row i a bound on |float32 score(i, j) - exact score(i, j)|
    over all j (rounding of the inputs and of a length-d float32 dot product, times 2 for
    safety)."""
    gamma = 2 * (x.shape[1] + 6) * U32
    sq = row_squares(x)
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


def rerank(exact: _Exact, cand: np.ndarray, bound: np.ndarray, k: int, metric: str,
           chunk: int = 128, queries: np.ndarray | None = None) -> Neighbours:
    """Recompute the candidates' scores in float64 and keep the best k (ties: lower index), a
    chunk of rows at a time (128: their gathered candidates stay in cache, 3x faster than 1024;
    the scores by numpy's einsum: 9x torch's bmm of these shapes here, and one summation order
    for every pair, so that equal rows score equal wherever they stand among the candidates).

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
            score = np.einsum("bmd,bd->bm", others.numpy(), rows.numpy())
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
