"""Property-based fuzzing (hypothesis) of what users write by hand: grammar specs (TOML files and
`--set` overrides) and tie schedules. The properties: the only exception is DhwtError, and the
code accepts exactly what an independent validity oracle written here from the documented rules
(synthetic/README.md, dhwt.training.tying) accepts; what it accepts it reads right (the class-string
distribution against the oracle's own path enumeration, the schedule's events against the oracle's
own reading).

Generators build mostly well-formed inputs and then break them in the ways people do (a typo'd
key, a probability off by a bit, a cycle, a switch out of order), so both sides of every rule are
exercised. Example counts are modest for CI time."""

from __future__ import annotations

import copy
import math
import tomllib

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dhwt.config.schedule import TieSchedule
from dhwt.errors import DhwtError
from dhwt.languages import load_language
from dhwt.languages.enumeration import PAD
from dhwt.languages.spec import parse_assignments, read_spec
from dhwt.tomlwrite import dumps

pytestmark = pytest.mark.slow  # fuzzing (hypothesis)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SUM_TOLERANCE = 1e-6  # synthetic/README.md: probabilities sum to 1 within 1e-6
MAX_WORK = 50_000_000  # synthetic/README.md, Limits: sum over symbol strings of length^2
LABELS = ("EVEN", "ODD")


# -- the oracle: a spec's validity and meaning, from the documented rules ------------------------
class Invalid(Exception):
    """The oracle's verdict: the spec breaks a rule."""


def _name(value: object) -> str:
    if not isinstance(value, str) or not value or any(ch.isspace() for ch in value):
        raise Invalid(f"bad name {value!r}")
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Invalid(f"not a finite number: {value!r}")
    return float(value)


def _probabilities(values: object, n: int) -> list[float]:
    """A list of n probabilities in (0, 1] summing to 1 within the tolerance, renormalised."""
    if not isinstance(values, list) or len(values) != n:
        raise Invalid("wrong probability list")
    probs = [_number(v) for v in values]
    if not all(0 < p <= 1 for p in probs) or abs(math.fsum(probs) - 1) > SUM_TOLERANCE:
        raise Invalid(f"bad probabilities {probs}")
    return [p / math.fsum(probs) for p in probs]


def _only(table: dict, keys: tuple[str, ...]) -> None:
    if not set(table) <= set(keys):
        raise Invalid(f"unknown keys {set(table) - set(keys)}")


def _classes(table: object, maskable_allowed: bool) -> dict[str, tuple[list[str], list[float],
                                                                        bool]]:
    """{class: (variants, probabilities, maskable)}."""
    if not isinstance(table, dict) or not table:
        raise Invalid("classes")
    out = {}
    for name, entry in table.items():
        _name(name)
        if not isinstance(entry, dict):
            raise Invalid("class entry")
        _only(entry, ("variants", "p", "skew") + (("maskable",) if maskable_allowed else ()))
        variants = entry.get("variants")
        if not isinstance(variants, list) or not variants:
            raise Invalid("variants")
        variants = [_name(v) for v in variants]
        n = len(variants)
        if "p" in entry and "skew" in entry:
            raise Invalid("p and skew")
        if "skew" in entry:
            t = _number(entry["skew"])
            if n != 2 or not 0 <= t < 1:
                raise Invalid("skew")
            probs = [(1 - t) / 2, (1 + t) / 2]
        elif "p" in entry:
            probs = _probabilities(entry["p"], n)
        else:
            probs = [1 / n] * n
        maskable = entry.get("maskable", True)
        if not isinstance(maskable, bool):
            raise Invalid("maskable")
        out[name] = (variants, probs, maskable)
    return out


def _symbols_ok(symbols: list[str]) -> None:
    if len(set(symbols)) != len(symbols):
        raise Invalid("duplicate symbol")
    if any(s[:1] == "[" and s[-1:] == "]" for s in symbols):
        raise Invalid("bracketed symbol")


