"""A language: a finite distribution over class strings plus, per class, its variant symbols.

The class-level distribution is enumerated exactly (every class string with its probability);
variants are drawn independently per position each time a string is served. Which positions may
be masked (MLM) is a property of the class at that position.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from dhwt.defaults import OBJECTIVES
from dhwt.errors import DhwtError
from dhwt.languages import automaton, demand, parity
from dhwt.checks import need_str
from dhwt.languages.classes import SymbolClass, check_symbols
from dhwt.languages.enumeration import PAD, group_arange
from dhwt.languages.spec import apply_overrides, read_spec

FAMILIES = {"parity": parity.build, "automaton": automaton.build, "demand": demand.build}
MASK, PAD_TOKEN, BOS, EOS = "[MASK]", "[PAD]", "[BOS]", "[EOS]"


@dataclass(frozen=True, eq=False)
class Language:
    """name, resolved spec (after overrides), classes, and the class strings:
    strings (n, L) int32 class ids with PAD (-1) past each string's end, probs (n,) summing to 1;
    split (n,) int8 split ids where the language fixes its own split (parity's strings =
    "paper", the authors' split), else None (datasets split it by dhwt.languages.splits)."""

    name: str
    spec: dict
    classes: tuple[SymbolClass, ...]
    strings: np.ndarray
    probs: np.ndarray
    split: np.ndarray | None = None

    @property
    def family(self) -> str:
        return self.spec["family"]

    @cached_property
    def symbols(self) -> tuple[str, ...]:
        """All grammar symbols, class by class; a symbol's id is its index here."""
        return tuple(s for c in self.classes for s in c.variants)

    @cached_property
    def symbol_class(self) -> np.ndarray:
        """(n_symbols,) class id of each symbol."""
        return np.repeat(np.arange(len(self.classes)), [len(c.variants) for c in self.classes])

    @cached_property
    def lengths(self) -> np.ndarray:
        """(n,) length of each class string."""
        return (self.strings != PAD).sum(axis=1)

    @property
    def equal_lengths(self) -> bool:
        """True when every string has the same length (then no [PAD] token is needed)."""
        return bool((self.lengths == self.strings.shape[1]).all())

    @cached_property
    def maskable(self) -> np.ndarray:
        """(n_classes,) bool: may a position holding this class be masked."""
        return np.array([c.maskable for c in self.classes])

    def vocab(self, objective: str) -> tuple[str, ...]:
        """Token ids of an objective: the grammar symbols, then its special tokens ([MASK] for
        mlm; [BOS], [EOS] for clm; [PAD] only when strings differ in length)."""
        specials = {"mlm": (MASK,), "clm": (BOS, EOS)}[check_objective(objective)]
        return self.symbols + specials + (() if self.equal_lengths else (PAD_TOKEN,))

    def subset(self, keep: np.ndarray) -> Language:
        """The language of the class strings where `keep` (n,) is True, their probabilities
        renormalised: the distribution a model trained on one split sees."""
        probs = self.probs[keep]
        return replace(self, strings=self.strings[keep], probs=probs / probs.sum(),
                       split=None if self.split is None else self.split[keep])

    def string_text(self, i: int) -> str:
        """Class string i as text, e.g. '0 1 1 EVEN'."""
        return " ".join(self.classes[c].name for c in self.strings[i] if c != PAD)


def symbol_strings(language: Language) -> tuple[np.ndarray, np.ndarray]:
    """Every symbol-level string of the language with its probability.

    Returns (rows (n, L) int32 symbol ids with PAD past the end, probs (n,) float64 summing to 1).
    P(x) = P(class string of x) * prod_i q(x_i | class_i), each class string expanded into all
    combinations of its variants, one position at a time (vectorised over strings).
    """
    classes = language.strings
    n_variants = np.array([len(c.variants) for c in language.classes])
    offsets = np.cumsum(n_variants) - n_variants
    variant_probs = np.array([p for c in language.classes for p in c.probs])
    rows = np.full(classes.shape, PAD, dtype=np.int32)
    probs = language.probs.astype(np.float64)
    for j in range(classes.shape[1]):
        cls = classes[:, j]
        real = cls != PAD
        counts = np.where(real, n_variants[np.where(real, cls, 0)], 1)
        keep = np.repeat(np.arange(len(cls)), counts)
        within = group_arange(counts)
        classes, rows, probs, real = classes[keep], rows[keep], probs[keep], real[keep]
        symbols = offsets[classes[real, j]] + within[real]
        rows[real, j] = symbols
        probs[real] *= variant_probs[symbols]
    check_representable(probs)
    return rows, probs


def check_representable(probs: np.ndarray) -> None:
    """Refuse strings whose probability, a product of the spec's probabilities, underflows
    float64 to 0: their conditionals would be 0 / 0.

    Examples:
        >>> check_representable(np.array([1e-200 * 1e-200, 1.0]))
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: 1 of the 2 symbol strings has a probability below float64's ...
    """
    lost = int((probs <= 0).sum())
    if lost:
        raise DhwtError(
            f"{lost:,} of the {len(probs):,} symbol strings {'has' if lost == 1 else 'have'} a "
            f"probability below float64's smallest ({np.finfo(np.float64).smallest_subnormal:.3g})"
            ", a product of the spec's probabilities; exact ground truth needs every string's "
            "probability: raise the smallest probabilities of the spec")


def check_objective(objective: str) -> str:
    """`objective` if it is one of OBJECTIVES, else a DhwtError."""
    if objective not in OBJECTIVES:
        raise DhwtError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    return objective


def load_language(name_or_path: str, overrides: dict[str, object] | None = None) -> Language:
    """A language from a built-in spec name (`parity`, ...) or a TOML path, with dotted-key
    overrides (as from `--set`) applied before validation. Every problem is a DhwtError.

    Examples:
        >>> from dhwt.languages import load_language
        >>> parity = load_language("parity", {"n_bits": 3})  # the paper's EXor with 3 bits
        >>> parity.symbols
        ('0a', '0b', '1a', '1b', 'EVEN', 'ODD')
        >>> parity.strings.shape  # every 3-bit string once (class ids), then its parity label
        (8, 4)
        >>> parity.string_text(5), float(parity.probs[5])
        ('1 0 1 EVEN', 0.125)
        >>> parity.vocab("mlm")
        ('0a', '0b', '1a', '1b', 'EVEN', 'ODD', '[MASK]')
        >>> load_language("parity", {"n_bits": 3, "classes.1.skew": 2.0})
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: 'skew' of class '1' is 2.0; it must be in [0, 1)
    """
    default_name, raw = read_spec(name_or_path)
    return language_from_spec(raw, default_name, overrides)


def language_from_spec(raw: dict, name: str, overrides: dict[str, object] | None = None
                       ) -> Language:
    """A language from a spec given as a table (a grammar TOML's content, e.g. one built in
    code), named `name` unless the spec names itself; otherwise as load_language.

    Examples:
        >>> from dhwt.languages.language import language_from_spec
        >>> spec = {"family": "automaton", "start": "s",
        ...         "classes": {"c": {"variants": ["c"]}, "d": {"variants": ["d1", "d2"]}},
        ...         "states": {"s": [{"emit": "c", "to": "end", "p": 0.5},
        ...                          {"emit": "d", "to": "end", "p": 0.5}]}}
        >>> language_from_spec(spec, "coin").symbols
        ('c', 'd1', 'd2')
    """
    overrides = overrides or {}
    spec = _described(raw, apply_overrides(raw, overrides), overrides)
    family = spec.get("family")
    if not isinstance(family, str) or family not in FAMILIES:
        raise DhwtError(f"the spec's 'family' is {family!r}; choose one of {', '.join(FAMILIES)}")
    name = need_str(spec.get("name", name), "'name'")
    if not isinstance(spec.get("description", ""), str):
        raise DhwtError("'description' must be a string")
    classes, strings, probs, split = FAMILIES[family](spec)
    check_symbols(classes)
    resolved = {"name": name, **{k: v for k, v in spec.items() if k != "name"}}
    language = Language(name, resolved, tuple(classes), strings, probs, split)
    _check_maskable(language)
    return language


def _described(raw: dict, spec: dict, overrides: Mapping[str, object]) -> dict:
    """`spec` with its description marked when overrides changed what the spec says (beyond
    name and description): the spec's author described the spec as written, not as overridden
    (parity's says 0.5/0.5 whatever classes.1.skew is set to). A description set by the
    overrides themselves is kept as given."""
    if (not isinstance(raw.get("description"), str) or "description" in overrides
            or _content(spec) == _content(raw)):
        return spec
    changed = ", ".join(f"{key}={json.dumps(value, ensure_ascii=False)}"
                        for key, value in _content(overrides).items())
    return {**spec, "description": f"{raw['description']} (said of the spec before "
                                   f"overriding {changed})"}


def _content(table: Mapping[str, object]) -> dict[str, object]:
    """What a spec (or its overrides) says about the language: all but name and description."""
    return {key: value for key, value in table.items() if key not in ("name", "description")}


def _check_maskable(language: Language) -> None:
    """Every string needs a maskable position, or the MLM objective could not serve it."""
    has = (language.maskable[language.strings] & (language.strings != PAD)).any(axis=1)
    if not has.all():
        text = language.string_text(int(np.argmin(has)))
        raise DhwtError(f"the string {text!r} has no maskable position; the MLM objective needs "
                        "one in every string (set maskable = true on one of its classes)")
