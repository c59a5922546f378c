"""experiments/dh_demand/analyse.py: the declared contrasts read from cell records whose prices
are planted, checked against the same contrasts written out by hand and against scipy's tests."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

HERE = Path(__file__).parents[2] / "experiments" / "dh_demand"
spec = importlib.util.spec_from_file_location("dh_demand_analyse", HERE / "analyse.py")
analyse = importlib.util.module_from_spec(spec)
spec.loader.exec_module(analyse)

LANGUAGES = [("equal", 0.0), ("equal", 1.0), ("constant", 0.0), ("constant", 1.0),
             ("ratio", 0.0), ("ratio", 0.25), ("ratio", 0.5), ("ratio", 1.0)]


def planted(tmp_path: Path, price, draws=range(5), d=4) -> Path:
    """A study folder whose tied arm exceeds the untied one by price(pattern, dose, draw); the
    untied arm's better restart is the second (lower F), the tied arm's the first."""
    (tmp_path / "cells").mkdir()
    for draw in draws:
        for pattern, dose in LANGUAGES:
            for arm in ("tied", "untied"):
                base = 1.0 + 0.01 * draw
                ce = [base + price(pattern, dose, draw), base + 0.5] if arm == "tied" else [
                    base + 0.5, base]
                record = {"language": {"k": 16, "pattern": pattern, "dose": dose, "draw": draw},
                          "d": d, "arm": arm, "bayes": 0.9, "cross_entropy": ce,
                          "objective": [c + 0.1 for c in ce], "grad_norm": [1e-3, 1e-1],
                          "drift": [1e-5, 1e-3], "start_utc": "2026-12-08T00:00:00+00:00",
                          "commit": "0" * 40, "dirty": False}
                name = f"{pattern}-{dose}-{draw}-{arm}.json"
                (tmp_path / "cells" / name).write_text(json.dumps(record))
    return tmp_path


def test_the_contrasts_are_the_declared_differences(tmp_path):
    rng = np.random.default_rng(0)
    table = {(p, dose, draw): rng.normal(0, 0.01) for p, dose in LANGUAGES for draw in range(5)}
    rows = {r["contrast"]: r for r in analyse.analyse(analyse.load(planted(
        tmp_path, lambda p, dose, draw: table[p, dose, draw])))}

    def by_hand(f):
        return np.array([f(lambda p, dose: table[p, dose, draw]) for draw in range(5)])

    a_equal = by_hand(lambda q: q("equal", 1.0) - q("equal", 0.0))
    a_ratio = by_hand(lambda q: q("ratio", 0.0) - q("ratio", 1.0))
    slope = by_hand(lambda q: np.polyfit([0, 0.25, 0.5, 1], [q("ratio", x) for x in
                                                            (0, 0.25, 0.5, 1)], 1)[0])
    for name, values in (("A_equal", a_equal), ("A_ratio", a_ratio),
                         ("B_ratio", a_equal + a_ratio), ("C_slope", slope)):
        row = rows[name]
        assert row["mean"] == pytest.approx(values.mean(), abs=1e-12)
        assert row["p"] == pytest.approx(stats.ttest_1samp(values, 0.0).pvalue)
        low, high = stats.t.interval(0.95, 4, values.mean(), stats.sem(values))
        assert (row["lo"], row["hi"]) == (pytest.approx(low), pytest.approx(high))
    assert {r["family"] for r in rows.values()} == {"A", "B", "C"}


def test_an_effect_inside_the_margin_is_declared_equivalent_and_one_outside_is_not(tmp_path):
    rng = np.random.default_rng(1)
    noise = {(p, dose, draw): rng.normal(0, 0.0005) for p, dose in LANGUAGES for draw in range(5)}

    def price(p, dose, draw):  # the sem-only ratio violation costs 0.02; the rest nothing
        return (0.02 if (p, dose) == ("ratio", 0.0) else 0.0) + noise[p, dose, draw]

    rows = {r["contrast"]: r for r in analyse.analyse(analyse.load(planted(tmp_path, price)))}
    assert rows["A_constant"]["p_tost_holm"] < 0.05  # 0 within noise of 0.0007: equivalent
    assert rows["A_ratio"]["mean"] == pytest.approx(0.02, abs=0.002)
    assert rows["A_ratio"]["p_tost"] > 0.5 and rows["A_ratio"]["p_holm"] < 0.05
    assert rows["C_step"]["mean"] == pytest.approx(-0.02, abs=0.002)


def test_holm_matches_the_step_down_definition():
    p = [0.04, 0.001, 0.03, 0.2]
    # sorted 0.001, 0.03, 0.04, 0.2 -> x4, x3, x2, x1 = 0.004, 0.09, 0.08, 0.2; running maximum
    assert analyse.holm(p) == pytest.approx([0.09, 0.004, 0.09, 0.2])
