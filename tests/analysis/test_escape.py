"""Escape from the plateau: the criterion, Kaplan-Meier and the log-rank test, against
hand-written textbook versions."""

from types import SimpleNamespace

import numpy as np
import pytest

from dhwt.analysis.escape import Escapes, escapes, kaplan_meier, logrank, threshold


def product_limit(times, events):
    """Kaplan-Meier by its definition: at each event time, times (1 - deaths / at risk)."""
    out, s = [], 1.0
    for t in np.unique(times):
        at_risk = (times >= t).sum()
        deaths = ((times == t) & events).sum()
        s *= 1 - deaths / at_risk
        out.append(s)
    return np.array(out)


def textbook_logrank(a_t, a_e, b_t, b_e):
    """z = (O_a - E_a) / sqrt(V) summed over the distinct event times of both arms."""
    times = np.r_[a_t, b_t]
    events = np.r_[a_e, b_e]
    o_minus_e = var = 0.0
    for t in np.unique(times[events]):
        n_a, n_b = (a_t >= t).sum(), (b_t >= t).sum()
        d_a, d = ((a_t == t) & a_e).sum(), ((times == t) & events).sum()
        n = n_a + n_b
        o_minus_e += d_a - d * n_a / n
        if n > 1:
            var += d * (n_a / n) * (n_b / n) * (n - d) / (n - 1)
    return o_minus_e / np.sqrt(var)


def arm(times, events):
    times, events = np.asarray(times), np.asarray(events, bool)
    return Escapes(tuple(range(len(times))), times, events, np.zeros(len(times), bool), 0.0,
                   int(times.max()))


def test_kaplan_meier_is_the_product_limit():
    rng = np.random.default_rng(3)
    times = rng.integers(1, 30, 40) * 1000
    events = rng.random(40) < 0.4
    steps, survival, low, high = kaplan_meier(arm(times, events))
    np.testing.assert_allclose(survival, product_limit(times, events))
    assert (low <= survival + 1e-12).all() and (survival <= high + 1e-12).all()


def test_no_escape_is_survival_one():
    steps, survival, low, high = kaplan_meier(arm([5, 5, 5], [False] * 3))
    assert steps.tolist() == [5] and survival.tolist() == [1.0]


def test_logrank_matches_the_textbook_statistic():
    rng = np.random.default_rng(4)
    a_t, b_t = rng.integers(1, 20, 40), rng.integers(5, 25, 40)
    a_e, b_e = rng.random(40) < 0.5, rng.random(40) < 0.3
    z, p = logrank(arm(a_t, a_e), arm(b_t, b_e))
    assert z == pytest.approx(textbook_logrank(a_t, a_e, b_t, b_e))
    assert p == pytest.approx(2 * (1 - __import__("scipy").stats.norm.cdf(abs(z))))
    assert np.isnan(logrank(arm([3, 3], [False, False]), arm([3], [False]))[0])


def test_escapes_reads_the_first_crossing_and_censors_the_rest():
    truth = SimpleNamespace(marginal_entropy=1.2, bayes_cross_entropy=0.5)
    assert threshold(truth) == pytest.approx(0.85)
    curves = {0: [1.2, 1.1, 0.84, 0.9, 0.6], 1: [1.2] * 5, 2: [1.2, 0.7, 0.6, 0.55, 0.52]}
    rows = [{"split": split, "step": 1000 * i, "member": m, "seed": 50 + m, "loss": loss}
            for m, curve in curves.items() for i, loss in enumerate(curve)
            for split in ("train", "population")]
    for r in rows:
        if r["split"] == "train":
            r["loss"] = 0.0  # other splits must not count
    e = escapes(rows, truth)
    assert e.seeds == (50, 51, 52)
    assert e.step.tolist() == [2000, 4000, 1000]
    assert e.escaped.tolist() == [True, False, True]
    assert e.final_off.tolist() == [True, False, True] and e.last == 4000


def test_escapes_needs_population_lines():
    with pytest.raises(ValueError, match="population_every"):
        escapes([{"split": "train", "step": 0, "member": 0, "seed": 1, "loss": 1.0}],
                SimpleNamespace(marginal_entropy=1.0, bayes_cross_entropy=0.5))
