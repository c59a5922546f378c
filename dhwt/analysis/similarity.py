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
import torch

from dhwt.analysis.knn import check_matrix, knn_match
from dhwt.errors import DhwtError

#: Rows per chunk when accumulating cross-products in float64.
CHUNK = 8192
#: Rows per float32 product of whole_space(..., float32=True): the rounding bound grows with it
#: (GRAM_EPSILON); the products of a 50,257 x 768 pair run 1.15x faster with 4,096 rows than
#: with 2,048, and 1.4x with 8,192 (numpy's syrk; loaded Xeon, two threads, alternating).
GRAM_ROWS = 8192
#: Unit roundoff of float32.
_U32 = 2.0**-24
#: The relative bound of whole_space's float32 Gram blocks (see there): gamma_c + 5u with
#: c = GRAM_ROWS, about 4.9e-4.
GRAM_EPSILON = GRAM_ROWS * _U32 / (1 - GRAM_ROWS * _U32) + 5 * _U32


@dataclass(frozen=True)
class Procrustes:
    """rotation: (d_x, d_y) with orthonormal columns (rows if d_x < d_y); error:
    ||X Q - Y||_F / ||Y||_F after alignment; error_before: ||X - Y||_F / ||Y||_F (equal widths
    only, else nan)."""

    rotation: np.ndarray
    error: float
    error_before: float


@dataclass(frozen=True)
class WholeSpace:
    """Linear CKA and the Procrustes fit of two spaces (None when not asked for)."""

    cka: float
    procrustes: Procrustes | None


def whole_space(x: np.ndarray, y: np.ndarray, *, align: bool = True,
                float32: bool = False) -> WholeSpace:
    """CKA and Procrustes of x (n, d_x) and y (n, d_y) from the uncentred float64 Gram blocks
    X^T X, Y^T Y, X^T Y (three n d^2 products, streamed over row chunks), and the Procrustes
    residual from a second pass over the rows (align False: CKA only).

    The Procrustes fit is Q = U V^T from the SVD X^T Y = U S V^T; its error is ||X Q - Y||_F
    evaluated on the rows (_residuals), never by the closed form ||X||^2 - 2 tr(S) + ||Y||^2,
    whose cancellation the square root amplifies (a copy gave 2.5e-4 from float32 blocks).
    For equal widths the identity is a candidate too, and the smaller residual is the error:
    rounding in the blocks moves U V^T off the identity by about their rounding, while a copy's
    own residual is exactly 0.

    float32 (for float32 x and y; 1.1-1.5x faster on a busy Xeon): the blocks are float32
    products of row chunks of GRAM_ROWS rows (c) centred by their column means rounded to
    float32 (mu, nu), summed in float64, and the uncentred blocks follow by the rank-one terms in
    float64. With X' = X - 1 mu^T and Y' = Y - 1 nu^T, every centred block is then within
    eps ||X'||_F ||Y'||_F of the float64 one in Frobenius norm, eps = GRAM_EPSILON = gamma_c + 5u
    (u = 2^-24: the float32 products, the rounding of the centred rows, the sums' rank-one
    correction), and every uncentred one within 2 eps ||X||_F ||Y||_F. So CKA =
    ||C_xy||^2 / (||C_xx|| ||C_yy||) is within a relative (1 + e_xy / ||C_xy||)^2 / ((1 - e_xx /
    ||C_xx||) (1 - e_yy / ||C_yy||)) - 1 of the float64 value (e: those bounds). Centring first
    keeps that bound relative to the spread of the rows, not to their mean. The residual pass
    is then in float32 too (its rounding relative to ||Q - I|| and ||X - Y||: _residuals).

    Centring is a rank-one correction, G - s s^T / n with s the column sums (a space whose
    centred block is below 1e-12 of its uncentred one counts as constant: CKA nan).
    """
    x, y = _pair(x, y)
    n = x.shape[0]
    low = float32 and x.dtype == y.dtype == np.float32
    if low:
        (gxx, gyy, gxy), (cxx, cyy, cxy) = _float32_blocks(x, y)
    else:
        gxx, gyy, gxy = (np.zeros((a, b)) for a, b in
                         ((x.shape[1],) * 2, (y.shape[1],) * 2, (x.shape[1], y.shape[1])))
        sx, sy = np.zeros(x.shape[1]), np.zeros(y.shape[1])
        for s in range(0, n, CHUNK):
            a, b = x[s:s + CHUNK].astype(np.float64), y[s:s + CHUNK].astype(np.float64)
            gxx += a.T @ a
            gyy += b.T @ b
            gxy += a.T @ b
            sx += a.sum(axis=0)
            sy += b.sum(axis=0)
        cxx, cyy = gxx - np.outer(sx, sx) / n, gyy - np.outer(sy, sy) / n
        cxy = gxy - np.outer(sx, sy) / n
    spread_x, spread_y = np.linalg.norm(cxx), np.linalg.norm(cyy)
    constant = (spread_x <= 1e-12 * np.linalg.norm(gxx) or spread_y <= 1e-12 * np.linalg.norm(gyy))
    cka = float("nan") if constant else float(np.linalg.norm(cxy) ** 2 / (spread_x * spread_y))
    if not align:
        return WholeSpace(cka=cka, procrustes=None)
    q = _polar(gxy)
    after, before, norm_y2 = _residuals(x, y, q, np.float32 if low else np.float64)
    if before <= after:  # the identity fits at least as well (equal widths only)
        q, after = np.eye(len(q)), before
    norm_y = np.sqrt(norm_y2)
    fit = Procrustes(rotation=q,
                     error=float(np.sqrt(after) / norm_y) if norm_y else float("nan"),
                     error_before=float(np.sqrt(before) / norm_y) if norm_y else float("nan"))
    return WholeSpace(cka=cka, procrustes=fit)