def oracle(spec: dict, default_name: str) -> dict[tuple[str, ...], float]:
    """The class-string distribution {class names: probability} a valid spec defines; Invalid
    otherwise."""
    family = spec.get("family")
    _name(spec.get("name", default_name))
    if not isinstance(spec.get("description", ""), str):
        raise Invalid("description")
    if family == "parity":
        return _parity(spec)
    if family == "automaton":
        return _automaton(spec)
    raise Invalid("family")


def _parity(spec: dict) -> dict[tuple[str, ...], float]:
    _only(spec, ("family", "name", "description", "n_bits", "classes"))
    n_bits = spec.get("n_bits")
    if isinstance(n_bits, bool) or not isinstance(n_bits, int) or not 1 <= n_bits <= 30:
        raise Invalid("n_bits")
    classes = _classes(spec.get("classes"), maskable_allowed=False)
    if sorted(classes) != ["0", "1"]:
        raise Invalid("bit classes")
    n_variants = sum(len(v) for v, _, _ in classes.values())
    if n_variants**n_bits * (n_bits + 1) ** 2 > MAX_WORK:
        raise Invalid("too large")
    _symbols_ok([s for v, _, _ in classes.values() for s in v] + list(LABELS))
    strings = {}
    for k in range(2**n_bits):
        bits = [str((k >> (n_bits - 1 - j)) & 1) for j in range(n_bits)]
        strings[(*bits, LABELS[bits.count("1") % 2])] = 1 / 2**n_bits
    return strings


def _automaton(spec: dict) -> dict[tuple[str, ...], float]:
    _only(spec, ("family", "name", "description", "start", "classes", "states"))
    classes = _classes(spec.get("classes"), maskable_allowed=True)
    states = spec.get("states")
    if not isinstance(states, dict) or not states:
        raise Invalid("states")
    arcs: dict[str, list[tuple[str, str, float]]] = {}
    for state, transitions in states.items():
        if _name(state) == "end" or not isinstance(transitions, list) or not transitions:
            raise Invalid("state")
        read = []
        for t in transitions:
            if not isinstance(t, dict):
                raise Invalid("transition")
            _only(t, ("emit", "to", "p"))
            if not {"emit", "to", "p"} <= set(t):
                raise Invalid("transition keys")
            emit, to = _name(t["emit"]), _name(t["to"])
            if emit not in classes or (to != "end" and to not in states):
                raise Invalid("undeclared")
            p = _number(t["p"])
            if not 0 < p <= 1:
                raise Invalid("p")
            read.append((emit, to, p))
        probs = _probabilities([p for _, _, p in read], len(read))
        arcs[state] = [(e, to, p) for (e, to, _), p in zip(read, probs)]
    start = _name(spec.get("start"))
    if start not in arcs:
        raise Invalid("start")
    # depth-first over paths; a path revisiting a state is a cycle (strings would never end)
    paths: list[tuple[tuple[str, ...], float]] = []
    seen: set[str] = set()

    def walk(state: str, prefix: tuple[str, ...], prob: float, on_path: tuple[str, ...]) -> None:
        seen.add(state)
        for emit, to, p in arcs[state]:
            if to == "end":
                paths.append(((*prefix, emit), prob * p))
            elif to in on_path:
                raise Invalid("cycle")
            else:
                walk(to, (*prefix, emit), prob * p, (*on_path, to))

    walk(start, (), 1.0, (start,))
    if seen != set(arcs):
        raise Invalid("unreachable")
    if {e for ts in arcs.values() for e, _, _ in ts} != set(classes):
        raise Invalid("silent class")
    strings: dict[tuple[str, ...], float] = {}
    for path, p in paths:
        strings[path] = strings.get(path, 0.0) + p
    work = sum(math.prod(len(classes[c][0]) for c in s) * len(s) ** 2 for s in strings)
    if work > MAX_WORK:  # over distinct strings: paths emitting the same classes count once
        raise Invalid("too large")
    _symbols_ok([s for v, _, _ in classes.values() for s in v])
    if not all(any(classes[c][2] for c in path) for path, _ in paths):
        raise Invalid("a string without a maskable position")
    return strings


