"""T5 against dhwt's exact ground truth (dhwt.languages.truth): the exhaustive checks.

For each grammar, the masked-LM relations truth.py computes from their definitions are compared
with what proofs/T5 predicts from the grammar alone:
- (a) no non-vacuous pair is cnd but not sem;
- (b ⇐) a pair whose strings scale by one constant per length and position under a swap
  (P(x) = kappa_{n,i} P(tau_i x)) is sem, with that constant as its ratio;
- (b ⇒) under positivity on a product (P) and (M), every sem pair has such a constant;
- (d) two variants of one class are sem, with the ratio of their variant probabilities.
Grammars: every built-in, a seeded family of random layered automata that satisfy (P) and (M),
with a planted pair (one constant ratio, or one per state), and a seeded family of random
acyclic automata (variable lengths, shared states, no positivity). The causal relations of the
same grammars are counted beside, to show what a causal LM does not share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dhwt.languages import compute_truth, load_language
from dhwt.languages.enumeration import PAD, symbol_strings
from dhwt.languages.language import Language, language_from_spec
from dhwt.languages.spec import builtin_names
from dhwt.languages.truth import GroundTruth
from dhwt.theory.check import Outcome, verdict

#: Log-ratios closer than this are one constant (the truth is exact to ~1e-12).
LOG_TOLERANCE = 1e-7


def ratio_spread(truth: GroundTruth, first: str, second: str) -> float:
    """The largest spread of log p(first|r) / p(second|r) over the contexts where either symbol
    is possible (inf where only one is): masked LM, within one (length, masked position), over
    strings of length >= 2 (a length-1 context holds no symbol: T5 says nothing there); causal
    LM, over every prefix."""
    p = truth.conditionals[:, truth.vocab.index(first)]
    q = truth.conditionals[:, truth.vocab.index(second)]
    either = (p > 0) | (q > 0)
    if truth.objective == "mlm":
        width = truth.inputs.shape[1]
        lengths = width - (0 if truth.padding is None else truth.padding.sum(axis=1))
        either &= lengths >= 2
        keys = lengths * (width + 1) + truth.positions
    else:
        keys = np.zeros(len(p), dtype=np.int64)
    if np.any(either & ((p == 0) | (q == 0))):
        return np.inf
    keys, ratios = keys[either], np.log(p[either] / q[either])
    return max((float(np.ptp(ratios[keys == k])) for k in np.unique(keys)), default=0.0)


def swap_scaled(rows: np.ndarray, probs: np.ndarray, a: int, b: int) -> bool:
    """(b ⇐)'s hypothesis for symbols a, b over the symbol strings `rows` (probabilities
    `probs`, dhwt.languages.enumeration.symbol_strings): for each length n and position i,
    P(x) = kappa_{n,i} P(tau_i x) for every string x with a at i (both sides zero or both
    positive)."""
    table = {row.tobytes(): prob for row, prob in zip(rows, probs) if prob > 0}
    ratios: dict[tuple[int, int], list[float]] = {}
    for row, prob in zip(rows, probs):
        if prob <= 0:
            continue
        for i in np.flatnonzero((row == a) | (row == b)):
            swapped = row.copy()
            swapped[i] = b if row[i] == a else a
            other = table.get(swapped.tobytes(), 0.0)
            if other == 0:
                return False
            ratio = prob / other if row[i] == a else other / prob
            ratios.setdefault((int((row != PAD).sum()), int(i)), []).append(np.log(ratio))
    return all(np.ptp(v) <= LOG_TOLERANCE for v in ratios.values())


def positive_product(language: Language, rows: np.ndarray, probs: np.ndarray) -> bool:
    """(P) and (M) for `language` and its symbol strings `rows` (probabilities `probs`): for
    every length, the strings of positive probability are a product of per-position symbol
    sets, and every position with two or more symbols is maskable."""
    rows = rows[probs > 0]
    lengths = (rows != PAD).sum(axis=1)
    maskable = language.maskable[language.symbol_class]
    for n in np.unique(lengths):
        group = rows[lengths == n][:, :n]
        sets = [np.unique(group[:, k]) for k in range(n)]
        if len({row.tobytes() for row in group}) != np.prod([len(s) for s in sets]):
            return False
        if any(len(s) > 1 and not maskable[s].all() for s in sets):
            return False
    return True


@dataclass(frozen=True)
class Findings:
    """What one grammar's exact masked-LM truth says against T5 (counts of pairs)."""

    name: str
    positive: bool
    cnd_only: int  # non-vacuous cnd-but-not-sem pairs: (a) says none
    scaled_not_sem: int  # pairs meeting (b ⇐)'s hypothesis that are not sem: none
    sem_varying: int  # sem pairs whose ratio varies within a (length, position)
    sem: int
    variants_wrong: int  # variant pairs not sem or not at the variants' ratio: (d) says none
    clm_cnd_only: int
    clm_sem_varying: int
    pairs: dict[tuple[str, str], tuple[bool, float]]  # each masked-LM pair: sem, ratio_spread

    @property
    def holds(self) -> bool:
        return (self.cnd_only == self.scaled_not_sem == self.variants_wrong == 0
                and (not self.positive or self.sem_varying == 0))


