"""The `demand` family: K twin pairs whose output demand and DH status are set apart.

Strings `x_m s_jv [tail]` (m, j < K, v in {a, b}). The context token x_m comes with probability
w_m (distinct: no two x are conditionally equivalent); pair j follows with probability
P[m, j] = softmax(G[m])_j, and within the pair the twins split by the output `pattern`:

    equal     1 : 1                        p(s_ja | x_m) = p(s_jb | x_m): ~cnd
    constant  1 : C in every context       one log-ratio log C for all K pairs: not ~cnd
    ratio     q[m, j] : 1 - q[m, j]        logit q = log(C) Z[m, j]: K x K log-ratios, not ~cnd

Then the tail (`tail = true`, for a causal LM): with probability `dose` (λ) the twin's own tail
t_ja / t_jb, else the pair's shared token c_j. So λ = 0 is one shared tail (the twins predict the
same future: ~sem), λ = 1 own tails (not ~sem), and every λ > 0 makes the twins differ in their
future: the tail tells which twin came with probability λ, so a model must carry λ times the
twins' entropy within their pair (log 2 at 1 : 1) to the tail. Symbols of probability zero are not in
the language (the t's at λ = 0, the c's at λ = 1).

The demand factorial is pattern x λ in {0, 1}: six languages, three violating the DH (equal
at λ 1: cnd only; constant and ratio at λ 0: sem only) and three holding it, each violating
language beside a DH-holding one of the same output pattern. The DH dose is `ratio` over λ:
λ = 0 violates, every λ > 0 holds. (Not the literal "t_ja : t_jb at (1 + λ) : (1 - λ) after
s_ja": there both tails precede only [EOS] and follow both twins, so for 0 < λ < 1 the tails are
~sem and not ~cnd, and the violation moves to them instead of going away.)

`tail = false` (a masked LM: strings `x_m s_jv`; λ must be 0): equal holds the DH, constant is
sem only, ratio neither, so masked languages have no DH-holding partner of equal demand.

G and Z are N(0, 1) draws of a generator seeded by (`draw`, K): one language per draw seed.

Examples:
    >>> from dhwt.languages import compute_truth, load_language
    >>> language = load_language("demand", {"k": 2, "pattern": "constant", "dose": 0.0})
    >>> language.symbols
    ('x0', 'x1', 's0a', 's0b', 's1a', 's1b', 'c0', 'c1')
    >>> truth = compute_truth(language, "clm")
    >>> [(p.first, p.second, p.kind) for p in truth.pairs() if not p.dh]
    [('s0a', 's0b', 'sem only'), ('s1a', 's1b', 'sem only')]
"""

from __future__ import annotations

import numpy as np

from dhwt.checks import check_keys, need_int, need_number, need_str
from dhwt.errors import DhwtError
from dhwt.languages import automaton
from dhwt.languages.classes import SymbolClass

KEYS = ("family", "name", "description", "k", "pattern", "dose", "tail", "draw", "ratio")
PATTERNS = ("equal", "constant", "ratio")
MAX_K = 256


def build(spec: dict) -> tuple[list[SymbolClass], np.ndarray, np.ndarray, None]:
    """(classes, class strings, probabilities, None) of a demand spec, through the automaton
    family (demand_automaton)."""
    return automaton.build(demand_automaton(spec))


def demand_automaton(spec: dict) -> dict:
    """The automaton spec of a validated demand spec."""
    check_keys(spec, KEYS, "a demand spec")
    k = need_int(spec.get("k", 4), "'k'", 1, MAX_K)
    pattern = need_str(spec.get("pattern", "ratio"), "'pattern'")
    if pattern not in PATTERNS:
        raise DhwtError(f"'pattern' must be one of {', '.join(PATTERNS)}, got {pattern!r}")
    dose = need_number(spec.get("dose", 0.0), "'dose'")
    if not 0.0 <= dose <= 1.0:
        raise DhwtError(f"'dose' is the share of own tails, in [0, 1]; got {dose!r}")
    tail = spec.get("tail", True)
    if not isinstance(tail, bool):
        raise DhwtError(f"'tail' must be true or false, got {tail!r}")
    if not tail and dose:
        raise DhwtError("'dose' needs the tails: with tail = false it must be 0")
    draw = need_int(spec.get("draw", 0), "'draw'", 0, 2**31 - 1)
    c = need_number(spec.get("ratio", 9.0), "'ratio'")
    if not c > 1.0:
        raise DhwtError(f"'ratio' (C of the 1 : C split) must be above 1, got {c!r}")
    w, p, q = draws(k, draw, c)
    split = {"equal": np.full((k, k), 0.5), "constant": np.full((k, k), 1 / (1 + c)),
             "ratio": q}[pattern]
    classes: dict[str, dict] = {f"x{m}": {"variants": [f"x{m}"]} for m in range(k)}
    states: dict[str, list] = {"start": [{"emit": f"x{m}", "to": f"X{m}", "p": float(w[m])}
                                         for m in range(k)]}
    for j in range(k):
        for v in "ab":
            classes[f"s{j}{v}"] = {"variants": [f"s{j}{v}"]}
    tails = [(f"t{j}{v}", dose) for j in range(k) for v in "ab"]
    shared = [(f"c{j}", 1.0 - dose) for j in range(k)]
    for name, share in (shared + tails) if tail else []:
        if share > 0:
            classes[name] = {"variants": [name]}
    for j in range(k):
        for v in "ab":
            ends = [(f"t{j}{v}", dose), (f"c{j}", 1.0 - dose)] if tail else []
            states[f"S{j}{v}"] = [{"emit": name, "to": "end", "p": share}
                                  for name, share in ends if share > 0]
    for m in range(k):
        states[f"X{m}"] = [{"emit": f"s{j}{v}",
                            "to": f"S{j}{v}" if tail else "end",
                            "p": float(p[m, j] * (split[m, j] if v == "a" else 1 - split[m, j]))}
                           for j in range(k) for v in "ab"]
    if not tail:
        states = {name: moves for name, moves in states.items() if not name.startswith("S")}
    return {"family": "automaton", "name": spec.get("name", "demand"),
            "description": spec.get("description", ""), "start": "start",
            "classes": classes, "states": states}


def draws(k: int, draw: int, c: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(w, P, q) of draw `draw`: context weights w_m = (1 + m / 2K) / sum (fixed, distinct),
    P[m, j] = softmax(G[m])_j and the ratio pattern's q[m, j] = sigmoid(log(C) Z[m, j]), with G
    and Z standard normal from a generator seeded by (draw, K)."""
    rng = np.random.default_rng([draw, k])
    g, z = rng.standard_normal((k, k)), rng.standard_normal((k, k))
    p = np.exp(g - g.max(axis=1, keepdims=True))
    w = 1.0 + np.arange(k) / (2.0 * k)
    return w / w.sum(), p / p.sum(axis=1, keepdims=True), 1.0 / (1.0 + np.exp(-np.log(c) * z))
