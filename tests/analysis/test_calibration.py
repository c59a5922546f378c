"""Reading one model's DH diagnostic against a calibration table (dhwt.analysis.calibration),
worded by dhwt.report.dh_reading_report."""

import json

import pytest

from dhwt.analysis.calibration import (calibrated_reading, calibration_table,
                                       load_calibration)
from dhwt.errors import DhwtError
from dhwt.report.dh_reading_report import calibration_text


def level(violation, mean, low, high, *, k=10, metric="ip", V=34, price=None, seeds=8):
    entry = {"family": "skew", "knob": f"j = {int(8 * violation)}", "violation": violation,
             "n_seeds": seeds, "k": k, "metric": metric, "V": V, "excess_mean": mean,
             "excess_pi95": [low, high], "excess_ci95": [mean - 0.01, mean + 0.01],
             "chance_mean": 0.3}
    if price is not None:
        entry["price_mean"] = price
    return entry


#: Three separated levels (excess falls as the violation grows), plus another k and metric.
DOC = {"levels": [level(0.0, 0.60, 0.50, 0.70, price=0.0001),
                  level(0.5, 0.30, 0.20, 0.40, price=0.002),
                  level(1.0, 0.10, 0.05, 0.15, price=0.01),
                  level(0.0, 0.90, 0.85, 0.95, k=3, metric="cos")]}


def excess_to_overlap(excess, chance=0.2):
    """The overlap whose excess over `chance` is `excess`."""
    return chance + excess * (1 - chance)


@pytest.fixture
def table():
    return calibration_table(DOC)


def test_an_excess_inside_one_interval_picks_that_level(table):
    reading = calibrated_reading(excess_to_overlap(0.33), 0.2, table, vocab=34)
    assert reading.excess == pytest.approx(0.33)
    assert reading.place == "inside"
    assert [lv.violation for lv in reading.levels] == [0.5]
    assert "violation 0.50" in calibration_text(reading)
    assert "synthetic" in calibration_text(reading) and "+0.0020 nats" in calibration_text(reading)


def test_an_excess_between_levels_names_both_neighbours(table):
    reading = calibrated_reading(excess_to_overlap(0.45), 0.2, table, vocab=34)
    assert reading.place == "between"
    assert [lv.violation for lv in reading.levels] == [0.0, 0.5]
    assert "violation 0.00" in calibration_text(reading) and "violation 0.50" in calibration_text(reading)


@pytest.mark.parametrize("excess, place, nearest", [(0.9, "above", 0.0), (0.01, "below", 1.0)])
def test_an_excess_outside_the_range_says_so(table, excess, place, nearest):
    reading = calibrated_reading(excess_to_overlap(excess), 0.2, table, vocab=34)
    assert reading.place == place
    assert [lv.violation for lv in reading.levels] == [nearest]
    assert "does not cover" in calibration_text(reading)


def test_overlapping_intervals_are_all_named_and_the_text_admits_it():
    doc = {"levels": [level(0.0, 0.26, 0.15, 0.37), level(0.5, 0.25, 0.14, 0.36),
                      level(1.0, 0.24, 0.12, 0.35)]}
    reading = calibrated_reading(excess_to_overlap(0.25), 0.2, calibration_table(doc), vocab=34)
    assert reading.place == "inside"
    assert [lv.violation for lv in reading.levels] == [0.0, 0.5, 1.0]
    assert "does not tell them apart" in calibration_text(reading) and "0.00-1.00" in calibration_text(reading)


def test_the_table_at_another_k_and_metric_is_its_own():
    table = calibration_table(DOC, k=3, metric="cos")
    assert (table.k, table.metric, len(table.levels)) == (3, "cos", 1)
    assert calibrated_reading(excess_to_overlap(0.9), 0.2, table, vocab=34).place == "inside"


def test_a_reading_at_another_k_or_metric_is_refused(table):
    with pytest.raises(DhwtError, match="k 10 / ip"):
        calibrated_reading(0.5, 0.2, table, vocab=34, k=5)
    with pytest.raises(DhwtError, match="k 10 / ip"):
        calibrated_reading(0.5, 0.2, table, vocab=34, metric="cos")
    assert calibrated_reading(0.5, 0.2, table, vocab=34, k=10, metric="ip").place in {"inside", "between"}


def test_load_calibration_reads_the_file(tmp_path, table):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(DOC))
    loaded = load_calibration(path)
    assert loaded.levels == table.levels and loaded.source == str(path)


def test_the_confidence_interval_can_be_asked_for_instead():
    table = calibration_table(DOC, interval="ci95")
    assert calibrated_reading(excess_to_overlap(0.35), 0.2, table, vocab=34).place == "between"


def broken(change):
    doc = json.loads(json.dumps(DOC))
    change(doc)
    return doc


