"""Symbol classes: the hidden level of a language. Each class emits one of its variant symbols,
drawn independently at every position each time a string is served (HMM-like: hidden class,
emitted variant). Every symbol belongs to exactly one class.

A class table in a spec:  variants = ["0a", "0b"]  and either  p = [0.1, 0.9]  or  skew = t
(two variants only; p = ((1 - t) / 2, (1 + t) / 2), t in [0, 1): 0 gives 0.5/0.5, 0.8 gives
0.1/0.9), or neither (uniform). `maskable = false` (automaton family) keeps a class from ever
being masked in the MLM objective.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from dhwt.errors import DhwtError
from dhwt.checks import (
    check_keys,
    need,
    need_kind,
    need_number,
    need_str,
    normalised,
    probability,
)


@dataclass(frozen=True)
class SymbolClass:
    """One hidden class: its name, its variant symbols with their probabilities, and whether a
    position holding this class may be masked (MLM)."""

    name: str
    variants: tuple[str, ...]
    probs: tuple[float, ...]
    maskable: bool = True


def read_classes(table: object, *, allow_maskable: bool) -> list[SymbolClass]:
    """The `[classes.NAME]` tables of a spec, validated, in spec order."""
    table = need_kind(table, dict, "'classes'")
    if not table:
        raise DhwtError("the spec declares no classes: the alphabet is empty")
    allowed = ("variants", "p", "skew") + (("maskable",) if allow_maskable else ())
    return [_read_class(name, entry, allowed) for name, entry in table.items()]


def _read_class(name: str, entry: object, allowed: tuple[str, ...]) -> SymbolClass:
    where = f"class {name!r}"
    need_str(name, f"the name of {where}")
    entry = need_kind(entry, dict, where)
    check_keys(entry, allowed, where)
    given = need_kind(need(entry, "variants", where), list, f"'variants' of {where}")
    variants = tuple(unicodedata.normalize("NFC", need_str(v, f"variant {i} of {where}"))
                     for i, v in enumerate(given))
    if not variants:
        raise DhwtError(f"{where} has no variants: every class needs at least one symbol")
    maskable = need_kind(entry.get("maskable", True), bool, f"'maskable' of {where}")
    return SymbolClass(name, variants, _variant_probs(entry, len(variants), where), maskable)


def _variant_probs(entry: dict, n: int, where: str) -> tuple[float, ...]:
    if "p" in entry and "skew" in entry:
        raise DhwtError(f"{where} gives both 'p' and 'skew'; give one of them")
    if "skew" in entry:
        if n != 2:
            raise DhwtError(f"'skew' of {where} needs exactly 2 variants, the class has {n}")
        t = need_number(entry["skew"], f"'skew' of {where}")
        if not 0.0 <= t < 1.0:
            raise DhwtError(f"'skew' of {where} is {t!r}; it must be in [0, 1)")
        return ((1.0 - t) / 2.0, (1.0 + t) / 2.0)
    if "p" not in entry:
        return tuple(1.0 / n for _ in range(n))
    given = need_kind(entry["p"], list, f"'p' of {where}")
    if len(given) != n:
        raise DhwtError(f"'p' of {where} has {len(given)} entries for {n} variants")
    probs = [probability(p, f"p[{i}] of {where}") for i, p in enumerate(given)]
    return normalised(probs, f"the variant probabilities of {where}")


def check_symbols(classes: list[SymbolClass]) -> None:
    """Symbols are unique across the whole language, told apart by what a reader sees, and never
    look like a special token. Names are NFC-normalised when read (an accented letter typed
    either way is one symbol); names that differ only by invisible format characters (zero-width
    space or joiner, ...) would print alike everywhere, so they are refused."""
    owner: dict[str, str] = {}
    by_look: dict[str, str] = {}
    for cls in classes:
        for symbol in cls.variants:
            look = _visible(symbol)
            if not look:
                raise DhwtError(f"symbol {symbol!r} of class {cls.name!r} has no visible "
                                "character; give it a name one can read")
            if look.startswith("[") and look.endswith("]"):
                raise DhwtError(f"symbol {symbol!r} of class {cls.name!r} looks like a special "
                                "token; bracketed names like [MASK] are reserved")
            if symbol in owner:
                other = owner[symbol]
                place = (f"class {other!r}" if other == cls.name
                         else f"classes {other!r} and {cls.name!r}")
                raise DhwtError(f"duplicate symbol {symbol!r} in {place}: symbols must be unique "
                                "(compared after Unicode NFC normalisation)")
            if look in by_look:
                twin = by_look[look]
                hidden = sorted({ch for ch in twin + symbol if unicodedata.category(ch) == "Cf"})
                names = ", ".join(f"U+{ord(ch):04X} {unicodedata.name(ch, '')}".rstrip()
                                  for ch in hidden)
                raise DhwtError(f"symbols {twin!r} (class {owner[twin]!r}) and {symbol!r} (class "
                                f"{cls.name!r}) differ only by invisible characters ({names}); "
                                "give them visibly different names")
            owner[symbol], by_look[look] = cls.name, symbol


def _visible(name: str) -> str:
    """`name` without its invisible format characters (Unicode category Cf); whitespace is
    refused in names before this (checks.need_str)."""
    return "".join(ch for ch in name if unicodedata.category(ch) != "Cf")
