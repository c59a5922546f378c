"""Small validators for grammar specs: each raises DhwtError with a one-line message that says
where in the spec the problem is, what was given, and what is allowed."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from dhwt.errors import DhwtError

#: How far a list of probabilities may sum from 1 before it is rejected (then renormalised).
SUM_TOLERANCE = 1e-6


def check_keys(table: Mapping[str, object], allowed: Iterable[str], where: str) -> None:
    """Reject keys of `table` that are not in `allowed` (typos must not pass silently)."""
    allowed = tuple(allowed)
    unknown = [key for key in table if key not in allowed]
    if unknown:
        raise DhwtError(
            f"unknown key {unknown[0]!r} in {where} (allowed: {', '.join(allowed)})"
        )


def need(table: Mapping[str, object], key: str, where: str) -> object:
    """`table[key]`, or an error saying the key is missing."""
    if key not in table:
        raise DhwtError(f"{where} needs the key {key!r}")
    return table[key]


_KINDS = {dict: "a table", list: "an array", bool: "true or false"}


def need_kind(value: object, kind: type, where: str):
    """`value` if it is a TOML table (dict), array (list) or boolean, as `kind` asks."""
    if not isinstance(value, kind):
        raise DhwtError(f"{where} must be {_KINDS[kind]}, got {_shown(value)}")
    return value


def need_str(value: object, where: str) -> str:
    """`value` as a non-empty string without whitespace (names of symbols, classes, states)."""
    if not isinstance(value, str) or not value or any(ch.isspace() for ch in value):
        raise DhwtError(f"{where} must be a non-empty name without spaces, got {_shown(value)}")
    return value


def need_int(value: object, where: str, low: int, high: int) -> int:
    """`value` as an integer in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise DhwtError(f"{where} must be an integer from {low} to {high}, got {_shown(value)}")
    return value


def need_number(value: object, where: str) -> float:
    """`value` as a finite real number (TOML integer or float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DhwtError(f"{where} must be a number, got {_shown(value)}")
    if math.isnan(value):
        raise DhwtError(f"{where} is NaN; it must be a number")
    if math.isinf(value):
        raise DhwtError(f"{where} is {value}; it must be finite")
    return float(value)


def probability(value: object, where: str) -> float:
    """`value` as a probability in (0, 1]. Zero is refused: an event that never happens is a
    symbol or transition that should not be declared at all."""
    p = need_number(value, where)
    if not 0.0 < p <= 1.0:
        raise DhwtError(f"{where} is {p!r}; probabilities must be in (0, 1] (drop an entry "
                        "instead of giving it probability 0)")
    return p


def normalised(probs: list[float], where: str) -> tuple[float, ...]:
    """Probabilities that sum to 1 within SUM_TOLERANCE, renormalised exactly."""
    total = math.fsum(probs)
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise DhwtError(
            f"{where} sum to {total:.9g}; they must sum to 1 (within {SUM_TOLERANCE:g})"
        )
    return tuple(p / total for p in probs)


def _shown(value: object) -> str:
    """A short rendering of a bad value for an error message."""
    kind = type(value).__name__.replace("dict", "table").replace("list", "array")
    text = repr(value)
    return f"{kind} {text if len(text) <= 40 else text[:37] + '...'}"
