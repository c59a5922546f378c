"""The DH reading in words, for `dhwt analyze` and `dhwt diagnose`: what an input/output KNN
match of one untied model supports (decided in dhwt.analysis.dh_reading_result, placed on the
calibration by dhwt.analysis.calibration), and the measured findings it cites
(dhwt/analysis/dh_findings.json, each with the study that measured it)."""

from __future__ import annotations

from typing import Any

from dhwt.analysis.calibration import CalibrationLevel, CalibrationTable, Far, Reading
from dhwt.analysis.dh_reading_result import COPY_RESIDUE, DhReading, findings
from dhwt.config.schedule import TieHistory

_INTERVAL_WORDS = {"pi95": "prediction intervals of one model", "ci95": "intervals of the mean"}
_AGREEMENT = {"largely": "largely agree", "partly": "partly agree",
              "at-chance": "mostly disagree (at chance level)",
              "far-from-identity": "mostly disagree (far from identity)"}


def reading_text(reading: DhReading, score: str = "overlap") -> str:
    """One line on what the reading supports: withheld right after an untie, else how far the
    neighbourhoods agree, what the calibration supports and, when the member was untied from a
    copy, the flag.

    Examples:
        >>> from dhwt.analysis.dh_reading_result import dh_reading
        >>> reading_text(dh_reading(0.9, 0.02))[:88]
        'input and output neighbourhoods share 90.0% (overlap) vs chance 2.0%: they largely agree'
        >>> "not calibrated at k 5 / cos" in reading_text(dh_reading(0.9, 0.02, k=5, metric="cos"))
        True
        >>> reading_text(dh_reading(0.9, 0.02, history=TieHistory(40, 20), residue=0.1))[:60]
        'withheld: untied at step 20, 20 steps before this snapshot, '
    """
    if reading.withheld and reading.history is not None and reading.residue is not None:
        return (f"withheld: {describe(reading.history)}, the two matrices still differ by only "
                f"{reading.residue:.2f} of the output matrix (< {COPY_RESIDUE}): their "
                "neighbourhoods agree because they were one copy, not because of the data; read "
                "a later snapshot")
    flag = copy_flag(reading.history) if reading.history is not None else ""
    if reading.agreement is None:
        return "no reading (no untied snapshot)" + flag
    head = (f"input and output neighbourhoods share {100 * reading.overlap:.1f}% ({score}) vs "
            f"chance {100 * reading.chance:.1f}%")
    words = _AGREEMENT.get(reading.agreement) or (
        f"mostly disagree ({reading.overlap / reading.chance:.0f}x chance but far from identity)")
    if reading.calibrated is None:
        where = f" at k {reading.k} / {reading.metric}" if reading.k is not None else ""
        calibrated = f"what this implies for DH and tying is not calibrated{where}"
    else:
        calibrated = calibration_text(reading.calibrated)
    return f"{head}: they {words}; {calibrated}; a tied run decides{flag}"


def calibration_text(reading: Reading) -> str:
    """Where one model's excess falls on the calibration, in one line that states its
    uncertainty: the levels it is consistent with (their violations, and the price of tying
    measured there), or, for a model far from the calibration's, why it is not read and the
    prices of tying measured elsewhere side by side."""
    table, excess = reading.table, reading.excess
    if reading.far is not None:
        return _far_text(excess, reading.far, table)
    head = f"excess over chance {excess:.2f} (k {table.k}, {table.metric})"
    levels, place = reading.levels, reading.place
    if place == "inside" and len({lv.violation for lv in levels}) == 1:
        where = f"consistent with calibrated {_label(levels[0])}"
    elif place == "inside":
        where = (f"consistent with {len(levels)} calibrated levels spanning violation "
                 f"{_span(levels)}: the overlap does not tell them apart")
    elif place == "between":
        where = f"between calibrated {_label(levels[0])} and {_label(levels[1])}"
    else:
        where = (f"{place} every calibrated level (nearest: {_label(levels[0])}); the "
                 "calibration does not cover it")
    prices = sorted({f"{lv.price:+.4f}" for lv in levels if lv.price is not None}, key=float)
    price = ("" if not prices else
             f"; price of tying measured there {prices[0]} nats" if len(prices) == 1 else
             f"; price of tying measured there {prices[0]} to {prices[-1]} nats")
    n = min(lv.n_seeds for lv in levels)
    return (f"{head}: {where}{price} (95% {_INTERVAL_WORDS[table.interval]}, {n}+ seeds a "
            f"level; calibrated on small synthetic languages, V {table.V}, not real models); "
            f"{price_not_predicted()}")