def _verdict(spec: dict, default_name: str) -> dict[tuple[str, ...], float] | None:
    try:
        return oracle(spec, default_name)
    except Invalid:
        return None


def _check_against_oracle(load, spec: dict, default_name: str) -> bool:
    """`load()` raises DhwtError exactly when the oracle says invalid, and otherwise gives the
    oracle's class-string distribution. Returns the verdict (True: valid)."""
    expected = _verdict(spec, default_name)
    try:
        language = load()
    except DhwtError:
        assert expected is None, f"a valid spec was refused: {spec}"
        return False
    assert expected is not None, f"an invalid spec was accepted: {spec}"
    names = [c.name for c in language.classes]
    got = {tuple(names[c] for c in row if c != PAD): float(p)
           for row, p in zip(language.strings, language.probs)}
    assert got.keys() == expected.keys()
    assert all(math.isclose(got[k], expected[k], rel_tol=1e-9) for k in got)
    for cls in language.classes:
        assert math.isclose(math.fsum(cls.probs), 1.0, rel_tol=1e-12)
    return True


# -- spec generators: a well-formed spec, then (half the time) one fault --------------------------
# One fault at a time puts each example right at one rule, on its bad side (or, for the "...ok"
# variants, just on its good side), so every rule is tried on its own; random multi-fault inputs
# mostly fail several rules at once and test few of them.
NAMES = ["a", "b", "c", "0a", "0b", "1a", "1b", "x-1", "[x", "é", "q7"]
JUNK = st.sampled_from([True, 0, -1, 2, 0.5, 1.5, float("nan"), float("inf"), "0.5", [], {},
                        [0.5], {"a": 1}])  # TOML has no null
COMMON_FAULTS = ["bad variant name", "duplicate variant", "no variants", "variants missing",
                 "p near the tolerance", "p within the tolerance", "p wrong", "skew wrong",
                 "skew on 3 variants", "p and skew", "unknown class key", "unknown spec key",
                 "family", "spec key missing", "name", "description", "maskable junk"]
PARITY_FAULTS = ["n_bits", "bit classes", "too large", "largest allowed", "label as variant"]
AUTOMATON_FAULTS = ["cycle", "unreachable state", "silent class", "undeclared emit",
                    "undeclared target", "state named end", "state name", "start", "no transitions",
                    "transition key missing", "unknown transition key", "unmaskable string"]


def rarely(draw, percent: int) -> bool:
    """True about percent times in 100. (Drawn from a list that starts with the False entries,
    since hypothesis favours the ends of integer ranges and shrinks towards the first element.)"""
    return draw(st.sampled_from([False] * (100 - percent) + [True] * percent))


def _probs(draw, n: int) -> list[float]:
    weights = draw(st.lists(st.integers(1, 9), min_size=n, max_size=n))
    return [w / sum(weights) for w in weights]


@st.composite
def _class_table(draw, variants: list[str]) -> dict[str, object]:
    modes = ["uniform", "p"] + ["skew"] * (len(variants) == 2)
    mode = draw(st.sampled_from(modes))
    if mode == "p":
        return {"variants": variants, "p": _probs(draw, len(variants))}
    if mode == "skew":
        return {"variants": variants, "skew": draw(st.sampled_from([0.0, 0.5, 0.8, 0.999]))}
    return {"variants": variants}


@st.composite
def _names(draw, sizes: list[int]) -> list[list[str]]:
    """Distinct valid symbol names, sizes[i] for class i."""
    names = draw(st.permutations(NAMES))
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [list(names[start:start + size]) for start, size in zip(starts, sizes)]


@st.composite
def clean_parity(draw) -> dict[str, object]:
    sizes = draw(st.lists(st.integers(1, 3), min_size=2, max_size=2))
    variants = draw(_names(sizes))
    return {"family": "parity", "n_bits": draw(st.integers(1, 6)),
            "classes": {str(i): draw(_class_table(v)) for i, v in enumerate(variants)}}


