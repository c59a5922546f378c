"""T2, contraction of conditionally equivalent output rows (proofs/T2_contraction.md): its checks.

Symbolic: the odds-gap identities, x(e^x - 1) >= 0 and tanh(y)^2 <= y tanh(y), the exact
derivative of 1/2 ||u1 - u2||^2 along the flow, Gronwall and the step-size algebra.
Numeric: gradient descent in float64 with fixed and with arbitrarily moving features, the bound
||D_{k+1}|| <= (1 - eta lam) ||D_k|| tested at every step; the flow derivative from finite
differences of the objective (a second implementation of the gradient); the stationary point;
and two scope demonstrations (a frozen bias difference, Adam) where the conclusion fails.
Empirical: the package's Transformer under exact population gradient descent (theory.exor).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import sympy as sp

from dhwt.theory import softmax_regression as sr
from dhwt.theory.check import Check, Outcome, deferred, verdict
from dhwt.theory.symbolic import is_identity, never_negative, sign_follows

PAIR = (0, 1)
N_CONTEXTS, WIDTH, N_TARGETS = 25, 4, 5
LAM, STEPS = 0.05, 1500
ROUND_OFF = 1e-13  # float64 round-off allowed per step, relative to the size of U


# ---- symbolic -------------------------------------------------------------------------------


def symbolic_odds_gap(
    claim: Callable[[sp.Expr, sp.Expr, sp.Expr], sp.Expr] = lambda q1, q2, x: q2 * (sp.exp(x) - 1),
) -> Outcome:
    """With a shared normaliser, q1 - q2 = q2 (e^x - 1) = (q1 + q2) tanh(x/2), x = z1 - z2."""
    z1, z2, rest = sp.symbols("z1 z2 rest", real=True)
    normaliser = sp.exp(z1) + sp.exp(z2) + sp.exp(rest)
    q1, q2, x = sp.exp(z1) / normaliser, sp.exp(z2) / normaliser, z1 - z2
    first = is_identity(q1 - q2, claim(q1, q2, x))
    tanh_form = sp.simplify((q1 + q2) * sp.tanh(x / 2)).rewrite(sp.exp)
    second = is_identity(tanh_form, (q1 - q2).rewrite(sp.exp))
    ok = first and second
    return verdict(ok, "both identities proved" if ok
                   else f"q2(e^x-1): {first}, tanh form: {second}")


def symbolic_signs(
    term: Callable[[sp.Symbol], sp.Expr] = lambda x: x * (sp.exp(x) - 1),
) -> Outcome:
    """term(x) = x (e^x - 1) >= 0 for every real x; y - tanh(y) has the sign of y (so
    tanh(y)^2 <= y tanh(y), used in the discrete step)."""
    x = sp.Symbol("x", real=True)
    first = never_negative(term(x), x)
    second = sign_follows(x - sp.tanh(x), x)
    ok = first and second
    return verdict(ok, "x(e^x-1) >= 0 and tanh bound proved" if ok
                   else f"sign: {first}, tanh: {second}")


FlowClaim = Callable[[sp.Expr, sp.Expr, sp.Expr], sp.Expr]


def _stated_flow_term(P: sp.Expr, q2: sp.Expr, x: sp.Expr) -> sp.Expr:
    return -P * q2 * x * (sp.exp(x) - 1)


def symbolic_flow_derivative(claim: FlowClaim = _stated_flow_term, V: int = 3, d: int = 2,
                             contexts: int = 2) -> Outcome:
    """Exactly, on a symbolic instance with p1 = p2: along U' = -grad J (J = CE + lam/2||U||^2),
    d/dt 1/2 ||u1-u2||^2 = -sum_r P(r) q2 x (e^x - 1) - lam ||u1-u2||^2, x = <u1-u2, h(r)>."""
    U = sp.Matrix(V, d, lambda i, j: sp.Symbol(f"u{i}{j}", real=True))
    hs = [sp.Matrix(d, 1, lambda j, _: sp.Symbol(f"h{r}{j}", real=True)) for r in range(contexts)]
    P = sp.symbols(f"P0:{contexts}", positive=True)
    a = sp.symbols(f"a0:{contexts}", positive=True)  # p(s1|r) = p(s2|r) = a_r
    others = [[sp.Symbol(f"p{r}{k}", positive=True) for k in range(2, V - 1)]
              for r in range(contexts)]
    lam = sp.Symbol("lam", positive=True)
    J = lam / 2 * sum(U[i, j] ** 2 for i in range(V) for j in range(d))
    rhs = 0
    for r in range(contexts):
        z = U * hs[r]
        truth = [a[r], a[r], *others[r], 1 - 2 * a[r] - sum(others[r])]  # sums to 1
        log_normaliser = sp.log(sum(sp.exp(z[k]) for k in range(V)))
        J += P[r] * sum(-truth[k] * (z[k] - log_normaliser) for k in range(V))
        x = z[0] - z[1]
        q2 = sp.exp(z[1]) / sum(sp.exp(z[k]) for k in range(V))
        rhs += claim(P[r], q2, x)
    delta = U.row(0) - U.row(1)
    flow = -(sp.Matrix([[sp.diff(J, U[0, j]) - sp.diff(J, U[1, j]) for j in range(d)]]))
    lhs = (delta * flow.T)[0]
    rhs += -lam * (delta * delta.T)[0]
    ok = sp.expand(lhs - rhs) == 0 or sp.simplify(lhs - rhs) == 0
    return verdict(ok, f"identity {'proved' if ok else 'NOT proved'} "
                       f"(V={V}, d={d}, {contexts} contexts)")


def symbolic_step_algebra(
    bracket: Callable[[sp.Expr], sp.Expr] = lambda theta: 2 - 2 * theta,
) -> Outcome:
    """Gronwall: (y e^{2 lam t})' = (y' + 2 lam y) e^{2 lam t}; and the discrete step: with
    A = <D,G> >= 0, ||G||^2 <= M^2 A / 2 and eta = theta / (lam + M^2/4), 0 <= theta <= 1,
    ||(1-eta lam) D - eta G||^2 <= (1-eta lam)^2 ||D||^2 - eta A (2 - 2 theta)."""
    t, lam, M, theta, N, A = sp.symbols("t lam M theta N A", positive=True)
    y = sp.Function("y")
    gronwall = is_identity(sp.diff(y(t) * sp.exp(2 * lam * t), t),
                           (sp.diff(y(t), t) + 2 * lam * y(t)) * sp.exp(2 * lam * t))
    eta = theta / (lam + M**2 / 4)
    expanded = (1 - eta * lam) ** 2 * N - 2 * eta * (1 - eta * lam) * A + eta**2 * (M**2 * A / 2)
    step = is_identity(expanded, (1 - eta * lam) ** 2 * N - eta * A * bracket(theta))
    ok = gronwall and step
    return verdict(ok, "both proved" if ok else f"gronwall: {gronwall}, step: {step}")


# ---- numeric --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Descent:
    """One gradient-descent run: distances ||D_k|| (k = 0..steps) and the step's bound check."""

    distances: np.ndarray
    worst_ratio: float  # max_k ||D_{k+1}|| / ((1 - eta lam) ||D_k||) over steps with ||D_k|| > 1e-9
    worst_excess: float  # max_k ||D_{k+1}|| - (1 - eta lam)||D_k|| - round-off; <= 0: the theorem
    step_ok: bool  # eta (lam + M_k^2 / 4) <= 1 held at every step


