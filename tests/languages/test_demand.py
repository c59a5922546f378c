"""The demand family: every pair's relations as designed (the factorial, the dose, the masked
languages), the conditionals against the draws' closed form, draw seeds, and bad specs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dhwt.errors import DhwtError
from dhwt.languages import compute_truth, load_language
from dhwt.languages.demand import draws

#: What the s_ja, s_jb pairs are, by (pattern, own tails?), for a causal LM: sem iff no own
#: tails (the twins then predict one future), cnd iff the split is 1 : 1.
DESIGN = {(pattern, own): ("sem" if not own else "") + ("cnd" if pattern == "equal" else "")
          for pattern in ("equal", "constant", "ratio") for own in (False, True)}


def relations(truth) -> dict[tuple[str, str], str]:
    return {(p.first, p.second): ("sem" if p.sem else "") + ("cnd" if p.cnd else "")
            for p in truth.pairs()}


@pytest.mark.parametrize("pattern,dose", list(itertools.product(("equal", "constant", "ratio"),
                                                           (0.0, 0.25, 1.0))))
def test_every_pair_is_related_as_designed(pattern, dose):
    k = 3
    truth = compute_truth(load_language("demand", {"k": k, "pattern": pattern, "dose": dose,
                                                   "draw": 5}), "clm")
    twins = {(f"s{j}a", f"s{j}b") for j in range(k)}
    for pair, found in relations(truth).items():
        expected = DESIGN[pattern, dose > 0] if pair in twins else ""
        assert found == expected, (pair, found, expected)
    violating = {"equal": dose > 0, "constant": dose == 0, "ratio": dose == 0}[pattern]
    assert truth.dh.all() != violating


def test_the_factorial_has_three_violations_each_beside_a_holding_language_of_its_pattern():
    kinds = {}
    for pattern, dose in itertools.product(("equal", "constant", "ratio"), (0.0, 1.0)):
        truth = compute_truth(load_language("demand", {"k": 2, "pattern": pattern,
                                                       "dose": dose}), "clm")
        kinds[pattern, dose] = sorted({p.kind for p in truth.pairs() if not p.dh})
    assert kinds == {("equal", 0.0): [], ("equal", 1.0): ["cnd only"],
                     ("constant", 0.0): ["sem only"], ("constant", 1.0): [],
                     ("ratio", 0.0): ["sem only"], ("ratio", 1.0): []}


def test_masked_languages_drop_the_tails():
    found = {}
    for pattern in ("equal", "constant", "ratio"):
        language = load_language("demand", {"k": 3, "pattern": pattern, "tail": False})
        assert set(language.lengths) == {2}
        found[pattern] = sorted({p.kind for p in compute_truth(language, "mlm").pairs()
                                 if not p.dh})
    assert found == {"equal": [], "constant": ["sem only"], "ratio": []}


def test_the_conditionals_are_the_draws():
    k, c, dose = 3, 9.0, 0.25
    w, p, q = draws(k, 7, c)
    truth = compute_truth(load_language("demand", {"k": k, "pattern": "ratio", "dose": dose,
                                                   "draw": 7}), "clm")
    vocab = truth.vocab
    for m in range(k):  # after [BOS] x_m: pair j, twin a with q[m, j], b with 1 - q[m, j]
        row = [i for i in range(len(truth.positions))
               if truth.positions[i] == 1 and vocab[truth.inputs[i, 1]] == f"x{m}"]
        assert len(row) == 1
        cond = truth.conditionals[row[0]]
        for j in range(k):
            assert cond[vocab.index(f"s{j}a")] == pytest.approx(p[m, j] * q[m, j], abs=1e-12)
            assert cond[vocab.index(f"s{j}b")] == pytest.approx(p[m, j] * (1 - q[m, j]),
                                                               abs=1e-12)
    first = truth.conditionals[truth.positions == 0][0]
    assert [first[vocab.index(f"x{m}")] for m in range(k)] == pytest.approx(w, abs=1e-12)
    assert len(set(np.round(w, 12))) == k  # distinct: no two x conditionally equivalent
    after = [i for i in range(len(truth.positions)) if truth.positions[i] == 2
             and vocab[truth.inputs[i, 2]] == "s1b"]
    tails = truth.conditionals[after[0]]
    assert tails[vocab.index("t1b")] == pytest.approx(dose)
    assert tails[vocab.index("c1")] == pytest.approx(1 - dose)
    assert tails[vocab.index("t1a")] == 0.0


def test_a_draw_seed_changes_the_language_and_repeats_it():
    one, again, other = (load_language("demand", {"k": 4, "pattern": "ratio", "draw": d})
                         for d in (1, 1, 2))
    assert np.array_equal(one.probs, again.probs)
    assert not np.allclose(one.probs, other.probs)


@pytest.mark.parametrize("overrides,message", [
    ({"pattern": "skewed"}, "'pattern' must be one of equal, constant, ratio"),
    ({"dose": 1.5}, "'dose' is the share of own tails"),
    ({"tail": False, "dose": 0.5}, "with tail = false it must be 0"),
    ({"ratio": 1.0}, "must be above 1"),
    ({"k": 0}, "'k'"),
    ({"width": 3}, "unknown key 'width'"),
])
def test_bad_specs_are_one_error(overrides, message):
    with pytest.raises(DhwtError, match=message):
        load_language("demand", overrides)
