"""Dropout masks of an ensemble, each member's drawn from its own generator (ModelConfig's
`dropout_masks`).

"bernoulli" draws each mask element with torch's `bernoulli_`: one 32-bit draw per element, at
keep rate 1 - p exactly; on the CPU its kernel is serial, and at GPT-2-small's shape the masks
were 9% of a training step (experiments/benchmarks/LOG.md). "packed" reads two mask elements
from each 31-bit draw of `random_` on int32 (bits 0-14 and 15-29) and keeps an element when its
15 bits fall below round((1 - p) 2^15): the keep rate is that threshold over 2^15, within 2^-16
of 1 - p, and the kept elements are scaled by its inverse, so E[mask] = 1 exactly as with
"bernoulli". Both are inverted dropout with independent elements; they draw different streams,
so a run keeps the one it was trained with (the default, "bernoulli", is every earlier run's).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

#: Bits of a draw that decide one element of a "packed" mask (two per 31-bit int32 draw).
PACKED_BITS = 15


def packed_threshold(p: float) -> int:
    """The 15-bit values below which a "packed" mask keeps an element at dropout rate p.

    Examples:
        >>> packed_threshold(0.1), packed_threshold(0.1) / 2**15
        (29491, 0.899993896484375)
    """
    return round((1.0 - p) * 2**PACKED_BITS)


def keep_scales(how: str, p: float, shape: tuple[int, int], generators: Sequence[torch.Generator
                | None], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(S, n) inverted-dropout multipliers at rate p: 0 where an element is dropped, 1 / keep
    rate where it is kept; row s drawn from generators[s] only (None: the device's default).

    Examples:
        >>> import torch
        >>> g = [torch.Generator().manual_seed(0)]
        >>> m = keep_scales("packed", 0.5, (1, 6), g, torch.float32, torch.device("cpu"))
        >>> sorted(set(m.flatten().tolist()))
        [0.0, 2.0]
    """
    members, n = shape
    keep = torch.empty(members, n, dtype=dtype, device=device)
    if how == "bernoulli":
        for row, generator in zip(keep, generators):
            row.bernoulli_(1.0 - p, generator=generator)
        return keep.div_(1.0 - p)
    threshold = packed_threshold(p)
    half = (n + 1) // 2
    low = (1 << PACKED_BITS) - 1
    for row, generator in zip(keep, generators):
        bits = torch.empty(half, dtype=torch.int32, device=device).random_(generator=generator)
        torch.lt(bits & low, threshold, out=row[:half])
        torch.lt(bits[: n - half] >> PACKED_BITS & low, threshold, out=row[half:])
    return keep.mul_(2**PACKED_BITS / threshold)