def descend(
    inst: sr.Instance,
    U0: np.ndarray,
    lam: float,
    steps: int,
    eta: float,
    pair: tuple[int, int] = PAIR,
    features: Callable[[int], np.ndarray] | None = None,
    bias: np.ndarray | None = None,
) -> Descent:
    """U_{k+1} = U_k - eta (grad_U CE(U_k; h_k) + lam U_k), h_k = features(k) (default: fixed).

    `bias`, if given, is added to the logits and never trained (a frozen bias difference).
    """
    U = U0.copy()
    distances = [float(np.linalg.norm(U[pair[0]] - U[pair[1]]))]
    worst, excess, step_ok = 0.0, -np.inf, True
    for k in range(steps):
        h = inst.features if features is None else features(k)
        current = sr.Instance(h, inst.weights, inst.truth)
        step_ok &= eta * (lam + sr.feature_bound(current) ** 2 / 4) <= 1 + 1e-12
        gU, _ = sr.gradient(current, U, bias, lam)  # a given bias enters the logits, never moves
        U = U - eta * gU
        distances.append(float(np.linalg.norm(U[pair[0]] - U[pair[1]])))
        allowed = (1 - eta * lam) * distances[-2]
        excess = max(excess, distances[-1] - allowed - ROUND_OFF * max(1.0, float(np.abs(U).max())))
        if distances[-2] > 1e-9:
            worst = max(worst, distances[-1] / allowed)
    return Descent(np.array(distances), worst, excess, step_ok)