@st.composite
def clean_automaton(draw) -> dict[str, object]:
    """A chain of states (each first transition goes to the next state, or to end), more
    transitions forward only (acyclic), emits cycling through the classes (each emitted)."""
    names = draw(st.lists(st.sampled_from(["s", "t", "u", "v"]), min_size=1, max_size=4,
                          unique=True))
    classes = draw(st.lists(st.sampled_from(["c", "d", "e"]), min_size=1, max_size=3,
                            unique=True))
    states, emitted = {}, 0
    for i, state in enumerate(names):
        ahead = names[i + 1:] + ["end"]
        k = draw(st.integers(1, 3))
        targets = [ahead[0]] + [draw(st.sampled_from(ahead)) for _ in range(k - 1)]
        emits = [classes[(emitted + j) % len(classes)] for j in range(k)]
        emitted += k
        states[state] = [{"emit": e, "to": to, "p": p}
                         for e, to, p in zip(emits, targets, _probs(draw, k))]
    classes = classes[:emitted]  # with fewer transitions than classes, those emitted
    sizes = draw(st.lists(st.integers(1, 2), min_size=len(classes), max_size=len(classes)))
    tables = {c: draw(_class_table(v)) for c, v in zip(classes, draw(_names(sizes)))}
    for table in tables.values():
        if draw(st.booleans()):
            table["maskable"] = True
    return {"family": "automaton", "start": names[0], "classes": tables, "states": states}


def _break(draw, spec: dict, fault: str) -> None:
    """Put `fault` into `spec` (in place)."""
    classes: dict = spec["classes"]
    cls = classes[draw(st.sampled_from(sorted(classes)))]
    pick = lambda options: draw(st.sampled_from(options))  # noqa: E731
    if fault == "bad variant name":
        cls["variants"][0] = pick(["[MASK]", "[]", "x y", "", " a"])
    elif fault == "duplicate variant":  # within a class, or across two
        others = [c for c in classes.values() if c is not cls]
        if others and draw(st.booleans()):
            pick(others)["variants"][0] = cls["variants"][0]
        else:
            cls["variants"].append(cls["variants"][0])
            cls.pop("p", None)
            cls.pop("skew", None)
    elif fault == "no variants":
        cls["variants"] = []
        cls.pop("p", None)
        cls.pop("skew", None)
    elif fault == "variants missing":
        del cls["variants"]
    elif fault in ("p near the tolerance", "p within the tolerance"):
        cls.pop("skew", None)
        cls["p"] = _probs(draw, len(cls["variants"]))
        drift = 2e-6 if fault == "p near the tolerance" else 5e-7
        cls["p"][0] += drift if cls["p"][0] + drift <= 1 else -drift
    elif fault == "p wrong":
        cls.pop("skew", None)
        cls["p"] = _probs(draw, len(cls["variants"]))
        how = pick(["scaled", "entry", "length"])
        if how == "scaled":
            cls["p"] = [x * pick([1.1, 0.9, 2.0]) for x in cls["p"]]
        elif how == "entry":
            cls["p"][0] = draw(JUNK | st.sampled_from([0, 0.0, -0.25]))
        else:
            cls["p"] = cls["p"] + [0.0] if draw(st.booleans()) else cls["p"][:-1]
    elif fault in ("skew wrong", "skew on 3 variants"):
        cls.pop("p", None)
        cls["variants"] = cls["variants"][:2] + ["zz1", "zz2"][: 2 - len(cls["variants"][:2])]
        if fault == "skew on 3 variants":
            cls["variants"].append("zz3")
            cls["skew"] = 0.5
        else:
            cls["skew"] = draw(st.sampled_from([1, 1.0, -0.1, 1.5]) | JUNK)
    elif fault == "p and skew":
        cls["variants"] = cls["variants"][:1] + ["zz1"]
        cls.update(p=[0.5, 0.5], skew=0.0)
    elif fault == "unknown class key":
        cls[pick(["prob", "variant", "weights"] + ["maskable"] * (spec["family"] == "parity"))] = 1
    elif fault == "unknown spec key":
        spec[pick(["nbits", "state", "clases", "seed"])] = 1
    elif fault == "family":
        spec["family"] = pick(["Parity", "hmm", 1, True])  # arrays, tables: tested below
    elif fault == "spec key missing":
        del spec[pick(sorted(k for k in spec if k != "name"))]
    elif fault == "name":
        spec["name"] = pick(["my grammar", "", 3])
    elif fault == "description":
        spec["description"] = pick([5, ["x"], True])
    elif fault == "maskable junk":
        cls["maskable"] = draw(JUNK.filter(lambda v: not isinstance(v, bool)))
    elif fault == "n_bits":
        spec["n_bits"] = draw(st.sampled_from([0, -1, 31, 2.0, "3"]) | JUNK)
    elif fault == "bit classes":
        classes[pick(["2", "00", "one"])] = classes.pop(pick(["0", "1"]))
    elif fault in ("too large", "largest allowed"):  # (2+2 variants)^N (N+1)^2 vs 5e7: 9 fits
        for i, table in enumerate(classes.values()):
            table.clear()
            table["variants"] = [f"b{i}x", f"b{i}y"]
        spec["n_bits"] = 10 if fault == "too large" else 9
    elif fault == "label as variant":
        cls["variants"][0] = pick(["EVEN", "ODD"])
    else:
        _break_automaton(draw, spec, fault)