def price_not_predicted() -> str:
    """What the overlap says about a price where tying has one (dh_findings.json's
    overlap_vs_price): appended to every reading on the calibration."""
    found = findings()["overlap_vs_price"]
    prices = findings()["prices"][found["prices"]]
    return (f"where tying does cost on synthetic languages ({prices['study']}, "
            f"{_range(prices['price'])} {prices['unit']}) the overlap did not predict the price: "
            f"at k {found['k']} / {found['metric']} a 95% prediction interval of "
            f"±{found['pi95_nats']:g} nats, Spearman {found['spearman']:+.2f} over "
            f"{found['models']} models")


def prices_elsewhere() -> list[str]:
    """The prices of tying measured away from the synthetic calibration (dh_findings.json's
    prices), each with where it was measured."""
    return [_price(entry) for entry in findings()["prices"].values()]


def _price(entry: dict[str, Any]) -> str:
    predicted = ", which the overlap did not predict" if entry["overlap_predicted"] is False \
        else ""
    settings = f", {entry['settings']}" if entry["settings"] else ""
    return (f"{_range(entry['price'])} {entry['unit']}{predicted} on {entry['data']} "
            f"({entry['study']}{settings}, {entry['seeds']} seeds)")


def _far_text(excess: float, far: Far, table: CalibrationTable) -> str:
    reason = (f"its {far.size} size is not known" if far.model is None else
              f"{far.size} {far.model} against the calibration's {far.calibration}")
    prices = sorted(lv.price for lv in table.levels if lv.price is not None)
    synthetic = ("" if not prices else
                 f"{prices[0]:+.4f} to {prices[-1]:+.4f} nats on the calibration's synthetic "
                 f"languages (V {table.V})")
    measured = [synthetic] if synthetic else []
    measured += prices_elsewhere()
    width = f", d_model {table.d_model}" if table.d_model is not None else ""
    return (f"excess over chance {excess:.2f} (k {table.k}, {table.metric}); not read "
            f"on the calibration (small synthetic languages, V {table.V}{width}): this model is "
            f"far from it ({reason}), so no violation level and no price of tying is read for "
            f"it; prices of tying measured elsewhere disagree: {'; '.join(measured)}")


def _label(level: CalibrationLevel) -> str:
    knob = level.knob or level.family
    return f"violation {level.violation:.2f}" + (f" ({knob})" if knob else "")


def _span(levels: tuple[CalibrationLevel, ...]) -> str:
    low, high = min(lv.violation for lv in levels), max(lv.violation for lv in levels)
    return f"{low:.2f}" if low == high else f"{low:.2f}-{high:.2f}"


def _range(price: list[float]) -> str:
    """[low, high] nats as "+0.19" (one value) or "0 to +0.4"."""
    low, high = (f"{p:+g}" if p else "0" for p in price)
    return low if low == high else f"{low} to {high}"


def describe(history: TieHistory) -> str:
    """How the member came to be untied, in words.

    Examples:
        >>> describe(TieHistory(step=40, untied_at=20))
        'untied at step 20, 20 steps before this snapshot'
    """
    if history.untied_at is None:
        return "untied from the start (independent matrices)"
    return f"untied at step {history.untied_at}, {history.since} steps before this snapshot"


def copy_flag(history: TieHistory) -> str:
    """The warning a reading carries when the member was untied from a copy ('' otherwise):
    how much the copy inflates the overlap (dh_findings.json's copy_inflation).

    Examples:
        >>> copy_flag(TieHistory(step=1600, untied_at=None))
        ''
    """
    if history.untied_at is None:
        return ""
    found = findings()["copy_inflation"]
    times, residue = (f"{a:g}-{b:g}" for a, b in (found["times"], found["residue"]))
    return (f" [flag: {describe(history)}; the copy still inflates the overlap ({times}x an "
            f"independent start at a residue of {residue} on {found['data']}): an upper bound "
            "on what the data alone gives]")
