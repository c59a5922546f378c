"""The `parity` family: the paper's EXor task.

Class strings: all 2^n_bits binary strings (none dropped), uniform, followed by a label class
EVEN or ODD (the parity of the number of ones). Bit classes "0" and "1" each emit one of their
variant symbols; the labels are single symbols EVEN and ODD and are never masked.
"""

from __future__ import annotations

import numpy as np

from dhwt.errors import DhwtError, brief
from dhwt.languages.checks import check_keys, need, need_int
from dhwt.languages.classes import SymbolClass, read_classes
from dhwt.languages.enumeration import check_size

KEYS = ("family", "name", "description", "n_bits", "classes")
BIT_CLASSES = ("0", "1")
LABELS = ("EVEN", "ODD")
MAX_BITS = 30


def build(spec: dict) -> tuple[list[SymbolClass], np.ndarray, np.ndarray]:
    """(classes, class strings (n, n_bits + 1), probabilities) of a validated parity spec."""
    check_keys(spec, KEYS, "a parity spec")
    n_bits = need_int(need(spec, "n_bits", "a parity spec"), "'n_bits'", 1, MAX_BITS)
    bits = read_classes(need(spec, "classes", "a parity spec"), allow_maskable=False)
    names = tuple(c.name for c in bits)
    if sorted(names) != sorted(BIT_CLASSES):
        raise DhwtError("a parity spec declares exactly the classes '0' and '1', "
                        f"got {brief(names)}")
    bits.sort(key=lambda c: c.name)
    n_variants = sum(len(c.variants) for c in bits)
    check_size(n_variants**n_bits, n_variants**n_bits * (n_bits + 1) ** 2)
    labels = [SymbolClass(name, (name,), (1.0,), maskable=False) for name in LABELS]

    values = (np.arange(2**n_bits)[:, None] >> np.arange(n_bits - 1, -1, -1)) & 1
    label = len(BIT_CLASSES) + values.sum(axis=1) % 2
    strings = np.concatenate([values, label[:, None]], axis=1).astype(np.int32)
    probs = np.full(len(strings), 1.0 / len(strings))
    return bits + labels, strings, probs