def _break_automaton(draw, spec: dict, fault: str) -> None:
    states: dict = spec["states"]
    names = list(states)
    state = draw(st.sampled_from(names))
    transition = states[state][0]
    pick = lambda options: draw(st.sampled_from(options))  # noqa: E731
    if fault == "cycle":
        transition["to"] = pick(names[: names.index(state) + 1])
    elif fault == "unreachable state":
        states["w"] = [{"emit": transition["emit"], "to": "end", "p": 1.0}]
    elif fault == "silent class":
        spec["classes"]["silent"] = {"variants": ["zz9"]}
    elif fault == "undeclared emit":
        transition["emit"] = "zz"
    elif fault == "undeclared target":
        transition["to"] = "nowhere"
    elif fault == "state named end":
        states["end"] = [{"emit": transition["emit"], "to": "end", "p": 1.0}]
        transition["to"] = "end"
    elif fault == "state name":
        states["a b"] = states.pop(state)
        for ts in states.values():
            for t in ts:
                t["to"] = "a b" if t["to"] == state else t["to"]
        spec["start"] = "a b" if spec["start"] == state else spec["start"]
    elif fault == "start":
        spec["start"] = pick(["nowhere", "end", ""])
    elif fault == "no transitions":
        states[state] = []
    elif fault == "transition key missing":
        del transition[pick(["emit", "to", "p"])]
    elif fault == "unknown transition key":
        transition["weight"] = 1
    elif fault == "unmaskable string":
        for table in spec["classes"].values():
            table["maskable"] = False
        spec["classes"][transition["emit"]]["maskable"] = draw(st.booleans())


# -- grammar specs as files -----------------------------------------------------------------------
FAULTS = [pytest.param(family, fault, id=f"{family}, {fault or 'no fault'}")
          for family, faults in (("parity", PARITY_FAULTS), ("automaton", AUTOMATON_FAULTS))
          for fault in [None, *COMMON_FAULTS, *faults]]


