"""How a member's weights are drawn: from generators derived from its seed alone.

Stream 0 is `torch.Generator().manual_seed(seed)` itself and draws every weight in a fixed order
(input embeddings, positions, then each layer), so tied and untied models with the same seed
agree on all of them. The untied output matrix (stream 1) and dropout (stream 2) use generators
seeded from `numpy.random.SeedSequence(seed, spawn_key=(stream,))`, independent of stream 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from dhwt.errors import DhwtError

MAIN, OUTPUT, DROPOUT = 0, 1, 2


def check_seeds(seeds: Sequence[int]) -> tuple[int, ...]:
    """The seeds as a tuple, or DhwtError when empty or not integers in [0, 2**63)."""
    seeds = tuple(seeds)
    if not seeds:
        raise DhwtError("seeds must name at least one seed, got none")
    for seed in seeds:
        integer = isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)
        if not integer or not 0 <= seed < 2**63:
            raise DhwtError(f"a seed must be an integer in [0, 2**63), got {seed!r}")
    return tuple(int(s) for s in seeds)


def member_generator(seed: int, stream: int = MAIN) -> torch.Generator:
    """The generator of one member's `stream` (MAIN, OUTPUT or DROPOUT)."""
    if stream == MAIN:
        return torch.Generator().manual_seed(seed)
    return torch.Generator().manual_seed(stream_seed(seed, stream))


def stream_seed(seed: int, *key: int) -> int:
    """The 64-bit seed of the stream `key` of `seed`: numpy's SeedSequence with that spawn key."""
    words = np.random.SeedSequence(seed, spawn_key=key).generate_state(2, np.uint32)
    return int(words[0]) << 32 | int(words[1])


def uniform(shape: tuple[int, ...], bound: float, generator: torch.Generator) -> torch.Tensor:
    """U(-bound, bound) samples."""
    return torch.empty(shape).uniform_(-bound, bound, generator=generator)


def xavier_uniform(shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    """Xavier/Glorot uniform for a (fan_out, fan_in) matrix, as torch.nn.init.xavier_uniform_."""
    fan_out, fan_in = shape
    return uniform(shape, math.sqrt(6.0 / (fan_in + fan_out)), generator)


def linear_default(shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    """nn.Linear's default weight, kaiming_uniform_(a=sqrt(5)) = U(+-1/sqrt(fan_in))."""
    return uniform(shape, 1.0 / math.sqrt(shape[1]), generator)


def embedding_table(
    rows: int, width: int, kind: str, std: float, generator: torch.Generator
) -> torch.Tensor:
    """A (rows, width) table: N(0, std^2) for kind "normal", N(0, 1/width) for "fairseq",
    Xavier-uniform for "xavier"."""
    if kind in ("normal", "fairseq"):
        std = width**-0.5 if kind == "fairseq" else std
        return normal((rows, width), std, generator)
    return xavier_uniform((rows, width), generator)


def normal(shape: tuple[int, ...], std: float, generator: torch.Generator) -> torch.Tensor:
    """N(0, std^2) samples."""
    return torch.empty(shape).normal_(0.0, std, generator=generator)


def sinusoidal_table(rows: int, width: int) -> torch.Tensor:
    """The fixed positional table of Vaswani et al.: sin on even columns, cos on odd ones."""
    position = torch.arange(rows, dtype=torch.float64).unsqueeze(1)
    frequency = torch.exp(
        torch.arange(0, width, 2, dtype=torch.float64) * (-math.log(10000.0) / width)
    )
    table = torch.zeros(rows, width, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: width // 2])
    return table.float()