def examine(language: Language) -> Findings:
    """Compare the exact relations of `language` with T5's predictions (see the module doc)."""
    mlm, clm = compute_truth(language, "mlm"), compute_truth(language, "clm")
    rows, probs = symbol_strings(language)
    cnd_only = scaled_not_sem = sem_varying = sem = variants_wrong = 0
    pairs = {}
    class_of = dict(zip(language.symbols, language.symbol_class))
    variant_prob = {s: p for c in language.classes for s, p in zip(c.variants, c.probs)}
    for pair in mlm.pairs():
        a, b = pair.first, pair.second
        vacuous = a in mlm.never_predicted and b in mlm.never_predicted
        cnd_only += pair.cnd and not pair.sem and not vacuous
        ids = language.symbols.index(a), language.symbols.index(b)
        scaled_not_sem += swap_scaled(rows, probs, *ids) and not pair.sem
        spread = ratio_spread(mlm, a, b)
        pairs[a, b] = pair.sem, spread
        sem += pair.sem
        sem_varying += pair.sem and spread > LOG_TOLERANCE
        if class_of[a] == class_of[b] and language.maskable[class_of[a]]:
            i, j = mlm.vocab.index(a), mlm.vocab.index(b)
            both = (mlm.conditionals[:, i] > 0) & (mlm.conditionals[:, j] > 0)
            wanted = np.log(variant_prob[a] / variant_prob[b])
            seen = np.log(mlm.conditionals[both, i] / mlm.conditionals[both, j])
            variants_wrong += not pair.sem or not np.allclose(seen, wanted, atol=LOG_TOLERANCE)
    clm_cnd_only = sum(p.cnd and not p.sem for p in clm.pairs()
                       if not (p.first in clm.never_predicted and p.second in clm.never_predicted))
    clm_sem_varying = sum(p.sem and ratio_spread(clm, p.first, p.second) > LOG_TOLERANCE
                          for p in clm.pairs())
    return Findings(language.name, positive_product(language, rows, probs), cnd_only, scaled_not_sem,
                    sem_varying, sem, variants_wrong, clm_cnd_only, clm_sem_varying, pairs)


# ---- random grammars ------------------------------------------------------------------------


def _probabilities(gen: np.random.Generator, n: int) -> list[float]:
    weights = gen.uniform(0.1, 1.0, size=n)
    return [float(v) for v in weights / weights.sum()]


def random_positive_spec(gen: np.random.Generator, constant: bool) -> dict:
    """A layered automaton satisfying (P) and (M): layer k's states each emit every symbol of
    layer k's alphabet (positive probabilities) and move to a next-layer state chosen by the
    symbol. One layer holds the planted s1, s2, which lead to one state alike, at one ratio in
    every state (`constant`) or at one drawn per state (then the layer has two states)."""
    length = int(gen.integers(2, 5))
    # a varying ratio sits where two states can emit the pair, after a layer of two symbols
    pair_layer = int(gen.integers(0 if constant else 1, length))
    kappa = float(gen.uniform(0.2, 5.0))
    alphabets = [[f"x{k}{m}" for m in range(2 if k == pair_layer - 1 else int(gen.integers(1, 3)))]
                 + (["s1", "s2"] if k == pair_layer else []) for k in range(length)]
    # a symbol's slot picks the next state; s1 and s2 share one; every next state gets a slot
    slots = [list(range(len(a) - 1)) + [len(a) - 2] if k == pair_layer else list(range(len(a)))
             for k, a in enumerate(alphabets)]
    sizes = [1] + [min(int(gen.integers(1, 4)), len(set(slots[k]))) for k in range(length - 1)]
    if not constant:
        sizes[pair_layer] = 2
    classes, states = {}, {}
    for k, symbols in enumerate(alphabets):
        classes.update({s: {"variants": [s]} for s in symbols})
        for h in range(sizes[k]):
            probs = _probabilities(gen, len(symbols))
            if k == pair_layer:
                ratio = kappa if constant else float(gen.uniform(0.2, 5.0))
                mass = probs[-1] + probs[-2]
                probs[-2], probs[-1] = mass * ratio / (1 + ratio), mass / (1 + ratio)
            states[f"L{k}h{h}"] = [
                {"emit": s, "to": "end" if k == length - 1 else f"L{k + 1}h{slot % sizes[k + 1]}",
                 "p": p} for s, p, slot in zip(symbols, probs, slots[k])]
    return {"family": "automaton", "start": "L0h0", "classes": classes, "states": states}


