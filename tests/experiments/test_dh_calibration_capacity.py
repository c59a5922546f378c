"""experiments/dh_calibration/capacity.py: the price fits, their prediction intervals and the
held-out folds of the calibration re-fit on the capacity grid."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from scipy import stats

HERE = Path(__file__).parents[2] / "experiments" / "dh_calibration"
spec = importlib.util.spec_from_file_location("dh_calibration_capacity", HERE / "capacity.py")
capacity = importlib.util.module_from_spec(spec)
spec.loader.exec_module(capacity)


def rows(price_of, n=40, seed=0):
    """Members of two kinds and two K whose price is price_of(excess, ratio) plus noise."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k, d = (4, 16)[i % 2], (2, 4, 8, 16)[i // 4 % 4]
        excess, ratio = rng.uniform(0, 1), k / d
        out.append({"language": ("sem-clm", "cnd-clm")[i // 2 % 2], "k": k, "d": d,
                    "decay": 0.1, "bias": False, "seed": i, "ratio": ratio,
                    "excess_k3_cos": excess,
                    "price": price_of(excess, ratio) + rng.normal(0, 0.01)})
    return out


def test_the_prediction_interval_is_the_textbook_one():
    data = rows(lambda e, r: 0.1 + 0.5 * e)
    model = capacity.fit(data, ("excess",), "excess_k3_cos")
    x = np.array([r["excess_k3_cos"] for r in data])
    y = np.array([r["price"] for r in data])
    result = stats.linregress(x, y)
    assert np.allclose(model["beta"], [result.intercept, result.slope])
    new = [{**data[0], "excess_k3_cos": 0.3}]
    mean, half = capacity.predict(model, new, "excess_k3_cos")
    s = np.sqrt(np.sum((y - result.intercept - result.slope * x) ** 2) / (len(y) - 2))
    se = s * np.sqrt(1 + 1 / len(x) + (0.3 - x.mean()) ** 2 / np.sum((x - x.mean()) ** 2))
    assert np.isclose(mean[0], result.intercept + 0.3 * result.slope)
    assert np.isclose(half[0], stats.t.ppf(0.975, len(x) - 2) * se)


def test_the_folds_hold_out_one_kind_or_one_k_and_train_on_the_rest():
    data = rows(lambda e, r: 0.0)
    folds = capacity.folds(data)
    assert [(scheme, name) for scheme, name, _, _ in folds] == [
        ("kind", "language cnd-clm"), ("kind", "language sem-clm"), ("K", "k 4"), ("K", "k 16")]
    for _, name, train, held in folds:
        assert len(train) + len(held) == len(data)
        key, value = name.split(" ")
        assert all(str(r[key]) == value for r in held)
        assert not any(str(r[key]) == value for r in train)


def test_an_overlap_that_sets_the_price_beats_the_null_and_one_that_does_not_fails():
    setting = capacity.validate(rows(lambda e, r: 0.2 * e), "excess_k3_cos")
    assert all(v["mae_overlap"] < v["mae_null"] / 2 for v in setting)
    capacity_only = capacity.validate(rows(lambda e, r: 0.02 * r), "excess_k3_cos")
    assert all(v["mae_capacity"] < v["mae_overlap"] for v in capacity_only if v["scheme"] == "kind")
