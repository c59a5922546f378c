"""Read an untied model's DH diagnostic against a calibration measured on synthetic languages.

The DH diagnostic of one trained untied model is the KNN overlap |N_in ∩ N_out| / k between its
input and its output embedding rows, beside a chance level (norm-matched random directions) and
the excess over chance, (overlap - chance) / (1 - chance). On its own that number has no scale:
what excess does a model show where the distributional hypothesis holds, and where it is violated
by a known amount? experiments/dh_calibration answers this on small synthetic languages whose
exact ~sem and ~cnd relations are known (violation = 1 - Jaccard of the two pair sets): per
violation level it trains several seeds of an untied model and records the excess of each.

This module reads that table (PACKAGED, dh_calibration.json beside this file, written by
experiments/dh_calibration/calibrate.py; or any file by path) and places one model's excess in
it (a Reading; dhwt.report.dh_reading_report words it). A single model is compared with each
level's 95% *prediction* interval (where one more seed of that level would fall), not with the
interval of the level's mean: the reading is about one model, and seeds of one level spread
widely. Levels whose interval holds the excess are the ones the calibration cannot tell apart
from it; several of them, at very different violations, mean the overlap does not pin the
violation down, and the reading names them all rather than choosing. The calibration comes from
tiny vocabularies and models (tens of tokens, d_model 16) at one k and one metric.

Only a model near the calibration's (vocabulary and width within a factor NEAR of its own) is
placed on it. A model far from it, or of unknown size, is not (place "far"): its excess is not
read as a synthetic violation level, and no price of tying measured on the synthetic languages
is attached to it; the report shows instead the prices of tying measured on different footing
(dhwt.analysis.dh_reading_result.findings), which disagree about 500-fold.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from dhwt.analysis.knn_curves import excess_over_chance
from dhwt.errors import DhwtError

#: The calibration measured by experiments/dh_calibration, shipped with the package.
PACKAGED = Path(__file__).with_name("dh_calibration.json")
#: Which interval of a level a single model is compared with (see the module doc).
INTERVALS = ("pi95", "ci95")
_NEEDED = ("violation", "n_seeds", "k", "metric", "V", "excess_mean")
#: A model whose vocabulary or width is more than this factor from the calibration's is far
#: from it: not placed on its violation scale, and given none of its prices.
NEAR = 4.0
@dataclass(frozen=True)
class CalibrationLevel:
    """One calibrated language: its exact violation and the excess its untied models showed.

    low, high: the interval of the excess a single model is compared with (by default the 95%
    prediction interval over seeds); price: mean tied-minus-untied excess loss (nats), None
    when not measured."""

    family: str
    knob: str
    violation: float
    n_seeds: int
    excess_mean: float
    low: float
    high: float
    chance_mean: float | None = None
    price: float | None = None


@dataclass(frozen=True)
class CalibrationTable:
    """The levels of one calibration at one (k, metric), sorted by excess_mean.

    V: vocabulary size the calibration models had; interval: which interval low/high are;
    source: where it was read from (for messages); d_model: the calibration models' width,
    where the document records it (settings.model.d_model)."""

    k: int
    metric: str
    V: int
    interval: str
    levels: tuple[CalibrationLevel, ...]
    source: str = "calibration"
    d_model: int | None = None

    def far(self, vocab: int | None, width: int | None = None) -> Far | None:
        """How a model of `vocab` rows (and `width` columns, where known) is too far from this
        calibration to be read on it, or None when it is near (within a factor NEAR).

        Examples:
            >>> table = CalibrationTable(10, "ip", 34, "pi95", (), d_model=16)
            >>> table.far(40, 16) is None, table.far(2048)
            (True, Far(size='vocabulary', model=2048, calibration=34))
        """
        if vocab is None:
            return Far("vocabulary", None, self.V)
        if not 1 / NEAR <= vocab / self.V <= NEAR:
            return Far("vocabulary", vocab, self.V)
        if width is not None and self.d_model is not None and not (
                1 / NEAR <= width / self.d_model <= NEAR):
            return Far("d_model", width, self.d_model)
        return None


@dataclass(frozen=True)
class Far:
    """Why a model is not read on a calibration: its `size` ("vocabulary" or "d_model") is
    `model` (None: not known) against the calibration's `calibration`, beyond a factor NEAR."""

    size: str
    model: int | None
    calibration: int


