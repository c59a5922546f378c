"""Softmax regression with fixed features: the model class the output-side theorems speak about.

A finite set of contexts r with weights P(r) > 0 (summing to 1), features h(r) in R^d held fixed,
true conditionals p(.|r) over V targets, and the model q(.|r) = softmax(U h(r) + b) with output
rows U (V, d) and an optional bias b (V,). Everything is float64 numpy so that the numeric checks
can solve optima to 1e-12 and test inequalities step by step without float32 noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Instance:
    """features (n, d) h(r); weights (n,) P(r); truth (n, V) p(.|r), rows summing to 1."""

    features: np.ndarray
    weights: np.ndarray
    truth: np.ndarray

    @property
    def n_targets(self) -> int:
        return self.truth.shape[1]

    @property
    def width(self) -> int:
        return self.features.shape[1]


def probabilities(features: np.ndarray, U: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """q(.|r) = softmax(U h(r) + b) for every row of `features`: (n, V)."""
    z = features @ U.T
    if b is not None:
        z = z + b
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def log_probabilities(features: np.ndarray, U: np.ndarray,
                      b: np.ndarray | None = None) -> np.ndarray:
    """log q(.|r), computed stably: (n, V)."""
    z = features @ U.T
    if b is not None:
        z = z + b
    m = z.max(axis=1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=1, keepdims=True))


def objective(
    inst: Instance, U: np.ndarray, b: np.ndarray | None = None, lam: float = 0.0,
    lam_bias: float = 0.0,
) -> float:
    """Population CE sum_r P(r) CE(p(.|r), q(.|r)) + lam/2 ||U||^2 + lam_bias/2 ||b||^2."""
    ce = -np.sum(inst.weights[:, None] * inst.truth * log_probabilities(inst.features, U, b))
    reg = 0.5 * lam * np.sum(U * U)
    if b is not None:
        reg += 0.5 * lam_bias * np.sum(b * b)
    return float(ce + reg)


def excess(inst: Instance, U: np.ndarray, b: np.ndarray | None = None) -> float:
    """Cross-entropy above its floor: sum_r P(r) KL(p(.|r) || q(.|r)) >= 0 (0 iff q = p)."""
    p = inst.truth
    logq = log_probabilities(inst.features, U, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * (np.log(np.where(p > 0, p, 1.0)) - logq), 0.0)
    return float(np.sum(inst.weights[:, None] * terms))


def gradient(
    inst: Instance, U: np.ndarray, b: np.ndarray | None = None, lam: float = 0.0,
    lam_bias: float = 0.0,
) -> tuple[np.ndarray, np.ndarray | None]:
    """(dJ/dU, dJ/db) of `objective`; row s of dJ/dU: sum_r P(r)(q(s|r) - p(s|r)) h(r) + lam u_s."""
    residual = inst.weights[:, None] * (probabilities(inst.features, U, b) - inst.truth)
    gU = residual.T @ inst.features + lam * U
    gb = None if b is None else residual.sum(axis=0) + lam_bias * b
    return gU, gb


def newton(
    inst: Instance,
    U: np.ndarray,
    b: np.ndarray | None = None,
    lam: float = 0.0,
    lam_bias: float = 0.0,
    tol: float = 1e-13,
    max_iter: int = 200,
) -> tuple[np.ndarray, np.ndarray | None, float]:
    """Minimise `objective` (convex in (U, b)) by damped Newton; return (U, b, final max |grad|).

    Singular directions (rows moved along the complement of span{h(r)}, a common shift of all
    rows) are handled by a least-squares step, which never moves the parameters along them, just
    as gradient descent never does: the minimiser found keeps the initial components there.
    """
    U = U.astype(np.float64).copy()
    b = None if b is None else b.astype(np.float64).copy()
    ones = np.ones((len(inst.features), 1))
    feats = inst.features if b is None else np.hstack([inst.features, ones])
    V, width = inst.n_targets, feats.shape[1]
    decay = np.full((V, width), lam)
    if b is not None:
        decay[:, -1] = lam_bias

    def pack(U_: np.ndarray, b_: np.ndarray | None) -> np.ndarray:
        return U_ if b_ is None else np.hstack([U_, b_[:, None]])

    def unpack(W: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        return (W, None) if b is None else (W[:, :-1], W[:, -1])

    W = pack(U, b)
    value = objective(inst, *unpack(W), lam, lam_bias)
    grad_norm = np.inf
    for _ in range(max_iter):
        gU, gb = gradient(inst, *unpack(W), lam, lam_bias)
        g = pack(gU, gb)
        grad_norm = float(np.abs(g).max())
        if grad_norm < tol:
            break
        q = probabilities(inst.features, *unpack(W))
        # Hessian of the CE part: sum_r P(r) (diag q - q q^T) kron h h^T, in row-major vec(W).
        hessian = np.zeros((V * width, V * width))
        for r in range(len(feats)):
            cov = np.diag(q[r]) - np.outer(q[r], q[r])
            hessian += inst.weights[r] * np.kron(cov, np.outer(feats[r], feats[r]))
        hessian += np.diag(decay.ravel())
        step = np.linalg.lstsq(hessian, g.ravel(), rcond=1e-14)[0].reshape(V, width)
        t = 1.0
        while t > 1e-10:
            candidate = W - t * step
            new_value = objective(inst, *unpack(candidate), lam, lam_bias)
            if new_value <= value + 1e-4 * t * float(np.sum(g * -step)) + 1e-15:
                break
            t *= 0.5
        W, value = candidate, new_value
    U_out, b_out = unpack(W)
    return U_out.copy(), None if b_out is None else b_out.copy(), grad_norm


def feature_bound(inst: Instance) -> float:
    """M = max_r ||h(r)|| over the contexts (all have P(r) > 0)."""
    return float(np.linalg.norm(inst.features, axis=1).max())


def random_features(gen: np.random.Generator, n: int, d: int,
                    rank: int | None = None) -> np.ndarray:
    """n Gaussian feature vectors in R^d; with `rank` < d they span a random rank-dim subspace."""
    if rank is None or rank >= d:
        return gen.normal(size=(n, d))
    basis = np.linalg.qr(gen.normal(size=(d, rank)))[0]
    return gen.normal(size=(n, rank)) @ basis.T


def random_weights(gen: np.random.Generator, n: int) -> np.ndarray:
    """A context distribution P(r) > 0 on n contexts."""
    w = gen.uniform(0.5, 1.5, size=n)
    return w / w.sum()


def truth_with_pair(
    gen: np.random.Generator, n: int, V: int, pair: tuple[int, int], ratio: float
) -> np.ndarray:
    """Random conditionals p(.|r) > 0 with p(pair[0]|r) = ratio * p(pair[1]|r) for every r.

    ratio 1 gives a conditionally equivalent pair; no model is assumed to realise the truth.
    """
    p = gen.uniform(0.2, 1.0, size=(n, V))
    p[:, pair[0]] = ratio * p[:, pair[1]]
    return p / p.sum(axis=1, keepdims=True)
