"""The languages of the capacity study: K pairs s{k}a, s{k}b, each predicted in K contexts.

Strings are `x_m S_k T_k` (three symbols): a context token x_m (m < K, drawn with probability
w_m, all distinct), then pair k with probability P[m, k] = softmax(G[m])_k (G seeded N(0, 1),
so every pair is predicted, with positive probability, after every x_m and the K x K pattern of
log-probabilities has full rank), then a token t{k}a or t{k}b. Kinds (the vocabulary is the same
5K symbols in each):

  sem      S_k = {s{k}a, s{k}b} at 1 : C (constant ratio), T_k = {t{k}a, t{k}b} at 1 : 1:
           s{k}a ~sem s{k}b, not ~cnd (masked and causal alike);
  control  the same at 1 : 1: every pair holds DH;
  cnd      s{k}a and s{k}b single-symbol classes, each with probability P[m, k] / 2 after x_m,
           s{k}a followed by t{k}a and s{k}b by t{k}b: s{k}a ~cnd s{k}b, not ~sem (causal
           only; under masking they are neither, so a masked cnd language holds DH);
  ratio    s{k}a and s{k}b single-symbol classes at a context-dependent ratio: after x_m they
           have probabilities P[m, k] q[m, k] and P[m, k] (1 - q[m, k]), logit q[m, k] =
           log(C) Z[m, k] (Z seeded N(0, 1)), both followed by T_k at 1 : 1: s{k}a ~sem
           s{k}b, not ~cnd, and no constant direction or bias can give the K ratios of one
           pair (causal only: masked, x_m would tell them apart as inputs).

A masked LM reads the languages without the T tokens (`tail=False`: strings `x_m S_k`, 3K
symbols): with them, `x_m [MASK] t_k` would name S_k by t_k alone and the x tokens would be
semantically equivalent to each other; without them `x_m [MASK]` must carry the pattern P[m].

Every other pair holds DH (the tests check the truth for every pair): the w_m are distinct, so
no two x tokens are conditionally equivalent at the start, and G has no ties.
"""

from __future__ import annotations

import numpy as np

KINDS = ("sem", "control", "cnd", "ratio")
#: The kinds whose pairs are told apart by their tail, which a masked language drops.
CAUSAL_ONLY = ("cnd", "ratio")
RATIO = 9.0  # C: the sem pairs' 1 : C, as EXor's 0a : 0b


def pattern(k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(w, P): the context weights w_m (distinct, summing to 1) and P[m, k] = p(S_k | x_m)."""
    rng = np.random.default_rng(seed + 1000 * k)
    g = rng.standard_normal((k, k))
    p = np.exp(g - g.max(axis=1, keepdims=True))
    w = 1.0 + np.arange(k) / (2.0 * k)
    return w / w.sum(), p / p.sum(axis=1, keepdims=True)


def ratios(k: int, seed: int = 0) -> np.ndarray:
    """q[m, k]: the ratio kind's p(s{k}a | x_m, pair k), logit log(C) Z[m, k], Z ~ N(0, 1)."""
    z = np.random.default_rng(seed + 1000 * k + 7).standard_normal((k, k))
    return 1.0 / (1.0 + np.exp(-np.log(RATIO) * z))


def spec(kind: str, k: int, seed: int = 0, tail: bool = True) -> dict:
    """The automaton spec (dhwt.languages) of `kind` with `k` pairs; `tail` False drops T."""
    if kind not in KINDS or (kind in CAUSAL_ONLY and not tail):
        raise ValueError(f"kind must be one of {KINDS} ({', '.join(CAUSAL_ONLY)} with their "
                         f"tail), got {kind!r}")
    w, p = pattern(k, seed)
    classes: dict[str, dict] = {f"x{m}": {"variants": [f"x{m}"]} for m in range(k)}
    states: dict[str, list] = {"start": [{"emit": f"x{m}", "to": f"X{m}", "p": float(w[m])}
                                         for m in range(k)]}
    if kind == "cnd":
        for j in range(k):
            for v in "ab":
                classes[f"s{j}{v}"] = {"variants": [f"s{j}{v}"]}
                classes[f"t{j}{v}"] = {"variants": [f"t{j}{v}"]}
                states[f"T{j}{v}"] = [{"emit": f"t{j}{v}", "to": "end", "p": 1.0}]
        for m in range(k):
            states[f"X{m}"] = [{"emit": f"s{j}{v}", "to": f"T{j}{v}", "p": float(p[m, j]) / 2}
                               for j in range(k) for v in "ab"]
    elif kind == "ratio":
        q = ratios(k, seed)
        for j in range(k):
            for v in "ab":
                classes[f"s{j}{v}"] = {"variants": [f"s{j}{v}"]}
            classes[f"T{j}"] = {"variants": [f"t{j}a", f"t{j}b"]}
            states[f"T{j}"] = [{"emit": f"T{j}", "to": "end", "p": 1.0}]
        for m in range(k):
            states[f"X{m}"] = [{"emit": f"s{j}{v}", "to": f"T{j}",
                                "p": float(p[m, j] * (q[m, j] if v == "a" else 1 - q[m, j]))}
                               for j in range(k) for v in "ab"]
    else:
        c = RATIO if kind == "sem" else 1.0
        for j in range(k):
            classes[f"S{j}"] = {"variants": [f"s{j}a", f"s{j}b"], "p": [1 / (1 + c), c / (1 + c)]}
            if tail:
                classes[f"T{j}"] = {"variants": [f"t{j}a", f"t{j}b"]}
                states[f"T{j}"] = [{"emit": f"T{j}", "to": "end", "p": 1.0}]
        for m in range(k):
            states[f"X{m}"] = [{"emit": f"S{j}", "to": f"T{j}" if tail else "end",
                                "p": float(p[m, j])}
                               for j in range(k)]
    return {"family": "automaton", "name": f"capacity-{kind}-k{k}" + ("" if tail else "-short"),
            "description": f"{k} pairs s{{k}}a, s{{k}}b of kind {kind}", "start": "start",
            "classes": classes, "states": states}


def pairs(k: int) -> list[tuple[str, str]]:
    """The study's pairs, in order."""
    return [(f"s{j}a", f"s{j}b") for j in range(k)]
