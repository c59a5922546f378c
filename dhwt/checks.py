"""The checks of user input, each raising DhwtError with one line, in one module below every
package that needs them: numeric matrices (the KNN engine and dhwt.pretrained's readers),
configuration values ("NAME must be ..., got VALUE", with the seed and init_from notations), and
grammar specs (where in the spec the problem is, what was given, what is allowed), and the
options classes' declared constraints (scikit-learn's style: each field lists the kinds of value
it admits, check_fields checks them in `__post_init__`). Importing it imports no torch
(check_matrix takes torch on first use only), so the command line may read it.

Examples:
    >>> parse_seeds("1-3,7")
    [1, 2, 3, 7]
    >>> check_int("steps", 0, low=1)
    Traceback (most recent call last):
      ...
    dhwt.errors.DhwtError: steps must be >= 1, got 0
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields

import numpy as np

from dhwt.defaults import MASK_RULES, TWIN_KINDS
from dhwt.errors import DhwtError, brief


# -- matrices --------------------------------------------------------------------------------------

def check_matrix(x: object, name: str) -> np.ndarray:
    """x as a 2-D float array with at least two rows and finite values, or DhwtError."""
    import torch

    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.asarray(x)
    if x.ndim != 2:
        raise DhwtError(f"{name} must be a 2-D matrix (tokens x dimensions), got shape {x.shape}")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise DhwtError(f"{name} must hold numbers, got dtype {x.dtype}")
    if x.shape[0] < 2 or x.shape[1] < 1:
        raise DhwtError(f"{name} needs at least 2 rows and 1 column, got shape {x.shape}")
    # NaN propagates; torch's threads: 2 GB in a fraction of a second
    largest = largest_magnitude(x if x.dtype in (np.float32, np.float64)
                                else x.astype(np.float64))
    if not math.isfinite(largest):
        finite = np.isfinite(x).all(axis=1)
        row = int(np.flatnonzero(~finite)[0])
        raise DhwtError(f"{name} has NaN or infinite values ({int((~finite).sum())} rows, "
                        f"first row {row})")
    limit = math.sqrt(1e36 / x.shape[1])  # squaring the largest would overflow a float
    if largest > limit:
        raise DhwtError(f"{name} has values too large for float32 scores (max |value| "
                        f"{largest:.3g}, at most {limit:.3g} for {x.shape[1]} columns); scale it "
                        "down")
    return x


def largest_magnitude(x: np.ndarray) -> float:
    """max |x| of a float32 or float64 array (torch's aminmax: no temporary copy, all threads;
    NaN if x holds one). An axis read backwards (x[::-1], which torch cannot view) is read
    forwards: the order does not change the extremes."""
    import torch

    x = np.flip(x, [axis for axis, stride in enumerate(x.strides) if stride < 0])
    low, high = torch.aminmax(torch.from_numpy(x))
    return max(-float(low), float(high))


# -- configuration values -------------------------------------------------------------------------

#: The most seeds (ensemble members) one run may train. Every member writes its own metric
#: lines at each evaluation (four or more), so 100,000 members write 400,000 lines per
#: evaluation; and a seed range is counted before its seeds are listed, so "1-100000000" is
#: refused at once instead of filling memory with the list.
MAX_SEEDS = 100_000


def split_init_from(text: str) -> tuple[str, int | None]:
    """`"RUN_DIR"` or `"RUN_DIR@STEP"` -> (RUN_DIR, STEP or None)."""
    if not isinstance(text, str) or not text:
        raise DhwtError(f"init_from must be \"RUN_DIR\" or \"RUN_DIR@STEP\", got {text!r}")
    run, at, step = text.rpartition("@")
    if not at:
        return text, None
    if not run or not step.isdigit():
        raise DhwtError(f"init_from must be \"RUN_DIR\" or \"RUN_DIR@STEP\" (STEP a whole "
                        f"number), got {text!r}")
    return run, int(step)


def parse_seeds(text: str | int | list[int] | tuple[int, ...]) -> list[int]:
    """Seeds from `"42-46"` (inclusive range), `"1,2,5"`, a mix such as `"1-3,7"`, an int or a list.

    Seeds must be distinct non-negative integers: two equal seeds would train identical members.
    """
    if isinstance(text, bool):
        raise DhwtError(f"seeds must be integers or a string like '42-46' or '1,2,5', got {text!r}")
    if isinstance(text, int):
        items: list[int] = [text]
    elif isinstance(text, (list, tuple)):
        if not all(isinstance(s, int) and not isinstance(s, bool) for s in text):
            raise DhwtError(f"seeds must be a list of integers, got [{brief(text)}]")
        items = list(text)
    elif isinstance(text, str):
        ranges = []
        for part in text.replace(" ", "").split(","):
            lo, dash, hi = part.partition("-")
            if not (lo.isdigit() and (not dash or hi.isdigit())):
                raise DhwtError(
                    f"bad seeds {text!r}: {part!r} is not an integer or a range like 42-46"
                )
            if dash and int(hi) < int(lo):
                raise DhwtError(f"bad seeds {text!r}: range {part!r} runs backwards")
            ranges.append(range(int(lo), int(hi if dash else lo) + 1))
        _check_count(sum(len(r) for r in ranges), text)  # before a list of them is made
        items = [s for r in ranges for s in r]
    else:
        raise DhwtError(f"seeds must be a string like '42-46' or a list of integers, got {text!r}")
    _check_count(len(items), text)
    if not items:
        raise DhwtError("seeds must name at least one seed")
    negative = [s for s in items if s < 0]
    if negative:
        raise DhwtError(f"seeds must be non-negative, got {brief(negative, str)}")
    repeated = sorted(s for s, n in Counter(items).items() if n > 1)
    if repeated:
        raise DhwtError(f"seeds must be distinct (equal seeds train identical members), "
                        f"{brief(repeated, str)} repeated")
    return items


def _check_count(count: int, text: object) -> None:
    """DhwtError if `text` names more than MAX_SEEDS seeds."""
    if count > MAX_SEEDS:
        shown = repr(text) if isinstance(text, str) else f"[{brief(text)}]"
        raise DhwtError(f"bad seeds {shown}: {count:,} seeds, more than the {MAX_SEEDS:,} one "
                        "run may train (one ensemble member each)")


def format_seeds(seeds: list[int]) -> str:
    """The compact text form of `seeds`: consecutive runs as ranges, e.g. [42..46, 50] -> '42-46,50'."""
    parts, start = [], 0
    for i in range(1, len(seeds) + 1):
        if i == len(seeds) or seeds[i] != seeds[i - 1] + 1:
            lo, hi = seeds[start], seeds[i - 1]
            parts.append(str(lo) if lo == hi else f"{lo}-{hi}")
            start = i
    return ",".join(parts)


def check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise DhwtError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


def check_groups(name: str, value: object) -> list[list[str]]:
    """`value` as a list of groups of two or more distinct symbols, no symbol in two groups.

    >>> check_groups("symmetric_init", [["0a", "0b"], ("1a", "1b")])
    [['0a', '0b'], ['1a', '1b']]
    >>> check_groups("symmetric_init", [["0a", "0b"], ["0b", "1a"]])
    Traceback (most recent call last):
      ...
    dhwt.errors.DhwtError: symmetric_init names '0b' twice
    """
    shape = f"{name} must be a list of groups of two or more symbols, e.g. [[\"0a\", \"0b\"]], got "
    if not isinstance(value, (list, tuple)):
        raise DhwtError(shape + repr(value))
    groups = []
    for group in value:
        if (not isinstance(group, (list, tuple)) or len(group) < 2
                or not all(isinstance(s, str) and s for s in group)):
            raise DhwtError(shape + repr(value))
        groups.append(list(group))
    twice = [s for s, n in Counter(s for g in groups for s in g).items() if n > 1]
    if twice:
        raise DhwtError(f"{name} names {twice[0]!r} twice")
    return groups


def check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise DhwtError(f"{name} must be true or false, got {value!r}")


def check_int(name: str, value: object, *, low: int, high: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise DhwtError(f"{name} must be an integer, got {value!r}")
    if high is not None and not low <= value <= high:
        raise DhwtError(f"{name} must be an integer from {low} to {high}, got {value}")
    if value < low:
        raise DhwtError(f"{name} must be >= {low}, got {value}")


def check_float(name: str, value: object, *, low: float, high: float = math.inf,
                 low_open: bool = False, high_open: bool = False) -> None:
    """DhwtError unless `value` is a finite number within the bounds; the message states the
    range as allowed (never an infinite bound, which no value may reach)."""
    finite = (isinstance(value, (int, float)) and not isinstance(value, bool)
              and math.isfinite(value))
    if finite and (low < value or (value == low and not low_open)) and (
            value < high or (value == high and not high_open)):
        return
    if math.isinf(high):
        allowed = f"a finite number {'>' if low_open else '>='} {low:g}"
    else:
        allowed = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    raise DhwtError(f"{name} must be {allowed}, got {value!r}")


# -- declared constraints of options classes -----------------------------------------------------

@dataclass(frozen=True)
class Integer:
    """An integer (never a bool) from `low` to `high` (None: no upper bound)."""

    low: int
    high: int | None = None

    def admits(self, value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    def check(self, name: str, value: object) -> None:
        check_int(name, value, low=self.low, high=self.high)

    def __str__(self) -> str:
        return (f"an integer >= {self.low}" if self.high is None
                else f"an integer from {self.low} to {self.high}")


@dataclass(frozen=True)
class Real:
    """A finite number within the bounds (check_float's)."""

    low: float
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    def admits(self, value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    def check(self, name: str, value: object) -> None:
        check_float(name, value, low=self.low, high=self.high, low_open=self.low_open,
                    high_open=self.high_open)

    def __str__(self) -> str:
        return "a finite number"


@dataclass(frozen=True)
class Choice:
    """One of the strings `allowed`."""

    allowed: tuple[str, ...]

    def admits(self, value: object) -> bool:
        return isinstance(value, str)

    def check(self, name: str, value: object) -> None:
        check_choice(name, value, self.allowed)

    def __str__(self) -> str:
        return f"one of {', '.join(self.allowed)}"


@dataclass(frozen=True)
class Boolean:
    """true or false."""

    def admits(self, value: object) -> bool:
        return isinstance(value, bool)

    def check(self, name: str, value: object) -> None:
        check_bool(name, value)

    def __str__(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class Text:
    """A non-empty string (a path, a list in text, a device), checked further by `parse` if
    given: parse(value) raises DhwtError when the text is malformed."""

    what: str = "a non-empty string"
    parse: Callable[[str], object] | None = None

    def admits(self, value: object) -> bool:
        return isinstance(value, str)

    def check(self, name: str, value: object) -> None:
        if not isinstance(value, str) or not value:
            raise DhwtError(f"{name} must be {self.what}, got {value!r}")
        if self.parse is not None:
            self.parse(value)

    def __str__(self) -> str:
        return self.what


@dataclass(frozen=True)
class Texts:
    """A list (or tuple) of non-empty strings, e.g. KEY=VALUE assignments."""

    def admits(self, value: object) -> bool:
        return isinstance(value, (list, tuple))

    def check(self, name: str, value: object) -> None:
        if not isinstance(value, (list, tuple)) or not all(
                isinstance(item, str) and item for item in value):
            raise DhwtError(f"{name} must be {self}, got [{brief(value)}]")

    def __str__(self) -> str:
        return "a list of non-empty strings"


@dataclass(frozen=True)
class Instance:
    """An instance of `kind` (e.g. torch.dtype, given by a module that imports torch)."""

    kind: type

    def admits(self, value: object) -> bool:
        return isinstance(value, self.kind)

    def check(self, name: str, value: object) -> None:
        if not isinstance(value, self.kind):
            raise DhwtError(f"{name} must be {self}, got {value!r}")

    def __str__(self) -> str:
        return f"a {self.kind.__module__}.{self.kind.__name__}"


Constraint = Integer | Real | Choice | Boolean | Text | Texts | Instance


def parse_count(name: str, text: str, words: tuple[str, ...]) -> int | str:
    """Command-line text as what an option takes: a whole number, or one of `words` as it is
    (parsing at the edge; the options class checks the number's range).

    >>> parse_count("step", "400", ("last",)), parse_count("step", "last", ("last",))
    (400, 'last')
    >>> parse_count("step", "4.5", ("last",))
    Traceback (most recent call last):
      ...
    dhwt.errors.DhwtError: step must be a whole number or 'last', got '4.5'
    """
    if text in words:
        return text
    if text.isdigit():
        return int(text)
    raise DhwtError(f"{name} must be a whole number or {' or '.join(map(repr, words))}, got "
                    f"{text!r}")


def check_fields(options: object, constraints: Mapping[str, list[Constraint | None]]) -> None:
    """Check every field of the dataclass `options` against its declared constraints (a list of
    the kinds of value it admits; None in it: the field may be unset), as scikit-learn checks
    an estimator's parameters: the first constraint that admits the value's type checks its
    range; a value no constraint admits is refused by the field's one constraint, or naming
    them all where it has several. A field without a declaration is a mistake of the class.

    Examples:
        >>> from dataclasses import dataclass
        >>> @dataclass(frozen=True)
        ... class Options:
        ...     k: int | None = None
        ...     order: int | str = 1
        >>> ALLOWED = {"k": [Integer(1), None], "order": [Integer(1), Choice(("full",))]}
        >>> check_fields(Options(k=3, order="full"), ALLOWED)
        >>> check_fields(Options(k=0), ALLOWED)
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: k must be >= 1, got 0
        >>> check_fields(Options(order=1.5), ALLOWED)
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: order must be an integer >= 1 or one of full, got 1.5
    """
    for f in fields(options):
        if f.name not in constraints:
            raise TypeError(f"{type(options).__name__}.{f.name} declares no constraint")
        allowed = constraints[f.name]
        value = getattr(options, f.name)
        if value is None and None in allowed:
            continue
        kinds = [c for c in allowed if c is not None]
        admitting = next((c for c in kinds if c.admits(value)), None)
        if admitting is None and len(kinds) > 1:
            unset = " or unset" if None in allowed else ""
            raise DhwtError(f"{f.name} must be {' or '.join(map(str, kinds))}{unset}, "
                            f"got {value!r}")
        (admitting or kinds[0]).check(f.name, value)


# -- grammar specs --------------------------------------------------------------------------------

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


def check_masking(rate: object, rule: object) -> None:
    """DhwtError unless mask_rate is in (0, 1] and mask_rule one of MASK_RULES."""
    check_float("mask_rate", rate, low=0.0, high=1.0, low_open=True)
    check_choice("mask_rule", rule, MASK_RULES)


def check_twins(twins: object, p: object, kind: object, seed: object) -> int | list[str]:
    """`twins` (a positive count or a non-empty list of distinct token strings) after checking
    the planting options; DhwtError names the first bad one."""
    if isinstance(twins, (list, tuple)):
        if not twins or not all(isinstance(t, str) and t for t in twins):
            raise DhwtError(f"twins must be a positive count or a non-empty list of tokens, "
                            f"got {brief(twins)}")
        if len(set(twins)) != len(twins):
            twice = next(t for t in twins if list(twins).count(t) > 1)
            raise DhwtError(f"twins lists the token {twice!r} twice")
        twins = list(twins)
    else:
        check_int("twins", twins, low=1)
    check_float("twin_p", p, low=0.0, high=1.0, low_open=True, high_open=True)
    check_choice("twin_kind", kind, TWIN_KINDS)
    if kind == "cnd" and p != 0.5:
        raise DhwtError(f"twin_p is the ratio of sem twins; cnd twins are a or b at 0.5, got "
                        f"twin_p = {p}")
    check_int("twin_seed", seed, low=0)
    return twins
