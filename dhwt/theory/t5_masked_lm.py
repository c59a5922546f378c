"""T5, masked-LM relations (proofs/T5_masked_lm.md): the checks `dhwt verify-theorems` runs.

In a masked LM (dhwt's masking rule), a non-vacuous cnd pair is sem; a pair whose strings scale
by one constant per length and position under a swap is sem with that ratio; where the strings of
a length are a product (P), what varies is maskable (M) and another position can be masked (N),
the converse holds (Brook's lemma), and without any one of them it fails. A constant ratio is
what a per-token output bias absorbs.

Symbolic: the algebra of (a), (b) and (e). Numeric: brute force on small joints built here
(independent of dhwt.languages). Exhaustive: dhwt's exact ground truth (dhwt.languages.truth) of
every built-in grammar, of T5's own and of seeded random grammars. Empirical: the package's
transformers trained by exact population AdamW with rows free or held merged (dhwt.theory.price),
in the default mode (seconds).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np
import sympy as sp

from dhwt.theory.check import Check, Outcome, deferred, verdict
from dhwt.theory.symbolic import is_identity

S1, S2, OTHER, OTHER2 = "s1", "s2", "t", "u"

# ---- symbolic -------------------------------------------------------------------------------


def _joint_symbols(alphabet: tuple[str, ...], length: int) -> dict[tuple[str, ...], sp.Symbol]:
    return {x: sp.Symbol("P_" + "_".join(x), positive=True)
            for x in itertools.product(alphabet, repeat=length)}


def _conditional(P: dict, x: tuple[str, ...], j: int, y: str, alphabet: tuple[str, ...]) -> sp.Expr:
    """P(x_j = y | x_{-j}) from the joint table (every symbol maskable)."""
    def put(v: str) -> tuple[str, ...]:
        return x[:j] + (v,) + x[j + 1:]
    return P[put(y)] / sum(P[put(v)] for v in alphabet)


def _swap(x: tuple[str, ...], i: int) -> tuple[str, ...]:
    flip = {S1: S2, S2: S1}
    return x[:i] + (flip.get(x[i], x[i]),) + x[i + 1:]


def _every_sem_equation(P: dict, alphabet: tuple[str, ...], length: int) -> Iterator[sp.Expr]:
    """p(y | r) - p(y | r') for every context r (of a string with P > 0) holding s1 at i != j
    and every target y."""
    for x in (x for x, v in P.items() if v != 0):
        for i, j in itertools.permutations(range(length), 2):
            if x[i] == S1:
                for y in alphabet:
                    yield (_conditional(P, x, j, y, alphabet)
                           - _conditional(P, _swap(x, i), j, y, alphabet))


def symbolic_cnd_gives_sem(length: int = 3, impose: bool = True) -> Outcome:
    """(a): impose cnd (P(x) = P(tau_i x) for every x, i: what p(s1|r) = p(s2|r) says by Lemma 0)
    on a generic joint over {s1, s2, t}^length; every sem equation then holds identically."""
    alphabet = (S1, S2, OTHER)
    P = _joint_symbols(alphabet, length)
    if impose:  # one symbol per orbit of the swaps: P is a function of the string with s2 -> s1
        P = {x: P[tuple(S1 if v == S2 else v for v in x)] for x in P}
    equations = list(_every_sem_equation(P, alphabet, length))
    ok = all(is_identity(e, sp.Integer(0)) for e in equations)
    return verdict(ok, f"{len(equations)} sem equations {'all identities' if ok else 'NOT all 0'}")


def symbolic_ratio_gives_sem(length: int = 3, position: int = 0, constant: bool = True) -> Outcome:
    """(b <=): P(x) = kappa P(tau_i x) at one position i (s1, s2 nowhere else) makes every sem
    equation an identity, for a generic joint and symbolic kappa."""
    alphabet = (S1, S2, OTHER, OTHER2)
    kappa = sp.Symbol("kappa", positive=True)
    base = _joint_symbols(alphabet, length)
    P = {}
    for x in base:
        if any(v in (S1, S2) for k, v in enumerate(x) if k != position):
            P[x] = sp.Integer(0)  # the pair occurs at `position` only
        elif x[position] == S1:
            rest = x[:position] + (S2,) + x[position + 1:]
            scale = kappa if constant else sp.Symbol("kappa_" + "_".join(x), positive=True)
            P[x] = scale * base[rest]
        else:
            P[x] = base[x]
    equations = list(_every_sem_equation(P, alphabet, length))
    ok = bool(equations) and all(is_identity(e, sp.Integer(0)) for e in equations)
    return verdict(ok, f"{len(equations)} sem equations {'all identities' if ok else 'NOT all 0'}")


def symbolic_brook(n: int = 3, factors: int | None = None) -> Outcome:
    """Brook's lemma on a generic positive joint over {0,1}^n: Q(z)/Q(z') equals the product of
    the full-conditional ratios along z' -> z, identically (so full conditionals fix Q).
    `factors`: how many of the n ratios to multiply (a test drops one)."""
    Q = {z: sp.Symbol("Q" + "".join(map(str, z)), positive=True)
         for z in itertools.product((0, 1), repeat=n)}
    z, zp = (1,) * n, (0,) * n

    def full(point: tuple[int, ...], k: int) -> sp.Expr:
        return Q[point] / sum(Q[point[:k] + (v,) + point[k + 1:]] for v in (0, 1))

    product = sp.Integer(1)
    for k in range(n if factors is None else factors):
        mixed = z[:k] + zp[k:]  # z_1..z_{k-1} from z, the rest from z'
        product *= full(z[:k + 1] + zp[k + 1:], k) / full(mixed, k)
    ok = is_identity(Q[z] / Q[zp], product)
    return verdict(ok, f"Q(z)/Q(z') = prod of {n} conditional ratios: "
                       f"{'proved' if ok else 'NOT proved'}")


def symbolic_bias_split(split: Callable[[sp.Expr], tuple[sp.Expr, sp.Expr]] = (
        lambda k: (sp.log(k / (1 + k)), sp.log(1 / (1 + k))))) -> Outcome:
    """(e): biases b + log(kappa/(1+kappa)) and b + log(1/(1+kappa)) on one merged row give the
    pair the exact ratio kappa, leave the normaliser (and so every other target) unchanged, and
    add nothing to the KL: p pi_k log(p pi_k / (q pi_k)) summed over k is p log(p/q)."""
    k, b, p, q = sp.symbols("kappa b p q", positive=True)
    shift1, shift2 = split(k)
    total = sp.exp(b + shift1) + sp.exp(b + shift2)
    pi1, pi2 = sp.exp(shift1), sp.exp(shift2)
    kl = p * pi1 * sp.log(p * pi1 / (q * pi1)) + p * pi2 * sp.log(p * pi2 / (q * pi2))
    ok = (is_identity(total, sp.exp(b)) and is_identity(sp.exp(shift1 - shift2), k)
          and is_identity(kl, p * sp.log(p / q)))
    return verdict(ok, f"merged row + split bias is exact: {'proved' if ok else 'NOT proved'}")


# ---- numeric: brute force on joint tables ---------------------------------------------------

Joint = dict[tuple[str, ...], float]


def masked_conditionals(joint: Joint) -> dict[tuple[tuple[str, ...], int], dict[str, float]]:
    """Every masked context (x_{-j} with None at j, j) of `joint` with its conditional p(.|r)
    (every symbol maskable; dhwt's rule, Lemma 0)."""
    table: dict = {}
    for x, prob in joint.items():
        if prob <= 0:
            continue
        for j in range(len(x)):
            r = (x[:j] + (None,) + x[j + 1:], j)
            table.setdefault(r, {})
            table[r][x[j]] = table[r].get(x[j], 0.0) + prob
    return {r: {y: v / sum(row.values()) for y, v in row.items()} for r, row in table.items()}


def brute_relations(joint: Joint, first: str, second: str, tol: float = 1e-12
                    ) -> tuple[bool, bool, float]:
    """(sem, cnd, spread): the definitions applied to the masked contexts of `joint`, and the
    largest spread of log p(first|r)/p(second|r) over contexts with one masked position and
    length (inf where exactly one of the two is possible)."""
    cond = masked_conditionals(joint)
    flip = {first: second, second: first}
    sem = True
    for (context, j), p in cond.items():
        for i, v in enumerate(context):
            if v in flip:
                swapped = (context[:i] + (flip[v],) + context[i + 1:], j)
                q = cond.get(swapped)
                if q is None or any(abs(p.get(y, 0) - q.get(y, 0)) > tol for y in {*p, *q}):
                    sem = False
    cnd = all(abs(p.get(first, 0) - p.get(second, 0)) <= tol for p in cond.values())
    ratios: dict = {}
    spread = 0.0
    for (context, j), p in cond.items():
        a, b = p.get(first, 0.0), p.get(second, 0.0)
        if a == b == 0:
            continue
        if a == 0 or b == 0:
            spread = np.inf
            continue
        ratios.setdefault((len(context), j), []).append(np.log(a / b))
    for values in ratios.values():
        spread = max(spread, max(values) - min(values))
    return sem, cnd, spread


def counterexample(ratio_after_bd: float = 9.0) -> Joint:
    """(c): a c s1, a c s2 at 1 : 1, b d s1, b d s2 at 1 : ratio_after_bd; half the mass each."""
    low = 0.5 / (1 + ratio_after_bd)
    return {("a", "c", S1): 0.25, ("a", "c", S2): 0.25,
            ("b", "d", S1): low, ("b", "d", S2): 0.5 - low}


def numeric_counterexample(joint: Joint | None = None) -> Outcome:
    """(c): without positivity a sem pair's ratio may change with the context."""
    sem, cnd, spread = brute_relations(joint or counterexample(), S1, S2)
    return verdict(sem and not cnd and 0 < spread < np.inf,
                   f"s1~s2 sem {sem}, cnd {cnd}, log-ratio spread {spread:.3f} (log 9 = 2.197)")


def random_positive_joint(gen: np.random.Generator, constant: bool, length: int = 3,
                          others: int = 2) -> Joint:
    """A positive joint on a product: position 0 takes s1, s2 or one of `others` symbols, the
    rest `others` symbols each; the (s1 or s2, rest) mass is split 1 : kappa with one kappa
    (`constant`) or a kappa drawn per rest of the string."""
    alphabet = [f"t{k}" for k in range(others)]
    kappa = gen.uniform(0.2, 5.0)
    joint = {}
    for rest in itertools.product(alphabet, repeat=length - 1):
        mass = gen.uniform(0.1, 1.0)
        split = kappa if constant else gen.uniform(0.2, 5.0)
        joint[(S1, *rest)] = mass * split / (1 + split)
        joint[(S2, *rest)] = mass / (1 + split)
        for t in alphabet:
            joint[(t, *rest)] = gen.uniform(0.1, 1.0)
    total = sum(joint.values())
    return {x: v / total for x, v in joint.items()}


def numeric_sem_iff_ratio(gen: np.random.Generator, draws: int = 40,
                          draw: Callable[[np.random.Generator, bool], Joint] = random_positive_joint
                          ) -> Outcome:
    """(b), both directions, under positivity: on random positive joints (`draw`), half with one
    constant ratio and half with a ratio drawn per context, s1 ~sem s2 exactly where the ratio
    is constant; the constant equals P(x_0 = s1) / P(x_0 = s2)."""
    agree, constant_worst = 0, 0.0
    for k in range(draws):
        constant = k % 2 == 0
        joint = draw(gen, constant)
        sem, _, spread = brute_relations(joint, S1, S2, tol=1e-9)
        agree += sem == (spread < 1e-9) and sem == constant
        if sem:
            marginal = (sum(v for x, v in joint.items() if x[0] == S1)
                        / sum(v for x, v in joint.items() if x[0] == S2))
            for (_, j), p in masked_conditionals(joint).items():
                if j == 0:
                    gap = abs(np.log(p[S1] / p[S2] / marginal))
                    constant_worst = max(constant_worst, gap)
    ok = agree == draws and constant_worst < 1e-9
    return verdict(ok, f"sem <=> constant ratio in {agree}/{draws} joints; "
                       f"ratio = marginal ratio to {constant_worst:.0e}")


def numeric_merge_extension(gen: np.random.Generator, contexts: int = 6, targets: int = 4,
                            kappa: float = 9.0, bias_kappa: float | None = None) -> Outcome:
    """(e) on numbers: random merged-language conditionals p'(.|r') and model q'(.|r') (target 0
    is the merged s); splitting s into s1, s2 at 1 : kappa in the truth and by the split bias in
    the model (at 1 : bias_kappa, default kappa) leaves the excess unchanged."""
    p = gen.dirichlet(np.ones(targets), size=contexts)
    logits = gen.normal(size=(contexts, targets))
    q = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    weights = gen.dirichlet(np.ones(contexts))
    merged = float(weights @ (p * np.log(p / q)).sum(1))
    pi = np.array([kappa / (1 + kappa), 1 / (1 + kappa)])
    split_p = np.concatenate([p[:, :1] * pi, p[:, 1:]], axis=1)
    model_kappa = kappa if bias_kappa is None else bias_kappa
    model_pi = np.array([model_kappa / (1 + model_kappa), 1 / (1 + model_kappa)])
    split_logits = np.concatenate([logits[:, :1] + np.log(model_pi), logits[:, 1:]], axis=1)
    split_q = np.exp(split_logits) / np.exp(split_logits).sum(1, keepdims=True)
    split = float(weights @ (split_p * np.log(split_p / split_q)).sum(1))
    return verdict(abs(split - merged) < 1e-12,
                   f"excess {split:.6f} split = {merged:.6f} merged")


CHECKS = (
    Check("T5", "cnd gives sem", "symbolic",
          "sem equations hold under cnd", lambda t: symbolic_cnd_gives_sem()),
    Check("T5", "frequency ratio gives sem", "symbolic",
          "P = kappa P o tau => sem", lambda t: symbolic_ratio_gives_sem()),
    Check("T5", "Brook's lemma", "symbolic",
          "Q(z)/Q(z') = prod cond. ratios", lambda t: symbolic_brook()),
    Check("T5", "bias split", "symbolic",
          "merged row + log-ratio bias exact", lambda t: symbolic_bias_split()),
    Check("T5", "sem iff constant ratio", "numeric",
          "positive joints: sem <=> const", lambda t: numeric_sem_iff_ratio(t.generator)),
    Check("T5", "no positivity, no constant", "numeric",
          "sem with a varying ratio", lambda t: numeric_counterexample()),
    Check("T5", "merged language, same excess", "numeric",
          "split excess = merged excess", lambda t: numeric_merge_extension(t.generator)),
    Check("T5", "built-in and T5's grammars", "exhaustive",
          "mlm: no cnd-only; sem = ratio",
          deferred("dhwt.theory.t5_grammars", "named_grammars")),
    Check("T5", "random grammars", "exhaustive",
          "mlm: no cnd-only; sem <=> ratio",
          deferred("dhwt.theory.t5_grammars", "random_grammars")),
    Check("T5", "merged rows, masked pair", "empirical",
          "merged: B(0) w/o bias, 0 with",
          deferred("dhwt.theory.price", "masked_merged_rows")),
    Check("T5", "merged rows, causal conflict", "empirical",
          "merged + bias pays B_b(0) > 0",
          deferred("dhwt.theory.price", "causal_merged_rows")))
