"""Loading languages: built-in names, overrides, the class-string distributions of both families,
symbol-level enumeration, and the enumeration limit."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dhwt.errors import DhwtError
from dhwt.languages import load_language
from dhwt.languages.enumeration import MAX_WORK, PAD, row_keys
from dhwt.languages.language import symbol_strings
from dhwt.languages.spec import apply_overrides, builtin_names, parse_assignments


def test_builtins_are_listed():
    assert builtin_names() == ("demand", "four-cases", "parity", "parity-dh", "parity-nocnd")


def test_parity_has_every_string_and_the_paper_probabilities():
    language = load_language("parity")
    assert language.strings.shape == (128, 8) and len({tuple(r) for r in language.strings}) == 128
    assert np.allclose(language.probs, 1 / 128)
    names = [c.name for c in language.classes]
    for row in language.strings:
        bits = [names[c] for c in row[:7]]
        assert names[row[7]] == ("EVEN" if bits.count("1") % 2 == 0 else "ODD")
    probs = {c.name: c.probs for c in language.classes}
    assert probs["0"] == pytest.approx((0.1, 0.9)) and probs["1"] == pytest.approx((0.5, 0.5))
    assert [c.maskable for c in language.classes] == [True, True, False, False]


def test_automaton_class_strings():
    language = load_language("four-cases")
    got = {language.string_text(i): p for i, p in enumerate(language.probs)}
    assert got == pytest.approx({"c a e": 0.15, "c a f g": 0.35, "d b e": 0.15, "d b f g": 0.35})
    assert not language.equal_lengths and (language.strings[language.lengths == 3, 3] == PAD).all()


def test_symbol_strings_enumerate_every_variant_combination():
    language = load_language("parity", {"n_bits": 3})
    rows, probs = symbol_strings(language)
    assert len(rows) == 4**3 and probs.sum() == pytest.approx(1.0)
    q = {s: p for c in language.classes for s, p in zip(c.variants, c.probs)}
    symbols = language.symbols
    for row, p in zip(rows, probs):
        assert p == pytest.approx(np.prod([q[symbols[s]] for s in row]) / 8)


def test_overrides_set_nested_keys_and_swap_p_for_skew():
    assignments = parse_assignments(["n_bits=5", "classes.0.p=[0.3, 0.7]", "name=mine",
                                     "description=plain words"])
    assert assignments == {"n_bits": 5, "classes.0.p": [0.3, 0.7], "name": "mine",
                           "description": "plain words"}
    language = load_language("parity", assignments)
    assert language.name == "mine" and language.spec["n_bits"] == 5
    assert "skew" not in language.spec["classes"]["0"]
    assert language.classes[0].probs == pytest.approx((0.3, 0.7))
    back = load_language("parity", {"classes.0.p": [0.3, 0.7], "classes.0.skew": 0.2})
    assert back.classes[0].probs == pytest.approx((0.4, 0.6))


def test_overrides_index_arrays_and_leave_the_original_alone():
    spec = {"states": {"s": [{"emit": "a", "to": "end", "p": 1.0}]}}
    changed = apply_overrides(spec, {"states.s.0.p": 0.5})
    assert changed["states"]["s"][0]["p"] == 0.5 and spec["states"]["s"][0]["p"] == 1.0
    with pytest.raises(DhwtError, match="not an index"):
        apply_overrides(spec, {"states.s.3.p": 0.5})
    with pytest.raises(DhwtError, match="is a value, not a table"):
        apply_overrides({"n_bits": 3}, {"n_bits.x": 1})


def test_variant_probabilities_default_to_uniform(tmp_path):
    spec = tmp_path / "uniform.toml"
    spec.write_text('family = "parity"\nn_bits = 2\n[classes.0]\nvariants = ["p", "q", "r"]\n'
                    '[classes.1]\nvariants = ["1"]\n')
    language = load_language(str(spec))
    assert language.classes[0].probs == pytest.approx((1 / 3,) * 3)
    assert language.classes[1].probs == (1.0,)


def test_skew_needs_two_variants():
    with pytest.raises(DhwtError, match="needs exactly 2 variants"):
        load_language("parity", {"classes.1.variants": ["u", "v", "w"]})


def test_enumeration_limit_is_exact_at_the_boundary():
    # EXor with 2+2 variants enumerates 4^N strings of length N+1: work 4^N (N+1)^2
    assert 4**9 * 10**2 <= MAX_WORK < 4**10 * 11**2
    assert len(load_language("parity", {"n_bits": 9}).probs) == 512
    with pytest.raises(DhwtError, match="4,194,304 symbol strings"):  # 4^11
        load_language("parity", {"n_bits": 11})


def test_row_keys_identify_rows_on_both_paths():
    rng = np.random.default_rng(0)
    for width, n_ids in ((6, 5), (30, 40)):  # fits int64 / needs the bytes path
        rows = rng.integers(-1, n_ids, size=(500, width))
        rows[::7] = rows[3]  # duplicates
        keys = row_keys(rows, n_ids)
        unique, inverse = np.unique(keys, return_inverse=True)
        assert len(unique) == len({tuple(r) for r in rows})
        for a, b in itertools.combinations(range(0, 500, 37), 2):
            assert (inverse[a] == inverse[b]) == bool((rows[a] == rows[b]).all())
        assert (unique[np.searchsorted(unique, keys)] == keys).all()


def test_automaton_size_is_counted_before_enumerating(tmp_path):
    # a chain of 30 two-variant positions: 2^30 symbol strings of length 30
    lines = ['family = "automaton"', 'start = "s0"', "[classes.x]", 'variants = ["x1", "x2"]',
             "[states]"]
    lines += [f's{i} = [{{emit = "x", to = "{f"s{i + 1}" if i < 29 else "end"}", p = 1.0}}]'
              for i in range(30)]
    spec = tmp_path / "chain.toml"
    spec.write_text("\n".join(lines))
    with pytest.raises(DhwtError, match=f"would enumerate {2**30:,} symbol strings "
                                        f"\\({2**30 * 900:,} context positions"):
        load_language(str(spec))