@pytest.mark.parametrize("family, fault", FAULTS)
@settings(FUZZ, max_examples=8)
@given(data=st.data())
def test_grammar_files_only_dhwt_errors_and_exactly_the_valid_specs(family, fault, data,
                                                                    tmp_path_factory):
    """Each fault on its own (so every rule is tried), on random well-formed specs."""
    spec = data.draw(clean_parity() if family == "parity" else clean_automaton())
    if data.draw(st.booleans()):
        spec["name"] = "mine"
    if fault is not None:
        _break(data.draw, spec, fault)
    path = tmp_path_factory.mktemp("spec") / "spec.toml"
    path.write_text(dumps(spec), encoding="utf-8")
    parsed = tomllib.loads(path.read_text(encoding="utf-8"))  # what the user's file says
    valid = _check_against_oracle(lambda: load_language(str(path)), parsed, "spec")
    event("valid" if valid else "invalid")


@pytest.mark.parametrize("family", [["parity"], {"name": "parity"}])
def test_a_family_that_is_an_array_or_table_is_a_dhwt_error(family):
    with pytest.raises(DhwtError, match="family"):
        load_language("parity", {"family": family})


def test_the_oracle_accepts_the_built_in_specs():
    """The oracle is not vacuous: the documented built-ins are valid to it, and they load to the
    same distributions."""
    for name in ("parity", "parity-dh", "parity-nocnd", "four-cases"):
        _, spec = read_spec(name)
        assert _verdict(spec, name) is not None, name
        _check_against_oracle(lambda n=name: load_language(n), spec, name)


# -- --set overrides ------------------------------------------------------------------------------
class BadPath(Exception):
    """The oracle's verdict on a dotted key that cannot be applied."""


def apply(spec: dict, dotted: str, value: object) -> None:
    """The documented meaning of `--set dotted=value`: dotted keys into tables, integer segments
    index arrays, missing tables are created; in a class table p and skew replace each other."""
    parts = dotted.split(".")
    if "" in parts:
        raise BadPath(dotted)
    node: object = spec
    for part in parts[:-1]:
        if isinstance(node, list):
            if not (part.isdigit() and int(part) < len(node)):
                raise BadPath(dotted)
            node = node[int(part)]
        else:
            node = node.setdefault(part, {})
        if not isinstance(node, (dict, list)):
            raise BadPath(dotted)
    last = parts[-1]
    if isinstance(node, list):
        if not (last.isdigit() and int(last) < len(node)):
            raise BadPath(dotted)
        node[int(last)] = value
        return
    if len(parts) == 3 and parts[0] == "classes" and last in ("p", "skew"):
        node.pop("skew" if last == "p" else "p", None)
    node[last] = value


KEYS = st.sampled_from([
    "n_bits", "name", "description", "family", "classes.0.skew", "classes.1.skew", "classes.0.p",
    "classes.1.p", "classes.0.variants", "classes.0.variants.1", "classes.0.variants.9",
    "classes.2.variants", "classes.0", "classes", "n_bits.x", "classes..p", "states.start.0.p",
    "states.start.1.p", "states.start.0.to", "states.middle.0.emit", "states.last", "start",
    "classes.a.maskable", "classes.c.maskable", "classes.b.variants.0", "states.start.x",
])
VALUES = st.one_of(
    st.integers(-2, 12), st.sampled_from([0.0, 0.3, 0.5, 0.7, 0.8, 1.0, 1.5, -0.1, True, False]),
    st.sampled_from(["x", "0a", "EVEN", "end", "middle", "a b", "", "[B]", "start", "after_c"]),
    st.lists(st.sampled_from([0.1, 0.2, 0.3, 0.5, 0.7, 0.9]), max_size=3),
    st.lists(st.sampled_from(["q", "r", "0a", "1b"]), max_size=3),
    st.sampled_from([{}, {"variants": ["q"]}, {"emit": "c", "to": "end", "p": 1.0}]))