def contraction_outcome(run: Descent) -> Outcome:
    """pass iff every step contracted by (1 - eta lam) (within round-off) at a valid step size."""
    ok = run.step_ok and run.worst_excess <= 0
    return verdict(ok, f"worst ratio {run.worst_ratio:.12f}; "
                       f"||D|| {run.distances[0]:.3f} -> {run.distances[-1]:.2e}"
                       + ("" if run.step_ok else "; step size too large"))


def cnd_instance(gen: np.random.Generator, ratio: float = 1.0) -> sr.Instance:
    """Random features, P(r) and truth with p(s1|r) = ratio * p(s2|r) (ratio 1: s1 ~cnd s2)."""
    features = gen.normal(size=(N_CONTEXTS, WIDTH))
    return sr.Instance(features, sr.random_weights(gen, N_CONTEXTS),
                       sr.truth_with_pair(gen, N_CONTEXTS, N_TARGETS, PAIR, ratio))


def largest_step(inst: sr.Instance, lam: float, bound: float | None = None) -> float:
    """eta = 1 / (lam + M^2/4), the largest step the discrete theorem allows."""
    M = sr.feature_bound(inst) if bound is None else bound
    return 1.0 / (lam + M**2 / 4)


def numeric_fixed_features(gen: np.random.Generator, ratio: float = 1.0,
                           step_factor: float = 1.0) -> Outcome:
    """GD with fixed features at step_factor times the largest allowed step; ratio 1: cnd pair."""
    inst = cnd_instance(gen, ratio)
    eta = step_factor * largest_step(inst, LAM)
    run = descend(inst, gen.normal(size=(N_TARGETS, WIDTH)), LAM, STEPS, eta)
    return contraction_outcome(run)


def numeric_step_too_large(gen: np.random.Generator, factor: float = 2.0) -> Outcome:
    """Scope of (b): the step condition is nearly sharp. Features almost parallel, p1 = p2 = 0.49
    (so q1 + q2 ~ 1): at `factor` times the allowed step, some step fails to contract."""
    base = gen.normal(size=WIDTH)
    features = base + 0.05 * gen.normal(size=(N_CONTEXTS, WIDTH))
    truth = np.full((N_CONTEXTS, N_TARGETS), 0.005)
    truth[:, PAIR[0]] = truth[:, PAIR[1]] = 0.49
    truth /= truth.sum(axis=1, keepdims=True)
    inst = sr.Instance(features, sr.random_weights(gen, N_CONTEXTS), truth)
    eta = factor * largest_step(inst, LAM)
    run = descend(inst, 0.01 * gen.normal(size=(N_TARGETS, WIDTH)), LAM, 300, eta)
    return verdict(run.worst_excess > 0,
                   f"{factor:g}x the step: worst ratio {run.worst_ratio:.2f} (> 1 breaks it)")


def moving_features(gen: np.random.Generator, base: np.ndarray,
                    bound: float) -> Callable[[int], np.ndarray]:
    """An arbitrary feature trajectory: a random walk, each h_k(r) rescaled into ball `bound`."""
    def clip(h: np.ndarray) -> np.ndarray:
        return h * np.minimum(1.0, bound / np.linalg.norm(h, axis=1, keepdims=True))

    path = [clip(base)]
    for _ in range(STEPS):
        path.append(clip(path[-1] + 0.3 * gen.normal(size=base.shape)))
    return lambda k: path[k]


def numeric_moving_features(gen: np.random.Generator, ratio: float = 1.0) -> Outcome:
    """GD while the features wander (random walk inside the ball of radius 3)."""
    inst = cnd_instance(gen, ratio)
    bound = 3.0
    walk = moving_features(gen, inst.features, bound)
    eta = largest_step(inst, LAM, bound)
    run = descend(inst, gen.normal(size=(N_TARGETS, WIDTH)), LAM, STEPS, eta, features=walk)
    return contraction_outcome(run)