@dataclass(frozen=True)
class Reading:
    """Where one model's excess falls in a calibration.

    place: "inside" (within at least one level's interval), "between" (inside none, between the
    lowest and the highest interval), "below" or "above" all of them, or "far" (the model is far
    from the calibration's: not placed, levels empty). levels: the levels whose interval holds
    the excess ("inside"), else the nearest level on each side ("between") or the nearest one
    ("below", "above"). table: the calibration it was placed on; far: why it was not (place
    "far"). dhwt.report.dh_reading_report words it."""

    overlap: float
    chance: float
    excess: float
    place: str
    levels: tuple[CalibrationLevel, ...]
    table: CalibrationTable
    far: Far | None = None


@cache
def packaged(k: int, metric: str) -> CalibrationTable | None:
    """The shipped calibration at (k, metric), or None when it holds no level there."""
    try:
        return load_calibration(PACKAGED, k=k, metric=metric)
    except DhwtError:
        return None


def load_calibration(path: str | Path, *, k: int = 10, metric: str = "ip",
                     interval: str = "pi95") -> CalibrationTable:
    """The calibration table at (k, metric) from a calibration.json file; DhwtError (one line)
    when the file is missing, not JSON, or malformed."""
    path = Path(path)
    try:
        document = json.loads(path.read_text("utf-8"))
    except OSError as error:
        raise DhwtError(f"cannot read the calibration {path}: {error.strerror or error}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DhwtError(f"the calibration {path} is not JSON: {error}".splitlines()[0]) from None
    return calibration_table(document, k=k, metric=metric, interval=interval, source=str(path))


def calibration_table(document: object, *, k: int = 10, metric: str = "ip",
                      interval: str = "pi95", source: str = "calibration") -> CalibrationTable:
    """The levels of `document` (calibration.json's content: {"levels": [...]}, each level with
    violation, n_seeds, k, metric, V, excess_mean and excess_<interval> = [low, high]) at
    (k, metric), checked.

    Examples:
        >>> doc = {"levels": [
        ...     {"violation": 0.0, "n_seeds": 8, "k": 10, "metric": "ip", "V": 34,
        ...      "excess_mean": 0.6, "excess_pi95": [0.5, 0.7]},
        ...     {"violation": 0.5, "n_seeds": 8, "k": 10, "metric": "ip", "V": 34,
        ...      "excess_mean": 0.3, "excess_pi95": [0.2, 0.4]}]}
        >>> table = calibration_table(doc)
        >>> [level.violation for level in table.levels], table.V
        ([0.5, 0.0], 34)
        >>> calibration_table(doc, k=3)
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: calibration has no level at k 3, metric ip (it holds k 10 / ip)
    """
    if interval not in INTERVALS:
        raise DhwtError(f"interval must be one of {', '.join(INTERVALS)}, got {interval!r}")
    levels = document.get("levels") if isinstance(document, dict) else None
    if not isinstance(levels, list) or not levels:
        raise DhwtError(f"{source} is not a calibration table: it needs a non-empty list "
                        "'levels'")
    held = sorted({(entry.get("k"), entry.get("metric")) for entry in levels
                   if isinstance(entry, dict)}, key=str)
    chosen = []
    for n, entry in enumerate(levels):
        where = f"{source} level {n}"
        if not isinstance(entry, dict):
            raise DhwtError(f"{where} is not an object")
        missing = [key for key in (*_NEEDED, f"excess_{interval}") if key not in entry]
        if missing:
            raise DhwtError(f"{where} lacks {', '.join(missing)}")
        if entry["k"] == k and entry["metric"] == metric:
            chosen.append(_level(entry, interval, where))
    if not chosen:
        holds = ", ".join(f"k {a} / {b}" for a, b in held)
        raise DhwtError(f"{source} has no level at k {k}, metric {metric} (it holds {holds})")
    sizes = {int(entry["V"]) for entry in levels if entry.get("k") == k
             and entry.get("metric") == metric}
    if len(sizes) > 1:
        raise DhwtError(f"{source} mixes vocabulary sizes {sorted(sizes)} at k {k} / {metric}")
    settings = document.get("settings")
    model = settings.get("model") if isinstance(settings, dict) else None
    width = model.get("d_model") if isinstance(model, dict) else None
    return CalibrationTable(k=k, metric=metric, V=sizes.pop(), interval=interval,
                            levels=tuple(sorted(chosen, key=lambda x: x.excess_mean)),
                            source=source,
                            d_model=width if isinstance(width, int) and width > 0 else None)


def calibrated_reading(overlap: float, chance: float, table: CalibrationTable, *,
                       vocab: int | None, width: int | None = None, k: int | None = None,
                       metric: str | None = None) -> Reading:
    """Place one untied model's input-vs-output overlap (and its chance level) in `table`.

    vocab, width: the model's vocabulary size and d_model (None: unknown). A model far from the
    calibration's (CalibrationTable.far) is not placed ("far", with why). k, metric: how the
    overlap was measured, checked against the table when given (a reading at another k or metric
    has another scale). The levels are those the excess is consistent with (sorted by
    violation), else the nearest on each side.

    Examples:
        >>> doc = {"levels": [
        ...     {"violation": 0.0, "n_seeds": 8, "k": 10, "metric": "ip", "V": 34,
        ...      "excess_mean": 0.6, "excess_pi95": [0.5, 0.7]},
        ...     {"violation": 0.5, "n_seeds": 8, "k": 10, "metric": "ip", "V": 34,
        ...      "excess_mean": 0.3, "excess_pi95": [0.2, 0.4]}]}
        >>> table = calibration_table(doc)
        >>> reading = calibrated_reading(0.65, 0.125, table, vocab=34)  # excess 0.525 / 0.875
        >>> round(reading.excess, 3), reading.place, [lv.violation for lv in reading.levels]
        (0.6, 'inside', [0.0])
        >>> calibrated_reading(0.45, 0.0, table, vocab=34).place  # between 0.4 and 0.5
        'between'
        >>> calibrated_reading(0.45, 0.0, table, vocab=50257).place  # GPT-2's vocabulary
        'far'
    """
    if k is not None and k != table.k or metric is not None and metric != table.metric:
        raise DhwtError(f"the calibration ({table.source}) is for k {table.k} / {table.metric}; "
                        f"this overlap was measured at k {k} / {metric}")
    excess = excess_over_chance(float(overlap), float(chance))
    if not math.isfinite(excess):
        raise DhwtError(f"no excess over chance from overlap {overlap!r} and chance {chance!r}")
    far = table.far(vocab, width)
    if far is not None:
        return Reading(overlap=float(overlap), chance=float(chance), excess=excess, place="far",
                       levels=(), table=table, far=far)
    levels = table.levels
    inside = tuple(level for level in levels if level.low <= excess <= level.high)
    if inside:
        place, chosen = "inside", inside
    elif excess > max(level.high for level in levels):
        place, chosen = "above", (max(levels, key=lambda level: level.high),)
    elif excess < min(level.low for level in levels):
        place, chosen = "below", (min(levels, key=lambda level: level.low),)
    else:
        below = max((lv for lv in levels if lv.high < excess), key=lambda lv: lv.high)
        above = min((lv for lv in levels if lv.low > excess), key=lambda lv: lv.low)
        place, chosen = "between", (below, above)
    chosen = tuple(sorted(chosen, key=lambda level: level.violation))
    return Reading(overlap=float(overlap), chance=float(chance), excess=excess, place=place,
                   levels=chosen, table=table)


def _level(entry: dict, interval: str, where: str) -> CalibrationLevel:
    bounds = entry[f"excess_{interval}"]
    if (not isinstance(bounds, (list, tuple)) or len(bounds) != 2
            or not all(_finite(b) for b in bounds)):
        raise DhwtError(f"{where}: excess_{interval} must be [low, high] of two finite numbers, "
                        f"got {bounds!r}")
    low, high = float(bounds[0]), float(bounds[1])
    for key in ("violation", "excess_mean"):
        if not _finite(entry[key]):
            raise DhwtError(f"{where}: {key} must be a finite number, got {entry[key]!r}")
    if not 0.0 <= float(entry["violation"]) <= 1.0:
        raise DhwtError(f"{where}: violation must lie in [0, 1], got {entry['violation']!r}")
    if not low <= float(entry["excess_mean"]) <= high:
        raise DhwtError(f"{where}: excess_{interval} [{low}, {high}] does not hold excess_mean "
                        f"{entry['excess_mean']}")
    seeds = entry["n_seeds"]
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise DhwtError(f"{where}: n_seeds must be a positive integer, got {seeds!r}")
    price = entry.get("price_mean")
    return CalibrationLevel(
        family=str(entry.get("family", "")), knob=str(entry.get("knob", "")),
        violation=float(entry["violation"]), n_seeds=seeds,
        excess_mean=float(entry["excess_mean"]), low=low, high=high,
        chance_mean=float(entry["chance_mean"]) if _finite(entry.get("chance_mean")) else None,
        price=float(price) if _finite(price) else None)


def _finite(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))
