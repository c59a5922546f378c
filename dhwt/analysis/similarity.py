"""Whole-space similarity of two embedding matrices of the same tokens (rows), beside KNN match.

- Linear CKA (Kornblith et al. 2019), feature-space form: with column-centred X (n, d_x) and
  Y (n, d_y), CKA = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F). O(n d^2) time and O(d^2) memory
  (rows are streamed in chunks), so 50257 x 512 takes about a second; invariant to orthogonal
  transforms and isotropic scaling of either space.
- Orthogonal Procrustes: the Q with orthonormal columns minimising ||X Q - Y||_F is U V^T from
  the SVD X^T Y = U S V^T; reported with the aligned relative error ||X Q - Y||_F / ||Y||_F.
- Copy residue ||X - Y||_F / ||Y||_F of two matrices of one shape: 0 when one is a copy of the
  other (an untie), about 1.41 for independent ones of equal norm.
- Mutual k-NN alignment (Huh et al. 2024): mean |N_X(i) ∩ N_Y(i)| / k under cosine neighbours,
  i.e. KNN match overlap with metric "cos" (exact engine of dhwt.analysis.knn).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dhwt.analysis.knn import check_matrix, knn_match
from dhwt.errors import DhwtError

#: Rows per chunk when accumulating cross-products in float64.
CHUNK = 8192


@dataclass(frozen=True)
class Procrustes:
    """rotation: (d_x, d_y) with orthonormal columns (rows if d_x < d_y); error: ||X Q - Y||_F /
    ||Y||_F after alignment; error_before: ||X - Y||_F / ||Y||_F (equal widths only, else nan)."""

    rotation: np.ndarray
    error: float
    error_before: float


def linear_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA of two spaces over the same rows (feature-space form, float64).

    Examples:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> x = rng.standard_normal((100, 4))
        >>> rotation, _ = np.linalg.qr(rng.standard_normal((4, 4)))
        >>> round(linear_cka(x, 3 * x @ rotation + 1), 6)  # rotated, scaled and shifted
        1.0
        >>> round(linear_cka(x, np.hstack([x, x])), 6)  # the same space, each feature twice
        1.0
    """
    x, y = _pair(x, y)
    mean_x, mean_y = x.mean(axis=0, dtype=np.float64), y.mean(axis=0, dtype=np.float64)
    xx = _gram(x, x, mean_x, mean_x)
    yy = _gram(y, y, mean_y, mean_y)
    xy = _gram(x, y, mean_x, mean_y)
    denominator = np.linalg.norm(xx) * np.linalg.norm(yy)
    if denominator == 0:
        raise DhwtError("linear CKA is undefined when a space is constant (all rows equal)")
    return float(np.linalg.norm(xy) ** 2 / denominator)


def procrustes(x: np.ndarray, y: np.ndarray) -> Procrustes:
    """The orthogonal map taking x closest to y (no centring, no scaling) and its error.

    Examples:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> x = rng.standard_normal((100, 4))
        >>> rotation, _ = np.linalg.qr(rng.standard_normal((4, 4)))
        >>> fit = procrustes(x, x @ rotation)
        >>> bool(np.allclose(fit.rotation, rotation)), round(fit.error, 6)  # found exactly
        (True, 0.0)
        >>> fit.error_before > 0.1  # unaligned, the two differ
        True
    """
    x, y = _pair(x, y)
    zero = np.zeros(1)
    cross = _gram(x, y, zero, zero)
    u, _, vt = np.linalg.svd(cross, full_matrices=False)
    rotation = u @ vt
    norm_y = np.sqrt(_squared_norm(y))
    if norm_y == 0:
        raise DhwtError("Procrustes error is undefined when Y is all zeros")
    residual = _squared_residual(x, y, rotation)
    before = (np.sqrt(_squared_residual(x, y, None)) / norm_y if x.shape[1] == y.shape[1]
              else float("nan"))
    return Procrustes(rotation=rotation, error=float(np.sqrt(residual) / norm_y),
                      error_before=float(before))


def mutual_knn(x: np.ndarray, y: np.ndarray, k: int = 10) -> float:
    """Mutual k-NN alignment: mean overlap of the k cosine neighbours (self excluded).

    Examples:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).standard_normal((20, 3))
        >>> round(mutual_knn(x, 5 * x, k=3), 6)  # cosine neighbours ignore the scale
        1.0
    """
    return knn_match(x, y, k, "cos").mean_overlap


def _pair(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x, y = check_matrix(x, "X"), check_matrix(y, "Y")
    if x.shape[0] != y.shape[0]:
        raise DhwtError(f"X has {x.shape[0]} rows and Y has {y.shape[0]}; both must hold the "
                        "same tokens")
    return x, y


def _gram(a: np.ndarray, b: np.ndarray, mean_a: np.ndarray, mean_b: np.ndarray) -> np.ndarray:
    """(a - mean_a)^T (b - mean_b) in float64, streamed over row chunks."""
    out = np.zeros((a.shape[1], b.shape[1]))
    for s in range(0, a.shape[0], CHUNK):
        out += (a[s:s + CHUNK].astype(np.float64) - mean_a).T @ \
            (b[s:s + CHUNK].astype(np.float64) - mean_b)
    return out


def _squared_norm(a: np.ndarray) -> float:
    return float(sum((a[s:s + CHUNK].astype(np.float64) ** 2).sum()
                     for s in range(0, a.shape[0], CHUNK)))


def _squared_residual(x: np.ndarray, y: np.ndarray, rotation: np.ndarray | None) -> float:
    total = 0.0
    for s in range(0, x.shape[0], CHUNK):
        mapped = x[s:s + CHUNK].astype(np.float64)
        if rotation is not None:
            mapped = mapped @ rotation
        total += float(((mapped - y[s:s + CHUNK]) ** 2).sum())
    return total


def copy_residue(x: np.ndarray, y: np.ndarray) -> float:
    """||x - y||_F / ||y||_F (float64; inf when y is zero).

    Examples:
        >>> import numpy as np
        >>> copy_residue(np.ones((3, 2)), np.ones((3, 2)))
        0.0
        >>> round(copy_residue(np.eye(2), np.array([[0.0, 1.0], [1.0, 0.0]])), 4)  # equal norms
        1.4142
    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.shape != y.shape:
        raise DhwtError(f"the copy residue compares matrices of one shape, got {x.shape} and "
                        f"{y.shape}")
    norm = float(np.linalg.norm(y))
    return float(np.linalg.norm(x - y)) / norm if norm > 0 else float("inf")
