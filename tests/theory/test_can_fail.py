"""Every check can fail: handed a wrong claim, or an instance that violates the hypothesis the
theorem needs, it reports FAIL. (A check that cannot fail would prove nothing.)"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from dhwt.theory import exor
from dhwt.theory import softmax_regression as sr
from dhwt.theory import t1_log_odds as t1
from dhwt.theory import t2_contraction as t2
from dhwt.theory import t3_input_symmetry as t3
from dhwt.theory import t4_tying_conflict as t4


def rng(seed: int = 3) -> np.random.Generator:
    return np.random.default_rng(seed)


def fails(outcome) -> bool:
    return outcome.status == "fail"


def exor_and_random_head():
    """dhwt.theory.exor, the exact EXor contexts, and random h (n, 4), U (V, 4) for a fake run."""
    ctx = exor.exor_contexts()
    g = rng()
    h, U = g.normal(size=(len(ctx.positions), 4)), g.normal(size=(len(ctx.truth.vocab), 4))
    return exor, ctx, h, U


# ---- T1 -------------------------------------------------------------------------------------


def test_t1_symbolic_checks_reject_wrong_claims():
    assert fails(t1.symbolic_log_odds(lambda U, h, b: ((U.row(0) - U.row(1)) * h)[0]))  # bias dropped
    one, minus = sp.Integer(1), sp.Integer(-1)
    assert fails(t1.symbolic_cauchy_schwarz(lambda a, c: [(one, a[0] * c[1] - a[1] * c[0])]))
    assert fails(t1.symbolic_cauchy_schwarz(  # the right squares, with a negative coefficient
        lambda a, c: [(minus, a[i] * c[j] - a[j] * c[i]) for i in range(4) for j in range(i + 1, 4)]))
    assert fails(t1.symbolic_gibbs(lambda x: x - sp.log(x)))


def test_t1_identity_fails_off_the_truth():
    inst, _ = t1.realisable_instance(rng())
    U0 = rng(4).normal(size=(t1.N_TARGETS, t1.WIDTH))
    assert fails(t1.numeric_identity(inst, U0, lam=0.1))  # a weight-decayed optimum is not the truth
    g = rng(5)  # a truth no softmax regression on these features realises
    random_truth = g.dirichlet(np.ones(t1.N_TARGETS), size=len(inst.weights))
    unrealisable = sr.Instance(inst.features, inst.weights, random_truth)
    assert fails(t1.numeric_identity(unrealisable, U0))


def test_t1_bound_fails_with_an_output_bias():
    g = rng()
    features = g.normal(size=(t1.N_CONTEXTS, t1.WIDTH))
    star, bias = g.normal(size=(t1.N_TARGETS, t1.WIDTH)), g.normal(size=t1.N_TARGETS)
    star[0] = star[1]
    bias[0] = bias[1] + np.log(9)  # constant ratio 9 carried by the bias alone
    truth = sr.probabilities(features, star, bias)
    inst = sr.Instance(features, sr.random_weights(g, t1.N_CONTEXTS), truth)
    assert fails(t1.numeric_bound(inst, g.normal(size=star.shape), b0=np.zeros(t1.N_TARGETS)))


def test_t1_span_claims_fail_when_the_span_hypothesis_is_swapped():
    assert fails(t1.numeric_cnd_equal(rng(), rank=2, lam=0.0))  # deficient span, no decay: unequal
    assert fails(t1.numeric_span_counterexample(rng(), rank=None))  # full span: no counterexample


def test_t1_empirical_outcome_fails_on_an_uncalibrated_model():
    exor, ctx, h, U = exor_and_random_head()
    fake = exor.Trained(h, U, None, h @ U.T, tied=False)
    assert fails(exor.log_odds_outcome(fake, ctx))


# ---- T2 -------------------------------------------------------------------------------------


def test_t2_symbolic_checks_reject_wrong_claims():
    assert fails(t2.symbolic_odds_gap(lambda q1, q2, x: q2 * (sp.exp(x) + 1)))
    assert fails(t2.symbolic_signs(lambda x: x * (sp.exp(x) - 2)))
    assert fails(t2.symbolic_flow_derivative(lambda P, q2, x: P * q2 * x * (sp.exp(x) - 1)))
    assert fails(t2.symbolic_step_algebra(lambda theta: 2 - theta))


def test_t2_contraction_fails_for_a_pair_that_is_not_cnd():
    assert fails(t2.numeric_fixed_features(rng(), ratio=9.0))
    assert fails(t2.numeric_moving_features(rng(), ratio=9.0))
    assert fails(t2.numeric_flow_derivative(rng(), ratio=9.0))
    assert fails(t2.numeric_stationary(rng(), ratio=9.0))


def test_t2_contraction_check_refuses_a_step_outside_the_theorem():
    assert fails(t2.numeric_fixed_features(rng(), step_factor=4.0))


def test_t2_scope_checks_fail_when_their_counterexample_is_removed():
    assert fails(t2.numeric_step_too_large(rng(), factor=1.0))
    assert fails(t2.numeric_frozen_bias(rng(), gap=0.0))
    assert fails(t2.numeric_adam(rng(), equal_start=True))


def test_t2_empirical_fails_for_a_pair_that_is_not_cnd():
    assert fails(exor.population_descent(0, steps=60, pairs=[("0a", "0b")]))


# ---- T3 -------------------------------------------------------------------------------------


def test_t3_symbolic_checks_reject_wrong_claims():
    assert fails(t3.symbolic_swap_invariance(sp.Rational(1, 10), expect_invariant=True))
    assert fails(t3.symbolic_swap_invariance(sp.Rational(1, 2), expect_invariant=False))
    assert fails(t3.symbolic_convexity(half=sp.Integer(1)))
    assert fails(t3.symbolic_frequency_obstruction(sp.Rational(1, 2), sp.Rational(1, 2)))


def test_t3_equal_rows_fail_without_equal_frequencies():
    assert fails(t3.numeric_equal_rows(rng(), pi=0.1))
    assert fails(t3.numeric_joint_stationary(rng(), pi=0.1))
    assert fails(t3.numeric_symmetric_init(rng(), pi=0.1, eps=1.0))  # Adam far from scale-blind


def test_t3_scope_checks_fail_with_equal_frequencies():
    assert fails(t3.numeric_scaled_copy(rng(), pi=0.5))
    assert fails(t3.numeric_unequal_frequency(rng(), pi=0.5))


def test_t3_empirical_fails_without_a_symmetric_start():
    assert fails(exor.symmetric_input_rows(0, steps=5, symmetric=False))


# ---- T4 -------------------------------------------------------------------------------------


def test_t4_symbolic_checks_reject_wrong_claims():
    assert fails(t4.symbolic_chain_rule(lambda p1, p2, q1, q2: p1 * sp.log(p1 / q1)))
    sigma = lambda t: 1 / (1 + sp.exp(-t))  # noqa: E731
    assert fails(t4.symbolic_bernoulli_slope(lambda a, x: sigma(a) - sigma(x)))  # sign flipped
    assert fails(t4.symbolic_exor_numbers(sp.Integer(8)))
    assert fails(t4.symbolic_bias_escape(lambda c: sp.Integer(0)))
    assert fails(t4.symbolic_layernorm(claimed=5))


def test_t4_price_fails_for_a_model_with_an_output_bias():
    inst, star = t1.realisable_instance(rng())
    features = inst.features[:, :-1]
    U, b = star[:, :-1].copy(), star[:, -1].copy()  # the constant coordinate becomes a bias
    inst = sr.Instance(features, inst.weights, inst.truth)
    assert sr.excess(inst, U, b) < 1e-12  # exact, with u1 = u2 ...
    assert np.allclose(U[0], U[1])
    assert t4.price_slack(inst, U, b) < -1e-3  # ... so the no-bias price B(0) > 0 is not paid


def test_t4_tightness_and_bias_escape_fail_when_broken():
    assert fails(t4.numeric_merge_tight(rng(), shift=0.0))
    assert fails(t4.numeric_bias_escape(rng(), lam_bias=10.0))


def test_t4_empirical_outcome_fails_when_the_head_has_a_hidden_bias():
    exor, ctx, h, U = exor_and_random_head()
    i, j = ctx.index("0a"), ctx.index("0b")
    U[i] = U[j]
    hidden_bias = np.zeros(len(ctx.truth.vocab))
    hidden_bias[i] = -np.log(9)
    # claims no bias (b=None) but its logits carry one: the pair is calibrated at distance 0
    fake = exor.Trained(h, U, None, h @ U.T + hidden_bias, tied=True)
    assert fails(exor.tying_outcome([("fake", fake)], ctx))


def test_t5_symbolic_checks_reject_wrong_claims():
    from dhwt.theory import t5_masked_lm as t5

    assert fails(t5.symbolic_cnd_gives_sem(impose=False))  # no cnd: sem equations fail
    assert fails(t5.symbolic_ratio_gives_sem(constant=False))  # a ratio per string
    assert fails(t5.symbolic_brook(factors=2))  # one conditional ratio left out
    assert fails(t5.symbolic_bias_split(lambda k: (sp.log(k), sp.Integer(0))))  # normaliser moves


def test_t5_numeric_checks_fail_off_their_hypotheses():
    from dhwt.theory import t5_masked_lm as t5

    # positivity dropped: the disconnected counterexample (read backwards: the pair first) is
    # sem with a varying ratio
    backwards = {x[::-1]: v for x, v in t5.counterexample().items()}
    assert fails(t5.numeric_sem_iff_ratio(rng(), draws=2, draw=lambda g, constant: backwards))
    assert fails(t5.numeric_counterexample(t5.counterexample(1.0)))  # equal ratios: cnd, no gap
    assert fails(t5.numeric_merge_extension(rng(), bias_kappa=3.0))  # the bias splits 1 : 3


def issue_counterexample():
    """`L s1` (1/2), `a s1 c`, `a s2 c` (1/4 each), L never masked: (P) and (M) hold, s1 ~sem s2,
    and the ratio is infinite after `L` (s1 alone) and 1 inside `a _ c`: (N) is needed."""
    from dhwt.languages.language import language_from_spec
    from dhwt.theory import t5_grammars

    spec = t5_grammars.strings_spec({("L", "s1"): 0.5, ("a", "s1", "c"): 0.25,
                                     ("a", "s2", "c"): 0.25}, never_masked=("L",))
    return language_from_spec(spec, "issue30")


def test_t5_counterexample_needs_a_maskable_neighbour(monkeypatch):
    from dhwt.languages import compute_truth
    from dhwt.theory import t5_grammars

    language = issue_counterexample()
    truth = compute_truth(language, "mlm")
    pair = next(p for p in truth.pairs() if (p.first, p.second) == ("s1", "s2"))
    assert pair.sem and not pair.cnd
    p_s2 = truth.conditionals[:, truth.vocab.index("s2")]
    assert (p_s2 == 0).any() and (p_s2 > 0).any()  # s1 alone after L, both inside a _ c
    found = t5_grammars.examine(language)
    assert found.holds and found.needed == {"N"} and found.sem_varying_elsewhere == 1
    monkeypatch.setattr(t5_grammars, "maskable_elsewhere", lambda *args: True)
    assert not t5_grammars.examine(language).holds  # (b ⇒) without (N): refuted here


EXHAUSTIVE = [pytest.param("named_grammars", marks=pytest.mark.slow), "random_grammars"]


def replace_sem(monkeypatch, relation: str) -> None:
    """Hand the exhaustive checks a truth whose sem relation is every pair, or cnd."""
    import dataclasses

    from dhwt.theory import t5_grammars

    real = t5_grammars.compute_truth

    def wrong(language, objective):
        truth = real(language, objective)
        sem = np.ones_like(truth.sem) if relation == "all pairs" else truth.cnd.copy()
        return dataclasses.replace(truth, sem=sem)

    monkeypatch.setattr(t5_grammars, "compute_truth", wrong)


@pytest.mark.parametrize("check", EXHAUSTIVE)
@pytest.mark.parametrize("relation", ["all pairs", "cnd"])
def test_t5_exhaustive_checks_fail_with_a_wrong_sem(monkeypatch, check, relation):
    from dhwt.theory import t5_grammars

    replace_sem(monkeypatch, relation)
    assert fails(getattr(t5_grammars, check)(0))


@pytest.mark.parametrize("check", EXHAUSTIVE)
@pytest.mark.parametrize("hypothesis", ["is_product", "varying_is_maskable", "maskable_elsewhere"])
def test_t5_exhaustive_checks_fail_without_a_hypothesis(monkeypatch, check, hypothesis):
    """(P), (M), (N) each taken as holding everywhere: (b ⇒) is then claimed where it is false."""
    from dhwt.theory import t5_grammars

    monkeypatch.setattr(t5_grammars, hypothesis, lambda *args: True)
    assert fails(getattr(t5_grammars, check)(0))


@pytest.mark.slow
def test_t5_masked_merged_rows_fail_when_the_rows_are_not_held_merged():
    from dhwt.theory import price

    # "merged" arms trained with free rows: without a bias they no longer pay B(0)
    assert fails(price.masked_merged_rows(0, merge=False))


@pytest.mark.slow
def test_t5_masked_construction_fails_with_a_wrong_split():
    from dhwt.theory import price

    # the bias split at 1 : 1 instead of the pair's 1 : 9: the split model's excess moves
    assert fails(price.masked_merged_rows(0, shares={"s1": 0.5, "s2": 0.5}))


@pytest.mark.slow
def test_t5_causal_merged_rows_fail_under_a_wrong_claim():
    from dhwt.theory import price

    # a bound computed as if ||h|| were 1000 times smaller than sqrt(d): rows that far apart
    # would pay B_b(delta) > 0, more than the free members' excess
    assert fails(price.causal_merged_rows(0, norm_scale=0.001))
    # a constant ratio (1 : 9 after b too): B_b(0) = 0, there is no conflict to pay for
    assert fails(price.causal_merged_rows(0, after_b=price.KAPPA))
