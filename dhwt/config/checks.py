"""The checks every configuration value goes through, with one phrasing for their errors
("NAME must be ..., got VALUE"), and the seed and init_from notations."""

from __future__ import annotations

import math
from collections import Counter

from dhwt.errors import DhwtError, brief
from dhwt.languages.masking import RULES
from dhwt.languages.twins import KINDS

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


def check_masking(rate: object, rule: object) -> None:
    """DhwtError unless mask_rate is in (0, 1] and mask_rule one of dhwt.languages.masking's
    RULES."""
    check_float("mask_rate", rate, low=0.0, high=1.0, low_open=True)
    check_choice("mask_rule", rule, RULES)


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
    check_choice("twin_kind", kind, KINDS)
    if kind == "cnd" and p != 0.5:
        raise DhwtError(f"twin_p is the ratio of sem twins; cnd twins are a or b at 0.5, got "
                        f"twin_p = {p}")
    check_int("twin_seed", seed, low=0)
    return twins