@pytest.mark.parametrize("doc, message", [
    ([], "non-empty list 'levels'"),
    ({"levels": []}, "non-empty list 'levels'"),
    ({"levels": [3]}, "level 0 is not an object"),
    (broken(lambda d: d["levels"][1].pop("excess_pi95")), "level 1 lacks excess_pi95"),
    (broken(lambda d: d["levels"][0].pop("violation")), "lacks violation"),
    (broken(lambda d: d["levels"][0].update(excess_pi95=[0.5])), "two finite numbers"),
    (broken(lambda d: d["levels"][0].update(excess_pi95=[0.5, "x"])), "two finite numbers"),
    (broken(lambda d: d["levels"][0].update(excess_pi95=[0.7, 0.5])), "does not hold"),
    (broken(lambda d: d["levels"][0].update(violation=1.5)), "violation must lie in"),
    (broken(lambda d: d["levels"][0].update(excess_mean=float("nan"))), "finite number"),
    (broken(lambda d: d["levels"][0].update(n_seeds=0)), "n_seeds"),
    (broken(lambda d: d["levels"][0].update(V=50)), "mixes vocabulary sizes"),
    ({"levels": [level(0.0, 0.5, 0.4, 0.6, k=5)]}, "no level at k 10, metric ip"),
])
def test_malformed_tables_raise_one_line(doc, message):
    with pytest.raises(DhwtError, match=message) as caught:
        calibration_table(doc)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("content", ["{not json", b"\xff\xfe\x00"])
def test_unreadable_files_raise_one_line(tmp_path, content):
    path = tmp_path / "calibration.json"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    with pytest.raises(DhwtError, match="not JSON") as caught:
        load_calibration(path)
    assert "\n" not in str(caught.value)
    with pytest.raises(DhwtError, match="cannot read"):
        load_calibration(tmp_path / "missing.json")


def test_an_impossible_overlap_is_refused(table):
    with pytest.raises(DhwtError, match="no excess"):
        calibrated_reading(float("nan"), 0.2, table, vocab=34)
    with pytest.raises(DhwtError, match="no excess"):
        calibrated_reading(0.5, 1.0, table, vocab=34)


def test_a_bad_interval_name_is_refused():
    with pytest.raises(DhwtError, match="interval must be one of"):
        calibration_table(DOC, interval="sd")


@pytest.mark.parametrize("vocab, width, why", [
    (2048, None, "vocabulary 2048 against the calibration's 34"),   # WikiText-2, bpe:2048
    (50257, 768, "vocabulary 50257"),                                # GPT-2
    (34, 512, "d_model 512 against the calibration's 16"),
    (None, None, "vocabulary size is not known")])
def test_a_model_far_from_the_calibration_gets_no_synthetic_level_or_price(vocab, width, why):
    """The excess 0.33 lies inside the violation-0.5 level's interval, whose price is +0.0020
    nats: a model near the calibration's size gets both, a far one neither, and sees the prices
    measured on different footing side by side instead."""
    doc = {**DOC, "settings": {"model": {"d_model": 16}}}
    table = calibration_table(doc)
    assert table.d_model == 16
    near = calibrated_reading(excess_to_overlap(0.33), 0.2, table, vocab=40, width=32)
    assert near.place == "inside" and "price of tying measured there +0.0020" in calibration_text(near)
    far = calibrated_reading(excess_to_overlap(0.33), 0.2, table, vocab=vocab, width=width)
    assert far.place == "far" and far.levels == ()
    assert why in calibration_text(far)
    assert "violation 0.50" not in calibration_text(far) and "measured there" not in calibration_text(far)
    assert "+0.0001 to +0.0100 nats on the calibration's synthetic languages" in calibration_text(far)
    assert "+0.19 nats per valid token on WikiText-2" in calibration_text(far)


def test_the_shipped_reading_of_a_wikitext_model_attaches_no_synthetic_price():
    """A WikiText-like reading (bpe:2048, overlap 0.03 vs chance 0.003) once ended "price of
    tying measured there +0.0001 to +0.0003 nats", the synthetic languages' price, where tying
    cost about 0.19 nats per token on WikiText-2 itself."""
    from dhwt.analysis.dh_reading_result import dh_reading
    from dhwt.report.dh_reading_report import reading_text

    line = reading_text(dh_reading(0.03, 0.003, k=10, metric="ip", vocab=2048))
    assert "measured there" not in line and "violation 0." not in line
    assert "+0.19 nats per valid token" in line and "synthetic languages (V 34)" in line
    near = reading_text(dh_reading(0.5, 0.3, k=10, metric="ip", vocab=34))
    assert "price of tying measured there" in near


def test_a_reading_says_the_overlap_did_not_predict_a_price_where_tying_costs(table):
    near = calibrated_reading(excess_to_overlap(0.33), 0.2, table, vocab=34)
    far = calibrated_reading(excess_to_overlap(0.33), 0.2, table, vocab=50257)
    assert "did not predict the price" in calibration_text(near) and "tying_capacity" in calibration_text(near)
    assert "which the overlap did not predict" in calibration_text(far)
