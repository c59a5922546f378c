"""The `parity` family: the paper's EXor task.

Class strings: binary strings of n_bits bits, uniform, followed by a label class EVEN or ODD (the
parity of the number of ones). Bit classes "0" and "1" each emit one of their variant symbols;
the labels are single symbols EVEN and ODD and are never masked.

`strings` chooses the set: "all" (default) every one of the 2^n_bits strings; "paper" the
authors' set (github f14-bertolotti/semantica, xor/datasets/Default.py): `range(2**n_bits - 1)`,
which leaves out the all-ones string, with the authors' split, which the language then fixes
itself: the strings (bits most significant first) shuffled by Python's `random.Random(14)`,
train = the first int(0.9 n), valid = the next int(0.1 n), test = the rest (114 / 12 / 1 for
n_bits = 7).
"""

from __future__ import annotations

import random

import numpy as np

from dhwt.errors import DhwtError, brief
from dhwt.checks import check_keys, need, need_int
from dhwt.languages.classes import SymbolClass, read_classes
from dhwt.languages.enumeration import check_size

KEYS = ("family", "name", "description", "n_bits", "classes", "strings")
STRING_SETS = ("all", "paper")
BIT_CLASSES = ("0", "1")
LABELS = ("EVEN", "ODD")
MAX_BITS = 30
PAPER_SEED = 14


def build(spec: dict) -> tuple[list[SymbolClass], np.ndarray, np.ndarray, np.ndarray | None]:
    """(classes, class strings (n, n_bits + 1), probabilities, the split the set fixes or None)
    of a validated parity spec."""
    check_keys(spec, KEYS, "a parity spec")
    n_bits = need_int(need(spec, "n_bits", "a parity spec"), "'n_bits'", 1, MAX_BITS)
    string_set = spec.get("strings", "all")
    if string_set not in STRING_SETS:
        raise DhwtError(f"'strings' must be one of {', '.join(STRING_SETS)}, got "
                        f"{string_set!r}")
    bits = read_classes(need(spec, "classes", "a parity spec"), allow_maskable=False)
    names = tuple(c.name for c in bits)
    if sorted(names) != sorted(BIT_CLASSES):
        raise DhwtError("a parity spec declares exactly the classes '0' and '1', "
                        f"got {brief(names)}")
    bits.sort(key=lambda c: c.name)
    n_variants = sum(len(c.variants) for c in bits)
    check_size(n_variants**n_bits, n_variants**n_bits * (n_bits + 1) ** 2)
    labels = [SymbolClass(name, (name,), (1.0,), maskable=False) for name in LABELS]

    n_strings = 2**n_bits - (string_set == "paper")
    if string_set == "paper" and int(n_strings * .9) < 1:
        raise DhwtError(f"strings = \"paper\" leaves no training string for n_bits = {n_bits} "
                        "(the authors' split trains on int(0.9 (2^n_bits - 1)) strings); "
                        "use n_bits >= 2")
    values = (np.arange(n_strings)[:, None] >> np.arange(n_bits - 1, -1, -1)) & 1
    label = len(BIT_CLASSES) + values.sum(axis=1) % 2
    strings = np.concatenate([values, label[:, None]], axis=1).astype(np.int32)
    probs = np.full(len(strings), 1.0 / len(strings))
    split = paper_split(n_strings) if string_set == "paper" else None
    return bits + labels, strings, probs, split


def paper_split(n_strings: int) -> np.ndarray:
    """(n_strings,) int8 split ids (0 train, 1 valid, 2 test) of strings 0..n_strings-1 as the
    authors' code assigns them: shuffled by random.Random(14), train the first int(0.9 n), valid
    the next int(0.1 n), test the rest.

    Examples:
        >>> split = paper_split(127)
        >>> [int((split == i).sum()) for i in range(3)]  # train, valid, test
        [114, 12, 1]
    """
    order = list(range(n_strings))
    random.Random(PAPER_SEED).shuffle(order)
    n_train, n_valid = int(n_strings * .9), int(n_strings * .1)
    split = np.full(n_strings, 2, dtype=np.int8)
    split[order[:n_train]] = 0
    split[order[n_train:n_train + n_valid]] = 1
    return split
