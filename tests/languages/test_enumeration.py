"""Exact enumeration at its edges: an automaton whose paths merge is sized and enumerated by its
strings, not its paths; string probabilities that underflow float64 are refused in one true
line (no numpy warnings, no blame on transitivity)."""

from __future__ import annotations

import math
import re
import warnings

import pytest

from dhwt.errors import DhwtError
from dhwt.languages import compute_truth, enumeration
from dhwt.languages.language import language_from_spec
from dhwt.tomlwrite import dumps


def ladder(layers: int, emits=("a", "a"), variants: int = 2) -> dict:
    """Two states per layer, each going to both states of the next layer, the first transition
    emitting emits[0] and the second emits[1]: 2^(layers + 1) paths; with equal emits, one
    class string. Each class has `variants` variants."""
    states = {"start": [{"emit": emits[0], "to": "x0", "p": 0.5},
                        {"emit": emits[1], "to": "y0", "p": 0.5}]}
    for i in range(layers):
        after = [f"x{i + 1}", f"y{i + 1}"] if i + 1 < layers else ["end", "end"]
        for side in "xy":
            states[f"{side}{i}"] = [{"emit": emits[0], "to": after[0], "p": 0.5},
                                    {"emit": emits[1], "to": after[1], "p": 0.5}]
    return {"family": "automaton", "start": "start",
            "classes": {c: {"variants": [f"{c}{i + 1}" for i in range(variants)]}
                        for c in sorted(set(emits))},
            "states": states}


def paths(spec: dict) -> list[tuple[tuple[str, ...], float]]:
    """Every path's class string and probability, by walking the spec (no merging)."""
    out = []

    def walk(state, prefix, prob):
        for t in spec["states"][state]:
            if t["to"] == "end":
                out.append(((*prefix, t["emit"]), prob * t["p"]))
            else:
                walk(t["to"], (*prefix, t["emit"]), prob * t["p"])

    walk(spec["start"], (), 1.0)
    return out


def test_merged_paths_make_one_string(tmp_path, cli):
    """2^21 paths of 21 a's: one string (it used to be refused for 2,097,152 of them)."""
    language = language_from_spec(ladder(20, variants=1), "ladder")
    assert language.strings.shape == (1, 21) and language.probs.tolist() == [1.0]
    small = ladder(3)
    truth = compute_truth(language_from_spec(small, "small"), "clm")
    assert truth.sem.all() and truth.cnd.all()  # a1, a2 at 1/2 each everywhere
    (tmp_path / "ladder.toml").write_text(dumps(ladder(4)))
    code, out, err = cli(["synth", "--grammar", tmp_path / "ladder.toml"])
    assert code == 0, err
    assert re.search(rf" 1 class strings?, {2 ** 5} symbol strings", out), out


@pytest.mark.parametrize("layers, emits", [(3, ("a", "a")), (3, ("a", "b")), (4, ("a", "b"))])
def test_the_size_refused_counts_distinct_strings(monkeypatch, layers, emits):
    """The refusal names the number of distinct symbol strings and their sum of length^2,
    counted here by walking every path and merging equal class strings."""
    spec = ladder(layers, emits)
    strings = {s for s, _ in paths(spec)}
    variants = 2  # per class, at every position
    expected = (sum(variants ** len(s) for s in strings),
                sum(variants ** len(s) * len(s) ** 2 for s in strings))
    monkeypatch.setattr(enumeration, "MAX_WORK", 0)
    with pytest.raises(DhwtError) as raised:
        language_from_spec(spec, "ladder")
    found = re.search(r"enumerate ([\d,]+) symbol strings \(([\d,]+) context positions",
                      str(raised.value))
    assert tuple(int(g.replace(",", "")) for g in found.groups()) == expected


def test_merged_probabilities_are_the_sum_over_paths():
    spec = ladder(3, ("a", "b"))
    spec["states"]["x0"][0]["p"], spec["states"]["x0"][1]["p"] = 0.2, 0.8
    spec["states"]["y1"][1]["emit"] = "a"  # y1 -a-> x2 and y1 -a-> y2: paths merge after
    assert len(paths(spec)) > len({s for s, _ in paths(spec)})
    language = language_from_spec(spec, "ladder")
    classes = [c.name for c in language.classes]
    expected: dict[tuple[str, ...], float] = {}
    for s, p in paths(spec):
        expected[s] = expected.get(s, 0.0) + p
    got = {tuple(classes[c] for c in row if c >= 0): p
           for row, p in zip(language.strings, language.probs)}
    assert got.keys() == expected.keys()
    assert all(math.isclose(got[s], expected[s], rel_tol=1e-12) for s in expected)


SKEWED_PARITY = {"family": "parity", "n_bits": 3,
                 "classes": {"0": {"variants": ["0a", "0b"], "p": [1e-200, 1.0]},
                             "1": {"variants": ["1a", "1b"], "skew": 0.0}}}


def test_string_probabilities_that_underflow_are_refused_in_one_true_line(tmp_path, cli):
    """With p(0a) = 1e-200 a string with two 0a has probability 1e-400 / 8: 0 in float64."""
    lost = sum(math.comb(3, k) * 2 ** (3 - k) * math.comb(k, j)  # k zeros, j of them 0a
               for k in range(4) for j in range(2, k + 1))
    (tmp_path / "tiny.toml").write_text(dumps(SKEWED_PARITY))
    code, out, err = cli(["synth", "--grammar", tmp_path / "tiny.toml"])
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    assert err.startswith(f"error: {lost} of the {4 ** 3} symbol strings have a probability "
                          "below float64's smallest")
    assert "transitive" not in err and "Warning" not in err


def test_a_tiny_probability_that_does_not_underflow_is_exact():
    """One bit: every string's probability is representable; 0a (1e-200) and 0b (1) are
    followed alike (sem) and predicted 1e200 times apart (not cnd), with no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        truth = compute_truth(language_from_spec({**SKEWED_PARITY, "n_bits": 1}, "tiny"), "clm")
    a, b = truth.symbols.index("0a"), truth.symbols.index("0b")
    assert truth.sem[a, b] and not truth.cnd[a, b]
    assert truth.cnd_log[a, b] == pytest.approx(200 * math.log(10))