def random_spec(gen: np.random.Generator) -> dict:
    """An acyclic automaton with shared states, variable lengths and coarse probabilities (ties
    happen), over classes of one or two variants: no positivity in general."""
    n_states = int(gen.integers(3, 6))
    pool = {"c0": [1.0], "c1": [1.0], "c2": [0.5, 0.5], "c3": [0.25, 0.75], "c4": [0.1, 0.9]}
    names = list(pool)
    used, states = set(), {}
    for k in range(n_states):
        later = [f"q{j}" for j in range(k + 1, n_states)] + ["end"]
        count = int(gen.integers(1, 4))
        quarters = np.bincount(gen.integers(0, count, size=4), minlength=count)
        moves = []
        for m in range(count):
            if quarters[m] == 0:
                continue
            emit = names[int(gen.integers(0, len(names)))]
            to = later[0] if m == 0 else later[int(gen.integers(0, len(later)))]
            used.add(emit)
            moves.append({"emit": emit, "to": to, "p": float(quarters[m]) / 4})
        if not any(move["to"] == later[0] for move in moves):
            moves[0]["to"] = later[0]  # keep every state reachable
        states[f"q{k}"] = moves
    classes = {c: {"variants": [f"{c}{v}" for v in "ab"[:len(pool[c])]], "p": pool[c]}
               for c in sorted(used)}
    return {"family": "automaton", "start": "q0", "classes": classes, "states": states}


def _without_positivity(gen: np.random.Generator, name: str, tries: int = 100) -> Language:
    """A random_spec language that breaks (P) or (M) (most do not: redraw)."""
    for _ in range(tries):
        language = language_from_spec(random_spec(gen), name)
        if not positive_product(language, *symbol_strings(language)):
            return language
    raise RuntimeError(f"no grammar without positivity in {tries} draws")


def _summary(findings: list[Findings]) -> str:
    total = {f: sum(getattr(x, f) for x in findings)
             for f in ("cnd_only", "scaled_not_sem", "variants_wrong", "sem", "sem_varying",
                       "clm_cnd_only", "clm_sem_varying")}
    positive = sum(x.positive for x in findings)
    varying_positive = sum(x.sem_varying for x in findings if x.positive)
    return (f"{len(findings)} grammars ({positive} under (P)); mlm: cnd-only {total['cnd_only']}, "
            f"scaled not sem {total['scaled_not_sem']}, variants off {total['variants_wrong']}, "
            f"sem {total['sem']} (ratio varies: {total['sem_varying']}, under (P) "
            f"{varying_positive}); clm: cnd-only {total['clm_cnd_only']}, sem with varying ratio "
            f"{total['clm_sem_varying']}")


def builtin_grammars(seed: int) -> Outcome:
    """Every built-in grammar (at its shipped settings): T5's predictions hold exactly."""
    del seed  # nothing random
    findings = [examine(load_language(name)) for name in builtin_names()]
    return verdict(all(f.holds for f in findings), _summary(findings))


def random_grammars(seed: int, draws: int = 24) -> Outcome:
    """Seeded random grammars, half layered under (P) with a planted pair (constant ratio or
    not), half general acyclic automata without positivity: T5's predictions hold exactly in
    every one, and the (P) family has both sem and non-sem planted pairs (so (b ⇒) is tested
    both ways)."""
    gen = np.random.default_rng([seed, 5])
    findings, planted = [], []
    for k in range(draws):
        if k % 2:
            findings.append(examine(_without_positivity(gen, f"random{k}")))
            continue
        language = language_from_spec(random_positive_spec(gen, k % 4 == 0), f"layered{k}")
        findings.append(examine(language))
        planted.append((findings[-1].positive, *findings[-1].pairs["s1", "s2"]))
    both_ways = {sem for _, sem, _ in planted} == {True, False}
    agree = all(positive and sem == (spread <= LOG_TOLERANCE) for positive, sem, spread in planted)
    ok = all(f.holds for f in findings) and both_ways and agree
    sem_count = sum(sem for _, sem, _ in planted)
    return verdict(ok, f"{_summary(findings)}; planted s1~s2: sem in {sem_count} of "
                       f"{len(planted)}, sem <=> constant {'in all' if agree else 'NOT in all'}")
