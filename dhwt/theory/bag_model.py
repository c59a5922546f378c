"""A small language with a semantically equivalent pair, and the bag-of-embeddings softmax model.

The language: strings of `length` classes drawn uniformly from {A, B, C}; class A is written as
token a1 with probability `pi` and a2 otherwise (independently per position), B as b, C as c.
The target y (one of `n_targets`) is drawn from a random table p(y | classes). So a1 ~sem a2
for every pi, and the data is invariant under swapping a1 <-> a2 in the inputs iff pi = 1/2.

The model: h(x) = sum_i E[x_i] (E the (4, d) input embeddings), q(.|x) = softmax(U h(x)), U the
(n_targets, d) output rows (a separate vocabulary: untied). Its logits are linear in E for fixed
U, so the regularised objective is strictly convex in E: the case where T3 proves equal rows.
Exact: every string is enumerated with its probability, so the objective is the population one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

TOKENS = ("a1", "a2", "b", "c")
PAIR = (0, 1)


@dataclass(frozen=True)
class BagData:
    """counts (n, 4): token counts of each string; weights (n,) P(x); truth (n, K) p(.|x)."""

    counts: np.ndarray
    weights: np.ndarray
    truth: np.ndarray


def bag_language(table: np.ndarray, pi: float, length: int = 3) -> BagData:
    """Enumerate every string with its probability; `table` has shape (3,) * length + (K,)."""
    counts, weights, truth = [], [], []
    for classes in itertools.product(range(3), repeat=length):
        choices = [[(0, pi), (1, 1 - pi)] if c == 0 else [(c + 1, 1.0)] for c in classes]
        for written in itertools.product(*choices):
            row = np.zeros(len(TOKENS))
            for token, _ in written:
                row[token] += 1
            counts.append(row)
            weights.append(np.prod([w for _, w in written]) / 3**length)
            truth.append(table[classes])
    return BagData(np.array(counts), np.array(weights), np.array(truth))


def random_table(gen: np.random.Generator, n_targets: int = 3, length: int = 3) -> np.ndarray:
    """A random conditional table p(y | classes), Dirichlet(1) per class tuple."""
    return gen.dirichlet(np.ones(n_targets), size=(3,) * length)


def _probabilities(data: BagData, E: np.ndarray, U: np.ndarray) -> np.ndarray:
    z = (data.counts @ E) @ U.T
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def objective(data: BagData, E: np.ndarray, U: np.ndarray, lam: float) -> float:
    """sum_x P(x) CE(p(.|x), q(.|x)) + lam/2 (||E||^2 + ||U||^2)."""
    q = _probabilities(data, E, U)
    ce = -np.sum(data.weights[:, None] * data.truth * np.log(q))
    return float(ce + 0.5 * lam * (np.sum(E * E) + np.sum(U * U)))


def gradients(data: BagData, E: np.ndarray, U: np.ndarray,
              lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(dJ/dE, dJ/dU)."""
    h = data.counts @ E
    residual = data.weights[:, None] * (_probabilities(data, E, U) - data.truth)  # (n, K)
    return data.counts.T @ (residual @ U) + lam * E, residual.T @ h + lam * U


def minimise_inputs(data: BagData, E: np.ndarray, U: np.ndarray, lam: float,
                    tol: float = 1e-13, max_iter: int = 100) -> tuple[np.ndarray, float]:
    """The unique minimiser over E of J(E, U) for fixed U (damped Newton; lam > 0)."""
    E = E.copy()
    n_tokens, d = E.shape
    value = objective(data, E, U, lam)
    grad_norm = np.inf
    for _ in range(max_iter):
        gE, _ = gradients(data, E, U, lam)
        grad_norm = float(np.abs(gE).max())
        if grad_norm < tol:
            break
        q = _probabilities(data, E, U)
        hessian = lam * np.eye(n_tokens * d)
        for x in range(len(data.weights)):
            inner = U.T @ (np.diag(q[x]) - np.outer(q[x], q[x])) @ U
            hessian += data.weights[x] * np.kron(np.outer(data.counts[x], data.counts[x]), inner)
        step = np.linalg.solve(hessian, gE.ravel()).reshape(n_tokens, d)
        t = 1.0
        while t > 1e-10:
            candidate = E - t * step
            new_value = objective(data, candidate, U, lam)
            if new_value <= value - 1e-4 * t * float(np.sum(gE * step)) + 1e-15:
                break
            t *= 0.5
        E, value = candidate, new_value
    return E, grad_norm


def descend_jointly(data: BagData, E: np.ndarray, U: np.ndarray, lam: float, steps: int,
                    lr: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Plain gradient descent on (E, U) together. Returns the final (E, U) and, per iterate,
    ||e1 - e2|| and the Frobenius norm of dJ/dE."""
    E, U = E.copy(), U.copy()
    gaps, grads = [], []
    for _ in range(steps + 1):
        gE, gU = gradients(data, E, U, lam)
        gaps.append(float(np.linalg.norm(E[PAIR[0]] - E[PAIR[1]])))
        grads.append(float(np.linalg.norm(gE)))
        E, U = E - lr * gE, U - lr * gU
    return E, U, np.array(gaps), np.array(grads)


def adamw_rows(data: BagData, E: np.ndarray, U: np.ndarray, lam: float, steps: int,
               lr: float = 0.02, betas: tuple[float, float] = (0.9, 0.999),
               eps: float = 1e-12) -> float:
    """Full-batch AdamW on (E, U) (decoupled decay lam); returns max_t ||e1(t) - e2(t)||."""
    params = [E.copy(), U.copy()]
    moments = [[np.zeros_like(p), np.zeros_like(p)] for p in params]
    worst = float(np.linalg.norm(params[0][PAIR[0]] - params[0][PAIR[1]]))
    for t in range(1, steps + 1):
        grads = gradients(data, params[0], params[1], 0.0)
        for p, g, (m, v) in zip(params, grads, moments):
            m *= betas[0]
            m += (1 - betas[0]) * g
            v *= betas[1]
            v += (1 - betas[1]) * g * g
            p *= 1 - lr * lam
            p -= lr * (m / (1 - betas[0] ** t)) / (np.sqrt(v / (1 - betas[1] ** t)) + eps)
        worst = max(worst, float(np.linalg.norm(params[0][PAIR[0]] - params[0][PAIR[1]])))
    return worst
