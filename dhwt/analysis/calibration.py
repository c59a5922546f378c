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
it. A single model is compared with each level's 95% *prediction*
interval (where one more seed of that level would fall), not with the interval of the level's
mean: the reading is about one model, and seeds of one level spread widely. Levels whose
interval holds the excess are the ones the calibration cannot tell apart from it; several of
them, at very different violations, mean the overlap does not pin the violation down, and the
advice says so rather than choosing. The calibration comes from tiny vocabularies and models
(tens of tokens, d_model 16) at one k and one metric; the text says that too.

Only a model near the calibration's (vocabulary and width within a factor NEAR of its own) is
placed on it. A model far from it, or of unknown size, is not: its excess is not read as a
synthetic violation level, and no price of tying measured on the synthetic languages is attached
to it; instead the prices of tying measured on different footing (the synthetic languages,
PRICES_ELSEWHERE) are shown side by side, since they disagree about 500-fold. Where tying does
cost on synthetic languages (a width too small for the language), the overlap was measured
against that price and did not predict it; every reading on the calibration says so.
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
#: Prices of tying measured away from the synthetic calibration: (where, price).
PRICES_ELSEWHERE = (
    ("WikiText-2, bpe:2048, d_model 64 (experiments/tying_wikitext, 3 seeds)",
     "+0.19 nats per valid token"),
    ("synthetic languages where the width limits the model (experiments/tying_capacity, V "
     "13-82, d_model 2-16, 6 seeds)", "0 to +0.4 nats, which the overlap did not predict"),
)
#: What the overlap says about a price where tying has one (experiments/dh_calibration,
#: capacity.md): appended to every reading on the calibration.
PRICE_NOT_PREDICTED = ("where tying does cost on synthetic languages (experiments/tying_capacity, "
                       "0 to +0.4 nats) the overlap did not predict the price: at k 3 / cos a 95% "
                       "prediction interval of ±0.24 nats, Spearman +0.13 over 612 models")


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

    @property
    def label(self) -> str:
        knob = self.knob or self.family
        return f"violation {self.violation:.2f}" + (f" ({knob})" if knob else "")


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

    def far(self, vocab: int | None, width: int | None = None) -> str | None:
        """Why a model of `vocab` rows (and `width` columns, where known) is too far from this
        calibration to be read on it, or None when it is near (within a factor NEAR).

        Examples:
            >>> table = CalibrationTable(10, "ip", 34, "pi95", (), d_model=16)
            >>> table.far(40, 16) is None, table.far(2048)
            (True, "vocabulary 2048 against the calibration's 34")
        """
        if vocab is None:
            return "its vocabulary size is not known"
        if not 1 / NEAR <= vocab / self.V <= NEAR:
            return f"vocabulary {vocab} against the calibration's {self.V}"
        if width is not None and self.d_model is not None and not (
                1 / NEAR <= width / self.d_model <= NEAR):
            return f"d_model {width} against the calibration's {self.d_model}"
        return None


@dataclass(frozen=True)
class Reading:
    """Where one model's excess falls in a calibration.

    place: "inside" (within at least one level's interval), "between" (inside none, between the
    lowest and the highest interval), "below" or "above" all of them, or "far" (the model is far
    from the calibration's: not placed, levels empty). levels: the levels whose interval holds
    the excess ("inside"), else the nearest level on each side ("between") or the nearest one
    ("below", "above"). text: one line of advice that states its uncertainty."""

    overlap: float
    chance: float
    excess: float
    place: str
    levels: tuple[CalibrationLevel, ...]
    text: str

    @property
    def violation_range(self) -> tuple[float, float]:
        """The smallest and largest violation among `levels` (nan where none: "far")."""
        values = [level.violation for level in self.levels]
        return (min(values), max(values)) if values else (float("nan"), float("nan"))


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
    calibration's (CalibrationTable.far) is not placed ("far"): the text gives its excess, why
    the calibration does not apply, and the prices of tying measured on different footing side by
    side, attaching none. k, metric: how the overlap was measured, checked against the table
    when given (a reading at another k or metric has another scale). The advice names the levels
    the excess is consistent with, their violations and, where measured, the price of tying they
    showed; it says when the calibration cannot tell them apart and that it comes from small
    synthetic languages.

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
    reason = table.far(vocab, width)
    if reason is not None:
        return Reading(overlap=float(overlap), chance=float(chance), excess=excess, place="far",
                       levels=(), text=_far_text(excess, reason, table))
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
                   levels=chosen, text=_text(excess, place, chosen, table))


def _text(excess: float, place: str, levels: tuple[CalibrationLevel, ...],
          table: CalibrationTable) -> str:
    head = f"excess over chance {excess:.2f} (k {table.k}, {table.metric})"
    span = _span(levels)
    if place == "inside" and len({lv.violation for lv in levels}) == 1:
        where = f"consistent with calibrated {levels[0].label}"
    elif place == "inside":
        where = (f"consistent with {len(levels)} calibrated levels spanning violation {span}: "
                 "the overlap does not tell them apart")
    elif place == "between":
        where = f"between calibrated {levels[0].label} and {levels[1].label}"
    else:
        side = "above" if place == "above" else "below"
        where = (f"{side} every calibrated level (nearest: {levels[0].label}); the "
                 "calibration does not cover it")
    prices = sorted({f"{lv.price:+.4f}" for lv in levels if lv.price is not None}, key=float)
    price = ("" if not prices else
             f"; price of tying measured there {prices[0]} nats" if len(prices) == 1 else
             f"; price of tying measured there {prices[0]} to {prices[-1]} nats")
    n = min(lv.n_seeds for lv in levels)
    return (f"{head}: {where}{price} (95% {_INTERVAL_WORDS[table.interval]}, {n}+ seeds a "
            f"level; calibrated on small synthetic languages, V {table.V}, not real models); "
            f"{PRICE_NOT_PREDICTED}")


def _far_text(excess: float, reason: str, table: CalibrationTable) -> str:
    prices = sorted(lv.price for lv in table.levels if lv.price is not None)
    synthetic = ("" if not prices else
                 f"{prices[0]:+.4f} to {prices[-1]:+.4f} nats on the calibration's synthetic "
                 f"languages (V {table.V})")
    measured = [synthetic] if synthetic else []
    measured += [f"{price} on {where}" for where, price in PRICES_ELSEWHERE]
    width = f", d_model {table.d_model}" if table.d_model is not None else ""
    return (f"excess over chance {excess:.2f} (k {table.k}, {table.metric}); not read on the "
            f"calibration (small synthetic languages, V {table.V}{width}): this model is far "
            f"from it ({reason}), so no violation level and no price of tying is read for it; "
            f"prices of tying measured elsewhere disagree: {'; '.join(measured)}")


_INTERVAL_WORDS = {"pi95": "prediction intervals of one model", "ci95": "intervals of the mean"}


def _span(levels: tuple[CalibrationLevel, ...]) -> str:
    low, high = min(lv.violation for lv in levels), max(lv.violation for lv in levels)
    return f"{low:.2f}" if low == high else f"{low:.2f}-{high:.2f}"


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
