"""Exact ground truth (dhwt.languages.truth) against a brute-force oracle written here from the
definitions alone (plain Python dicts, nothing shared with the package), and closed forms; and
its grouped and deduplicated distances against swapping every occurrence one by one."""

from __future__ import annotations

import importlib.util
import itertools
import math
import tomllib
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from dhwt.languages import compute_truth, load_language, truth as truth_module
from dhwt.languages.language import language_from_spec
from dhwt.languages.truth import TOLERANCE, GroundTruth

TOL = 1e-9
MASK, EOS = "<mask>", "<eos>"

# ---------------------------------------------------------------------------------------------
# The oracle: straight from the definitions.


def variant_table(spec: dict) -> dict[str, tuple[list[str], list[float], bool]]:
    """class -> (variants, probabilities, maskable), read from the spec dict directly."""
    out = {}
    for name, entry in spec["classes"].items():
        variants = entry["variants"]
        if "skew" in entry:
            t = entry["skew"]
            probs = [(1 - t) / 2, (1 + t) / 2]
        elif "p" in entry:
            probs = [p / sum(entry["p"]) for p in entry["p"]]
        else:
            probs = [1 / len(variants)] * len(variants)
        out[name] = (variants, probs, entry.get("maskable", True))
    if spec["family"] == "parity":
        out["EVEN"] = (["EVEN"], [1.0], False)
        out["ODD"] = (["ODD"], [1.0], False)
    return out


def class_strings(spec: dict) -> dict[tuple[str, ...], float]:
    """class string -> probability."""
    out: dict[tuple[str, ...], float] = defaultdict(float)
    if spec["family"] == "parity":
        n = spec["n_bits"]
        for bits in itertools.product("01", repeat=n):
            out[bits + ("EVEN" if bits.count("1") % 2 == 0 else "ODD",)] += 0.5**n

    else:
        def walk(state: str, prefix: tuple[str, ...], p: float) -> None:
            for t in spec["states"][state]:
                if t["to"] == "end":
                    out[prefix + (t["emit"],)] += p * t["p"]
                else:
                    walk(t["to"], prefix + (t["emit"],), p * t["p"])

        walk(spec["start"], (), 1.0)
    return dict(out)