def flow_derivative_fd(inst: sr.Instance, U: np.ndarray, b: np.ndarray | None, lam: float,
                       lam_bias: float = 0.0, pair: tuple[int, int] = PAIR,
                       step: float = 1e-5) -> tuple[float, float, float]:
    """(dV/dt along -grad J by central differences, the proof's closed form, lam ||u1-u2||^2).

    V = 1/2 ||u1-u2||^2 (+ 1/2 (b1-b2)^2 with a bias). The gradient comes from finite
    differences of the objective, independently of sr.gradient.
    """
    params = U if b is None else np.hstack([U, b[:, None]])
    unpack = (lambda W: (W, None)) if b is None else (lambda W: (W[:, :-1], W[:, -1]))
    grad = np.zeros_like(params)
    for index in np.ndindex(params.shape):
        up, down = params.copy(), params.copy()
        up[index] += step
        down[index] -= step
        grad[index] = (sr.objective(inst, *unpack(up), lam, lam_bias)
                       - sr.objective(inst, *unpack(down), lam, lam_bias)) / (2 * step)
    delta = params[pair[0]] - params[pair[1]]
    numeric = float(delta @ -(grad[pair[0]] - grad[pair[1]]))
    logits = inst.features @ U.T + (0.0 if b is None else b)
    x = logits[:, pair[0]] - logits[:, pair[1]]
    q2 = sr.probabilities(inst.features, U, b)[:, pair[1]]
    du = U[pair[0]] - U[pair[1]]
    db = 0.0 if b is None else b[pair[0]] - b[pair[1]]
    closed = float(-np.sum(inst.weights * q2 * x * np.expm1(x)) - lam * du @ du - lam_bias * db**2)
    return numeric, closed, float(lam * du @ du)


def numeric_flow_derivative(gen: np.random.Generator, ratio: float = 1.0) -> Outcome:
    """At 40 random points (odd ones with an undecayed bias): finite-difference dV/dt equals the
    closed form of the proof and is <= -lam ||u1-u2||^2."""
    worst_gap, worst_margin = 0.0, np.inf
    for trial in range(40):
        inst = cnd_instance(gen, ratio)
        U = 2 * gen.normal(size=(N_TARGETS, WIDTH))
        b = gen.normal(size=N_TARGETS) if trial % 2 else None  # odd trials: undecayed bias in V
        numeric, closed, floor = flow_derivative_fd(inst, U, b, LAM)
        worst_gap = max(worst_gap, abs(numeric - closed) / max(1.0, abs(closed)))
        worst_margin = min(worst_margin, -floor - numeric)  # >= 0 is dV/dt <= -lam ||du||^2
    ok = worst_gap < 1e-6 and worst_margin >= -1e-8
    return verdict(ok, f"fd vs closed form {worst_gap:.1e}; "
                       f"min(-lam||du||^2 - dV/dt) {worst_margin:.2e}")


def numeric_stationary(gen: np.random.Generator, ratio: float = 1.0) -> Outcome:
    """Stationary points of the regularised objective, bias decayed or not: u1 = u2, b1 = b2."""
    inst = cnd_instance(gen, ratio)
    worst = 0.0
    for lam_bias in (LAM, 0.0):
        U0, b0 = gen.normal(size=(N_TARGETS, WIDTH)), gen.normal(size=N_TARGETS)
        U, b, _ = sr.newton(inst, U0, b0, LAM, lam_bias)
        rows, biases = np.linalg.norm(U[PAIR[0]] - U[PAIR[1]]), abs(b[PAIR[0]] - b[PAIR[1]])
        worst = max(worst, float(rows), float(biases))
    return verdict(worst <= 1e-9, f"max(||u1-u2||, |b1-b2|) = {worst:.1e} (bias decayed / not)")


