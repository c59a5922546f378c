"""What a k nearest neighbours search returns (Neighbours), KNN Match Similarity of two
searches (KnnMatch), and the checks of a search's arguments (k, tokens, weights)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dhwt.defaults import DEFAULT_K
from dhwt.errors import DhwtError


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