def oracle(spec: dict, objective: str) -> dict:
    table = variant_table(spec)
    maskable = {v: table[c][2] for c in table for v in table[c][0]}
    strings: dict[tuple[str, ...], float] = defaultdict(float)
    for classes, p in class_strings(spec).items():
        for combo in itertools.product(*[list(zip(*table[c][:2])) for c in classes]):
            strings[tuple(v for v, _ in combo)] += p * math.prod(q for _, q in combo)

    joint: dict[tuple, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    if objective == "mlm":
        for x, p in strings.items():
            spots = [j for j, s in enumerate(x) if maskable[s]]
            for j in spots:
                joint[x[:j] + (MASK,) + x[j + 1:]][x[j]] += p / len(spots)
    else:
        total = sum(p * (len(x) + 1) for x, p in strings.items())
        for x, p in strings.items():
            for t in range(len(x) + 1):
                joint[x[:t]][x[t] if t < len(x) else EOS] += p / total
    context_p = {r: sum(ys.values()) for r, ys in joint.items()}
    cond = {r: {y: q / context_p[r] for y, q in ys.items()} for r, ys in joint.items()}

    symbols = [v for c in table for v in table[c][0]]
    sem, cnd, sem_tv, cnd_abs = {}, {}, {}, {}
    for s1, s2 in itertools.permutations(symbols, 2):
        # semantic: every occurrence of s1 in every context, swapped for s2
        ok, worst = True, 0.0
        for r in cond:
            for k, s in enumerate(r):
                if s != s1:
                    continue
                swapped = r[:k] + (s2,) + r[k + 1:]
                if swapped not in cond:
                    ok, worst = False, 1.0
                    continue
                ys = set(cond[r]) | set(cond[swapped])
                diffs = [abs(cond[r].get(y, 0) - cond[swapped].get(y, 0)) for y in ys]
                worst = max(worst, 0.5 * sum(diffs))
                ok = ok and max(diffs) <= TOL
        sem[s1, s2], sem_tv[s1, s2] = ok, worst
        gaps = [abs(cond[r].get(s1, 0) - cond[r].get(s2, 0)) for r in cond]
        cnd[s1, s2], cnd_abs[s1, s2] = max(gaps) <= TOL, max(gaps)

    def pair(d, a, b):  # symmetric: a relation holds both ways, a distance is the larger one
        return d[a, b] and d[b, a] if isinstance(d[a, b], bool) else max(d[a, b], d[b, a])

    return {
        "symbols": symbols,
        "context_p": context_p,
        "cond": cond,
        "sem": {(a, b): pair(sem, a, b) for a, b in itertools.combinations(symbols, 2)},
        "cnd": {(a, b): pair(cnd, a, b) for a, b in itertools.combinations(symbols, 2)},
        "sem_tv": {(a, b): pair(sem_tv, a, b) for a, b in itertools.combinations(symbols, 2)},
        "cnd_abs": {(a, b): pair(cnd_abs, a, b) for a, b in itertools.combinations(symbols, 2)},
        "accuracy": sum(context_p[r] * max(cond[r].values()) for r in cond),
        "entropy": -sum(q * math.log(q / context_p[r]) for r, ys in joint.items()
                        for q in ys.values() if q > 0),
        "never_predicted": [s for s in symbols if all(s not in ys for ys in cond.values())],
        "never_in_context": [s for s in symbols if all(s not in r for r in cond)],
    }


def decode(truth, i: int) -> tuple[str, ...]:
    """Context i of a GroundTruth in the oracle's notation."""
    tokens = [truth.vocab[t] for t in truth.inputs[i]]
    if truth.objective == "mlm":
        return tuple(MASK if t == "[MASK]" else t for t in tokens if t != "[PAD]")
    return tuple(tokens[1: truth.positions[i] + 1])


# ---------------------------------------------------------------------------------------------
# Small grammars covering: several variants, skew, single variants, nondeterministic paths to the
# same class string, unequal lengths, an unmaskable class, a symbol never in any context.

GRAMMARS = {
    "parity2-three-variants": """
        family = "parity"
        n_bits = 2
        [classes.0]
        variants = ["0a", "0b", "0c"]
        p = [0.2, 0.3, 0.5]
        [classes.1]
        variants = ["1"]
    """,
    "parity3-paper": """
        family = "parity"
        n_bits = 3
        [classes.0]
        variants = ["0a", "0b"]
        p = [0.1, 0.9]
        [classes.1]
        variants = ["1a", "1b"]
    """,
    "parity2-skew": """
        family = "parity"
        n_bits = 2
        [classes.0]
        variants = ["0a", "0b"]
        skew = 0.4
        [classes.1]
        variants = ["1a", "1b"]
        skew = 0.0
    """,
    "merging-paths": """
        family = "automaton"
        start = "s"
        [classes.x]
        variants = ["x1", "x2"]
        p = [0.3, 0.7]
        [classes.y]
        variants = ["y1", "y2"]
        [classes.z]
        variants = ["z"]
        maskable = false
        [classes.w]
        variants = ["w"]
        [classes.q]
        variants = ["q1", "q2", "q3"]
        p = [0.2, 0.3, 0.5]
        [states]
        s = [{emit = "x", to = "a", p = 0.4}, {emit = "x", to = "b", p = 0.3},
             {emit = "y", to = "b", p = 0.3}]
        a = [{emit = "z", to = "end", p = 1.0}]
        b = [{emit = "z", to = "end", p = 0.5}, {emit = "w", to = "c", p = 0.5}]
        c = [{emit = "q", to = "end", p = 1.0}]
    """,
    "lonely-symbol": """
        family = "automaton"
        start = "s"
        [classes.k]
        variants = ["k"]
        [classes.a]
        variants = ["a1", "a2"]
        p = [0.25, 0.75]
        [classes.b]
        variants = ["b"]
        [states]
        s = [{emit = "k", to = "end", p = 0.5}, {emit = "a", to = "t", p = 0.5}]
        t = [{emit = "b", to = "end", p = 0.6}, {emit = "a", to = "end", p = 0.4}]
    """,
}
# Long strings over many symbols: context keys no longer fit in int64 (the bytes path).
GRAMMARS["long-chain"] = "\n".join(
    ['family = "automaton"', 'start = "s0"', "[classes.x]", 'variants = ["x1", "x2"]',
     "p = [0.4, 0.6]"]
    + [f"[classes.c{i}]\nvariants = ['c{i}']" for i in range(1, 20)]
    + ["[states]", 's0 = [{emit = "x", to = "s1", p = 0.7}, {emit = "c1", to = "s1", p = 0.3}]']
    + [f's{i} = [{{emit = "c{i}", to = "{f"s{i + 1}" if i < 19 else "end"}", p = 1.0}}]'
       for i in range(1, 20)])


@pytest.fixture(scope="module", params=[(g, o) for g in GRAMMARS for o in ("mlm", "clm")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def case(request, tmp_path_factory):
    name, objective = request.param
    text = "\n".join(line.strip() for line in GRAMMARS[name].splitlines())
    path = tmp_path_factory.mktemp("spec") / f"{name}.toml"
    path.write_text(text)
    truth = compute_truth(load_language(str(path)), objective)
    return truth, oracle(tomllib.loads(text), objective)


def test_contexts_and_conditionals_match_oracle(case):
    truth, want = case
    assert len(truth.context_probs) == len(want["cond"])
    for i in range(len(truth.context_probs)):
        r = decode(truth, i)
        assert truth.context_probs[i] == pytest.approx(want["context_p"][r], abs=1e-12)
        row = {(EOS if y == "[EOS]" else y): p
               for y, p in zip(truth.vocab, truth.conditionals[i]) if p > 0}
        assert row.keys() == want["cond"][r].keys()
        for y, p in row.items():
            assert p == pytest.approx(want["cond"][r][y], abs=1e-12)
    assert truth.context_probs.sum() == pytest.approx(1.0)
    assert truth.conditionals.sum(axis=1) == pytest.approx(np.ones(len(truth.context_probs)))


def test_relations_and_distances_match_oracle(case):
    truth, want = case
    assert list(truth.symbols) == want["symbols"]
    for p in truth.pairs():
        key = (p.first, p.second)
        assert p.sem == want["sem"][key], key
        assert p.cnd == want["cnd"][key], key
        assert p.sem_tv == pytest.approx(want["sem_tv"][key], abs=1e-12), key
        assert p.cnd_abs == pytest.approx(want["cnd_abs"][key], abs=1e-12), key
        assert p.dh == (want["sem"][key] == want["cnd"][key])


def test_bayes_optimum_and_flags_match_oracle(case):
    truth, want = case
    assert truth.bayes_accuracy == pytest.approx(want["accuracy"], abs=1e-12)
    assert truth.bayes_cross_entropy == pytest.approx(want["entropy"], abs=1e-12)
    assert list(truth.never_predicted) == want["never_predicted"]
    assert list(truth.never_in_context) == want["never_in_context"]


def test_equivalence_classes_partition_the_symbols(case):
    truth, want = case
    for classes, relation in ((truth.sem_classes, want["sem"]), (truth.cnd_classes, want["cnd"])):
        assert sorted(s for c in classes for s in c) == sorted(want["symbols"])
        for a, b in itertools.combinations(want["symbols"], 2):
            same = any(a in c and b in c for c in classes)
            assert same == relation[a, b]


def test_lonely_symbol_is_flagged_in_mlm(case):
    truth, _ = case
    if "k" in truth.symbols and truth.objective == "mlm":
        assert truth.never_in_context == ("k",)


# ---------------------------------------------------------------------------------------------
# Closed forms.

def h(p: float) -> float:
    return -p * math.log(p) - (1 - p) * math.log(1 - p)


@pytest.mark.parametrize("name, accuracy, entropy", [
    ("parity", 0.5 * 0.9 + 0.5 * 0.5, 0.5 * h(0.1) + 0.5 * math.log(2)),
    ("parity-dh", 0.5 * 1.0 + 0.5 * 0.5, 0.5 * 0.0 + 0.5 * math.log(2)),
    ("parity-nocnd", 0.5 * 1.0 + 0.5 * 0.9, 0.5 * 0.0 + 0.5 * h(0.1)),
])
def test_paper_parity_specs_bayes_optimum(name, accuracy, entropy):
    # the masked bit is determined by the others and the label, so only its variant is uncertain
    truth = compute_truth(load_language(name), "mlm")
    assert truth.bayes_accuracy == pytest.approx(accuracy, abs=1e-12)
    assert truth.bayes_cross_entropy == pytest.approx(entropy, abs=1e-12)
    assert truth.never_predicted == ("EVEN", "ODD")


@pytest.mark.parametrize("skew", [0.0, 0.3, 0.8, 0.95])
def test_skew_dose_response(skew):
    truth = compute_truth(load_language("parity", {"n_bits": 3, "classes.1.skew": skew}), "mlm")
    assert truth.bayes_accuracy == pytest.approx(0.5 * 0.9 + 0.5 * (1 + skew) / 2, abs=1e-12)
    one = {(p.first, p.second): p for p in truth.pairs()}[("1a", "1b")]
    assert one.sem and one.cnd == (skew == 0.0)
    # max over contexts where bit 1 is masked: |(1+t)/2 - (1-t)/2| = t; log ratio log((1+t)/(1-t))
    assert one.cnd_abs == pytest.approx(skew, abs=1e-12)
    assert one.cnd_log == pytest.approx(math.log((1 + skew) / (1 - skew)), abs=1e-9)


def test_paper_parity_relations():
    truth = compute_truth(load_language("parity"), "mlm")
    kinds = {(p.first, p.second): p.kind for p in truth.pairs()}
    assert kinds.pop(("0a", "0b")) == "sem only"  # DH violated
    assert kinds.pop(("1a", "1b")) == "sem and cnd"  # DH holds
    assert kinds.pop(("EVEN", "ODD")) == "cnd only"  # vacuously: never predicted
    assert set(kinds.values()) == {"neither"}


def test_four_cases_relation_table_for_causal_lm():
    truth = compute_truth(load_language("four-cases"), "clm")
    kinds = {(p.first, p.second): p for p in truth.pairs()}
    assert kinds.pop(("a1", "a2")).kind == "sem and cnd"
    assert kinds.pop(("b1", "b2")).kind == "sem only"
    cd = kinds.pop(("c", "d"))
    assert cd.kind == "cnd only" and not cd.dh
    assert kinds[("e", "f")].kind == "neither"
    assert {p.kind for p in kinds.values()} == {"neither"}
    assert truth.never_predicted == () and truth.never_in_context == ()


def test_log_ratio_is_the_exact_log_odds():
    truth = compute_truth(load_language("parity", {"n_bits": 3}), "mlm")
    ratio = truth.log_ratio("0b", "0a")
    bit0 = np.isfinite(ratio)  # contexts where bit 0 is the masked value
    assert ratio[bit0] == pytest.approx(math.log(9.0))
    assert np.isnan(ratio[~bit0]).all()  # both zero


# ---------------------------------------------------------------------------------------------
# Relation speed: the grouped semantic distances and the deduplicated conditional distances of
# compute_truth give, bit for bit, what swapping every occurrence for every symbol and comparing
# every context gives (the swap-by-swap versions kept here as the oracle, on the contexts as the
# model reads them), on built-in grammars, GRAMMARS above (the bytes-key path included) and the
# tying-capacity kinds.

CAPACITY = Path(__file__).parents[2] / "experiments" / "tying_capacity" / "languages.py"
_spec = importlib.util.spec_from_file_location("capacity_languages", CAPACITY)
capacity = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(capacity)


def _rows(rows: np.ndarray) -> np.ndarray:
    """Each row as one comparable value."""
    rows = np.ascontiguousarray(rows)
    return rows.view(np.dtype((np.void, rows.itemsize * rows.shape[1]))).ravel()


def swap_by_swap(truth: GroundTruth) -> tuple[np.ndarray, np.ndarray]:
    """The semantic distances (3, n_sym, n_sym: max |dp|, total variation, max |d log p|) as
    first written, and which symbols occur in a context: every occurrence of every symbol in
    every context swapped for every symbol, the new context looked up, the two conditional
    rows compared (1, 1, inf where the new context never occurs)."""
    n_sym = len(truth.symbols)
    contexts = np.concatenate([truth.inputs, truth.positions[:, None]], axis=1)
    assert len(np.unique(_rows(contexts))) == len(contexts)
    cond = truth.conditionals
    with np.errstate(divide="ignore"):
        log_cond = np.log(cond)
    read = (truth.inputs < n_sym) if truth.padding is None else (truth.inputs < n_sym) & ~truth.padding
    ctx, pos = np.nonzero(read)
    sym = truth.inputs[ctx, pos]
    out = np.zeros((3, n_sym, n_sym))
    for s2 in range(n_sym):
        swapped = contexts[ctx].copy()
        swapped[np.arange(len(ctx)), pos] = s2
        _, label = np.unique(_rows(np.concatenate([contexts, swapped])), return_inverse=True)
        label = label.ravel()
        index = np.full(label.max() + 1, -1)
        index[label[:len(contexts)]] = np.arange(len(contexts))
        other = index[label[len(contexts):]]
        found = other >= 0
        diff = np.abs(cond[ctx] - cond[other])
        with np.errstate(invalid="ignore"):
            log_diff = np.abs(log_cond[ctx] - log_cond[other])
        log_diff[np.isnan(log_diff)] = 0.0  # both zero: the same
        dist = np.stack([diff.max(axis=1), 0.5 * diff.sum(axis=1), log_diff.max(axis=1)])
        dist[:, ~found] = np.array([1.0, 1.0, np.inf])[:, None]
        for k in range(3):
            np.maximum.at(out[k, :, s2], sym, dist[k])
    return np.maximum(out, out.transpose(0, 2, 1)), np.bincount(sym, minlength=n_sym) > 0


def context_by_context(probs, log_probs):
    """The conditional distances as first written: every context compared."""
    n_sym = probs.shape[1]
    abs_d, log_d = np.zeros((n_sym, n_sym)), np.zeros((n_sym, n_sym))
    for s in range(n_sym):
        abs_d[s] = np.abs(probs[:, [s]] - probs).max(axis=0, initial=0.0)
        with np.errstate(invalid="ignore"):
            d = np.abs(log_probs[:, [s]] - log_probs)
        d[np.isnan(d)] = 0.0
        log_d[s] = d.max(axis=0, initial=0.0)
    return abs_d, log_d


def _grammar(name: str, tmp_path: Path):
    text = "\n".join(line.strip() for line in GRAMMARS[name].splitlines())
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return load_language(str(path))


LANGUAGES = (
    [pytest.param("builtin:parity", objective, marks=pytest.mark.slow)  # 5-7 s each
     for objective in ("mlm", "clm")]
    + [(f"builtin:{name}", objective) for name in ("parity-dh", "parity-nocnd", "four-cases")
       for objective in ("mlm", "clm")]
    + [("builtin:parity:4", objective) for objective in ("mlm", "clm")]
    + [(f"grammar:{name}", objective) for name in GRAMMARS for objective in ("mlm", "clm")]
    + [(f"capacity:{kind}:{k}", objective) for k in (1, 4)
       for kind, objective in (("sem", "mlm"), ("control", "mlm"), ("sem", "clm"),
                               ("control", "clm"), ("cnd", "clm"), ("ratio", "clm"))])


def _language(name: str, objective: str, tmp_path: Path):
    source, rest = name.split(":", 1)
    if source == "builtin":
        grammar, *bits = rest.split(":")
        return load_language(grammar, {"n_bits": int(bits[0])} if bits else None)
    if source == "grammar":
        return _grammar(rest, tmp_path)
    kind, k = rest.split(":")
    return language_from_spec(capacity.spec(kind, int(k), tail=objective == "clm"), name)


def check(truth: GroundTruth) -> None:
    """compute_truth's relations against the oracles."""
    n_sym = len(truth.symbols)
    (sem_abs, sem_tv, sem_log), seen = swap_by_swap(truth)
    np.testing.assert_array_equal(truth.sem, sem_abs <= TOLERANCE)
    np.testing.assert_array_equal(truth.sem_tv, sem_tv)
    np.testing.assert_array_equal(truth.sem_log, sem_log)
    assert truth.never_in_context == tuple(np.array(truth.symbols)[~seen])
    cond = truth.conditionals[:, :n_sym]
    with np.errstate(divide="ignore"):
        cnd_abs, cnd_log = context_by_context(cond, np.log(cond))
    np.testing.assert_array_equal(truth.cnd_abs, cnd_abs)
    np.testing.assert_array_equal(truth.cnd_log, cnd_log)


@pytest.mark.parametrize("name, objective", LANGUAGES, ids=lambda x: str(x))
def test_relations_equal_the_swap_by_swap_oracle(name, objective, tmp_path):
    check(compute_truth(_language(name, objective, tmp_path), objective))


@pytest.mark.parametrize("kind, objective", [("sem", "clm"), ("cnd", "clm"), ("sem", "mlm")])
def test_a_few_pairs_at_a_time_give_the_same_relations(kind, objective, monkeypatch):
    monkeypatch.setattr(truth_module, "CHUNK", 7)
    check(compute_truth(language_from_spec(capacity.spec(kind, 4, tail=objective == "clm"), kind),
                        objective))