#: Overrides a user would plausibly write (mostly valid for one of the bases), and random ones.
PLAUSIBLE = st.one_of(
    st.builds(lambda n: {"n_bits": n}, st.integers(1, 8)),
    st.builds(lambda c, t: {f"classes.{c}.skew": t}, st.sampled_from("01b"),
              st.sampled_from([0.0, 0.3, 0.8, 0.99])),
    st.builds(lambda c, q: {f"classes.{c}.p": [q, 1 - q]}, st.sampled_from("01a"),
              st.sampled_from([0.1, 0.25, 0.5])),
    st.builds(lambda c, v: {f"classes.{c}.variants": v}, st.sampled_from("01a"),
              st.sampled_from([["q", "r"], ["q"], ["q", "r", "w"]])),
    st.builds(lambda q: {"states.middle.0.p": q, "states.middle.1.p": 1 - q},
              st.sampled_from([0.05, 0.5, 0.9])),
    st.builds(lambda c, m: {f"classes.{c}.maskable": m}, st.sampled_from("abe"), st.booleans()),
    st.builds(lambda v: {"name": v}, st.sampled_from(["mine", "my grammar"])),
    st.builds(lambda v: {"start": v}, st.sampled_from(["start", "after_c"])))
OVERRIDES = st.lists(st.one_of(PLAUSIBLE, PLAUSIBLE, st.dictionaries(KEYS, VALUES, min_size=1,
                                                                      max_size=1)),
                     min_size=1, max_size=3).map(lambda parts: {k: v for d in parts
                                                                for k, v in d.items()})


@FUZZ
@given(base=st.sampled_from(["parity", "four-cases"]), overrides=OVERRIDES)
def test_set_overrides_only_dhwt_errors_and_exactly_the_valid_results(base, overrides):
    _, spec = read_spec(base)
    overrides = copy.deepcopy(overrides)  # hypothesis reuses sampled tables between examples
    try:
        for dotted, value in copy.deepcopy(overrides).items():
            apply(spec, dotted, value)
    except BadPath:
        with pytest.raises(DhwtError):
            load_language(base, overrides)
        return
    valid = _check_against_oracle(lambda: load_language(base, overrides), spec, base)
    event("valid result" if valid else "invalid result")


@FUZZ
@given(items=st.lists(st.text(alphabet="n_bits.classes01p=[],. \"'x-5eE+", max_size=14),
                      max_size=3))
def test_set_assignment_text_only_dhwt_errors(items):
    """Raw `--set` text: read as TOML values (or strings), then applied: DhwtError or a
    language, never another exception."""
    try:
        load_language("parity", parse_assignments(items))
    except DhwtError:
        pass