def _polar(g: np.ndarray) -> np.ndarray:
    """U V^T of the SVD g = U S V^T, by LAPACK on one thread: for a d x d block of a few
    thousand at most, threads only wait on each other (768 wide, on a busy 2-core machine:
    0.4 s on one thread, 1.6 s on two)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        u, _, vt = torch.linalg.svd(torch.from_numpy(g), full_matrices=False)
        return (u @ vt).numpy()
    finally:
        torch.set_num_threads(threads)


def _residuals(x: np.ndarray, y: np.ndarray, q: np.ndarray, dtype: type
               ) -> tuple[float, float, float]:
    """||x Q - y||_F^2, ||x - y||_F^2 (nan unless the widths are equal) and ||y||_F^2, squares
    summed in float64 over row chunks whose products and differences are in `dtype`.

    Equal widths: x Q - y as x (Q - I) - (y - x), so the rounding is relative to ||Q - I|| and
    ||y - x|| rather than to ||x||: a near copy's residual is not lost in its rounding (and
    y - x is exact in float32 where the entries are within a factor 2: Sterbenz)."""
    square = q.shape[0] == q.shape[1]
    step = (q - np.eye(len(q)) if square else q).astype(dtype)
    after = before = norm_y2 = 0.0
    for s in range(0, x.shape[0], CHUNK):
        a, b = x[s:s + CHUNK].astype(dtype, copy=False), y[s:s + CHUNK].astype(dtype, copy=False)
        mapped = a @ step
        if square:
            difference = b - a
            before += _squared_norm(difference)
            mapped -= difference
        else:
            mapped -= b
        after += _squared_norm(mapped)
        norm_y2 += _squared_norm(b)
    return after, before if square else float("nan"), norm_y2


def _float32_blocks(x: np.ndarray, y: np.ndarray
                    ) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """The uncentred Gram blocks (X^T X, Y^T Y, X^T Y) and the centred ones from float32
    products of centred row chunks (whole_space's float32 mode and its bound): all three blocks
    as one symmetric product Z^T Z of Z = [X' Y'] per chunk (numpy's syrk: 1.3-1.5x three
    separate products here)."""
    n, dx = x.shape
    mu, nu = (np.asarray(side.mean(axis=0, dtype=np.float64), np.float32) for side in (x, y))
    z = np.empty((min(GRAM_ROWS, n), dx + y.shape[1]), np.float32)
    gram = np.zeros((z.shape[1], z.shape[1]))
    sums = np.zeros(z.shape[1])
    for s in range(0, n, GRAM_ROWS):
        a, b = x[s:s + GRAM_ROWS], y[s:s + GRAM_ROWS]
        chunk = z[:len(a)]
        np.subtract(a, mu, out=chunk[:, :dx])
        np.subtract(b, nu, out=chunk[:, dx:])
        gram += chunk.T @ chunk
        sums += chunk.sum(axis=0, dtype=np.float64)
    means = np.concatenate([mu, nu]).astype(np.float64)
    centred = gram - np.outer(sums, sums) / n
    uncentred = gram + np.outer(sums, means) + np.outer(means, sums) + n * np.outer(means, means)
    parts = (np.s_[:dx, :dx], np.s_[dx:, dx:], np.s_[:dx, dx:])
    return tuple(uncentred[p] for p in parts), tuple(centred[p] for p in parts)


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
    cka = whole_space(x, y, align=False).cka
    if not np.isfinite(cka):
        raise DhwtError("linear CKA is undefined when a space is constant (all rows equal)")
    return cka


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
    fit = whole_space(x, y).procrustes
    if not np.isfinite(fit.error):
        raise DhwtError("Procrustes error is undefined when Y is all zeros")
    return fit


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


def _squared_norm(a: np.ndarray) -> float:
    """||a||_F^2 in float64 (einsum's float64 products and sums, no float64 copy of a)."""
    chunks = (a[s:s + CHUNK].reshape(-1) for s in range(0, a.shape[0], CHUNK))
    return float(sum(np.einsum("i,i->", v, v, dtype=np.float64) for v in chunks))


def copy_residue(x: np.ndarray, y: np.ndarray) -> float:
    """||x - y||_F / ||y||_F (inf when y is zero): the squares summed in float64, the
    differences in the wider of the two dtypes (float32 at least): exact where two entries are
    within a factor 2 of each other (Sterbenz), as in a copy after an untie, else within a
    relative 2^-24 for float32 entries, and so is the residue.

    Examples:
        >>> import numpy as np
        >>> copy_residue(np.ones((3, 2)), np.ones((3, 2)))
        0.0
        >>> round(copy_residue(np.eye(2), np.array([[0.0, 1.0], [1.0, 0.0]])), 4)  # equal norms
        1.4142
    """
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape:
        raise DhwtError(f"the copy residue compares matrices of one shape, got {x.shape} and "
                        f"{y.shape}")
    difference = sum(_squared_norm(np.subtract(x[s:s + CHUNK], y[s:s + CHUNK],
                                               dtype=np.result_type(x, y, np.float32)))
                     for s in range(0, len(x), CHUNK))
    norm = _squared_norm(y)
    return float(np.sqrt(difference / norm)) if norm > 0 else float("inf")