def numeric_frozen_bias(gen: np.random.Generator, gap: float = 1.0) -> Outcome:
    """Scope of (c): a frozen bias gap makes equal rows of a cnd pair part (gap 0: they do not)."""
    inst = cnd_instance(gen)
    U0 = gen.normal(size=(N_TARGETS, WIDTH))
    U0[PAIR[0]] = U0[PAIR[1]]
    bias = np.zeros(N_TARGETS)
    bias[PAIR[0]] = gap
    run = descend(inst, U0, LAM, 300, largest_step(inst, LAM), bias=bias)
    grew = run.distances[-1] > 1e-3
    return verdict(grew and run.worst_excess > 0,
                   f"||u1-u2|| 0 -> {run.distances[-1]:.3f} (bias gap {gap:g})")


def adam_distances(inst: sr.Instance, U0: np.ndarray, lam: float, steps: int, lr: float = 0.05,
                   betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-12) -> np.ndarray:
    """||u1-u2|| along AdamW (decoupled decay lam) on the population CE with fixed features."""
    U, m, v = U0.copy(), np.zeros_like(U0), np.zeros_like(U0)
    out = [float(np.linalg.norm(U[PAIR[0]] - U[PAIR[1]]))]
    for t in range(1, steps + 1):
        g, _ = sr.gradient(inst, U)
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        update = (m / (1 - betas[0] ** t)) / (np.sqrt(v / (1 - betas[1] ** t)) + eps)
        U = U * (1 - lr * lam) - lr * update
        out.append(float(np.linalg.norm(U[PAIR[0]] - U[PAIR[1]])))
    return np.array(out)


def numeric_adam(gen: np.random.Generator, equal_start: bool = False) -> Outcome:
    """Scope: AdamW on a cnd pair from a random start has steps that do not contract. (From equal
    rows it keeps them equal, see T3 (a), and finds none.)"""
    inst = cnd_instance(gen)
    U0 = gen.normal(size=(N_TARGETS, WIDTH))
    if equal_start:
        U0[PAIR[0]] = U0[PAIR[1]]
    d = adam_distances(inst, U0, LAM, 1000)
    rises = np.flatnonzero(d[1:] > d[:-1] * (1 - 0.05 * LAM))  # GD would shrink by >= (1-lr lam)
    first = f" (first at step {rises[0] + 1}); final ||D|| {d[-1]:.1e}" if rises.size else ""
    return verdict(rises.size > 0, f"{rises.size} of 1000 steps fail the contraction{first}")


CHECKS = (
    Check("T2", "odds gap q1-q2", "symbolic",
          "= q2(e^x-1) = (q1+q2)tanh(x/2)", lambda t: symbolic_odds_gap()),
    Check("T2", "sign lemmas", "symbolic",
          "x(e^x-1) >= 0; tanh^2 y <= y tanh y", lambda t: symbolic_signs()),
    Check("T2", "derivative along the flow", "symbolic",
          "= -sum P q2 x(e^x-1) - lam||D||^2", lambda t: symbolic_flow_derivative()),
    Check("T2", "Gronwall and step algebra", "symbolic",
          "identities hold", lambda t: symbolic_step_algebra()),
    Check("T2", "GD, fixed features", "numeric",
          "||D_k+1|| <= (1-eta lam)||D_k|| every step",
          lambda t: numeric_fixed_features(t.generator)),
    Check("T2", "GD, moving features", "numeric",
          "same bound with h_k changing", lambda t: numeric_moving_features(t.generator)),
    Check("T2", "flow derivative by finite diff.", "numeric",
          "matches closed form; dV/dt <= -lam||du||^2",
          lambda t: numeric_flow_derivative(t.generator)),
    Check("T2", "stationary point", "numeric",
          "u1 = u2 and b1 = b2", lambda t: numeric_stationary(t.generator)),
    Check("T2", "scope: step 2x too large", "numeric",
          "contraction fails (condition nearly sharp)",
          lambda t: numeric_step_too_large(t.generator)),
    Check("T2", "scope: frozen bias gap", "numeric",
          "rows part (T2 needs b in the flow)", lambda t: numeric_frozen_bias(t.generator)),
    Check("T2", "scope: AdamW", "numeric",
          "some step does not contract", lambda t: numeric_adam(t.generator)),
    Check("T2", "Transformer, exact population GD", "empirical",
          "cnd pairs (1a/1b, EVEN/ODD) contract every step",
          deferred("dhwt.theory.exor", "population_descent")),
)