# -- tie schedules --------------------------------------------------------------------------------
def schedule_oracle(text: str, steps: object) -> tuple[bool, tuple[tuple[int, str, str | None],
                                                                   ...]] | None:
    """(initial tied, ((step, action, merge), ...)) for a valid schedule, None otherwise. Rules
    (dhwt.training.tying): case and whitespace do not matter; items joined by commas; `tied` or
    `untied` alone, or opening a list of switches `untie@N` / `tie@N[:in|:out|:mean]` (merge
    mean by default) with whole-number steps 0 <= N < steps, strictly increasing, alternating
    from the initial state (stated, or implied: the state the first switch leaves)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        return None
    items = "".join(text.split()).lower().split(",")
    if "" in items:
        return None
    opening = items[0] if items[0] in ("tied", "untied") else None
    events = []
    for item in items[1:] if opening else items:
        action, at, rest = item.partition("@")
        number, colon, merge = rest.partition(":")
        if action not in ("tie", "untie") or not at or not number.isdecimal():
            return None
        if (action == "untie" and colon) or (colon and merge not in ("in", "out", "mean")):
            return None
        events.append((int(number), action, (merge or "mean") if action == "tie" else None))
    tied = opening == "tied" if opening else events[0][1] == "untie"
    initial, previous = tied, -1
    for step, action, _ in events:
        if not previous < step < steps or (action == "tie") == tied:
            return None
        tied, previous = not tied, step
    return initial, tuple(events)


@st.composite
def well_formed_schedules(draw) -> tuple[str, int]:
    """A valid schedule in random case and spacing, broken now and then the ways people do."""
    steps = draw(st.integers(1, 40))
    points = sorted(draw(st.lists(st.integers(0, steps - 1), max_size=4, unique=True)))
    tied = draw(st.booleans())
    items = [("tied" if tied else "untied")] if not points or draw(st.booleans()) else []
    for step in points:
        merge = draw(st.sampled_from(["", ":in", ":out", ":mean"])) if not tied else ""
        items.append(f"{'untie' if tied else 'tie'}@{step}{merge}")
        tied = not tied
    switches = [i for i, item in enumerate(items) if "@" in item]
    if switches and rarely(draw, 30):  # a step moved to a boundary of the rules
        i = draw(st.sampled_from(switches))
        before = int(items[i - 1].split("@")[1].split(":")[0]) if i - 1 in switches else None
        moved = draw(st.sampled_from([steps, steps - 1, 0, -1] + (
            [before, before + 1] if before is not None else [])))
        action, _, rest = items[i].partition("@")
        items[i] = f"{action}@{moved}" + rest[len(rest.split(':')[0]):]
    if len(items) > 1 and rarely(draw, 10):
        i = draw(st.integers(1, len(items) - 1))
        items[i - 1], items[i] = items[i], items[i - 1]
    if rarely(draw, 10):
        items.insert(draw(st.integers(0, len(items))), draw(st.sampled_from(
            ["untie@3", "tie@2:in", "untie@2:in", f"tie@{steps}", "untie@-1", "tied", ""])))
    text = "".join(draw(st.sampled_from([c, c.upper()])) for c in ",".join(items))
    spaced = "".join(c + draw(st.sampled_from(["", "", " ", "\t"])) for c in text)
    return spaced, steps


SWITCHES = st.builds(
    lambda action, step, merge: f"{action}@{step}" + ("" if merge is None else f":{merge}"),
    st.sampled_from(["tie", "untie", "TIE", "Untie", "tye"]),
    st.integers(-2, 45).map(str) | st.sampled_from(["", "x", "1.5", "1e3", "07", "٣", "+3"]),
    st.none() | st.sampled_from(["in", "out", "mean", "MEAN", "", "median", "in:out"]))
ITEMS = SWITCHES | st.sampled_from(["tied", "untied", "Tied", " ", "@", "tie", "untie@"]) | st.text(
    alphabet="tiedun@:,0123456789- \t", max_size=8)
SCHEDULES = st.one_of(
    well_formed_schedules(), well_formed_schedules(),
    st.tuples(st.lists(ITEMS, min_size=1, max_size=5).map(",".join) | st.text(max_size=20),
              st.integers(1, 40) | st.sampled_from([0, -1, True])))


@FUZZ
@given(schedule=SCHEDULES)
def test_tie_schedules_only_dhwt_errors_and_exactly_the_valid_ones(schedule):
    text, steps = schedule
    expected = schedule_oracle(text, steps)
    event("valid schedule" if expected is not None else "invalid schedule")
    try:
        schedule = TieSchedule.parse(text, steps)
    except DhwtError:
        assert expected is None, f"a valid schedule was refused: {text!r} ({steps} steps)"
        return
    assert expected is not None, f"an invalid schedule was accepted: {text!r} ({steps} steps)"
    got = (schedule.initial_tied, tuple((e.step, e.action, e.merge) for e in schedule.events))
    assert got == expected
    assert TieSchedule.parse(str(schedule), steps) == schedule  # str() reads back


def test_the_schedule_oracle_reads_the_documented_examples():
    assert schedule_oracle("untie@2000,tie@8000", 10_000) == (
        True, ((2000, "untie", None), (8000, "tie", "mean")))
    assert schedule_oracle("Untied, TIE@ 5:in", 10) == (False, ((5, "tie", "in"),))
    assert schedule_oracle("tied", 1) == (True, ())
    assert schedule_oracle("tie@5", 10) == (False, ((5, "tie", "mean"),))
    for bad in ("untie@10", "untie@5,untie@7", "untie@5,tie@5", "untie@-1", "", "tied,"):
        assert schedule_oracle(bad, 10) is None, bad
