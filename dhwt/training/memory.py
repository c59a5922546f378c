"""Whether a run can fit in memory, decided before its model or a batch is allocated.

The estimate is a lower bound on what training holds at once, so that a refusal is never wrong
(a run under it may still not fit, and then stops with an out-of-memory error):

    parameters  S members x P parameters x 16 bytes: the float32 weight, its gradient and
                AdamW's two moments. P is counted on torch's meta device (shapes, no memory),
                with both embedding matrices (untied).
    a batch     S x B strings (B = batch_size, or every training string for the full batch),
                each with at least its L positions' input id and target (int64) and loss
                weight (float32) and their embeddings (d float32 values each, kept for the
                backward pass), and its logits over the V tokens of the vocabulary at one
                target position at least (float32). Under torchrun each process holds its 1/W
                share of the rows.

It is compared with the memory available to the device: MemAvailable of /proc/meminfo (Linux;
elsewhere the physical memory, os.sysconf) for the CPU, the GPU's free memory
(torch.cuda.mem_get_info) for a GPU. Where neither can be read, nothing is refused.

Examples:
    >>> from dhwt.models import ModelConfig
    >>> from dhwt.training.memory import Need
    >>> need = Need.of(ModelConfig(vocab_size=7, max_len=8), members=3, rows=100, length=8)
    >>> need.parameters  # per member
    192
    >>> need.parameter_bytes == 3 * 192 * 16
    True
    >>> need.batch_bytes == 3 * 100 * (8 * (8 + 8 + 4 + 4 * 4) + 4 * 7)
    True
    >>> need.check(10_000, "device cpu")
    Traceback (most recent call last):
      ...
    dhwt.errors.DhwtError: the run needs at least 104.0 kB of memory (3 members x 192 parameters:
    9.2 kB; batches of 100 strings x 8 tokens: 94.8 kB) but device cpu has 10.0 kB available;
    train fewer seeds, a smaller batch or a smaller model
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from dhwt.errors import DhwtError
from dhwt.models import ModelConfig, build_model

#: Bytes per parameter: float32 weight, gradient and AdamW's two moments.
PARAMETER_BYTES = 16
#: Bytes per position of a batch: its int64 input id and target and its float32 loss weight.
TOKEN_BYTES = 8 + 8 + 4
#: Bytes per float32 value.
FLOAT_BYTES = 4


@dataclass(frozen=True)
class Need:
    """The lower bound above for one process: `parameters` per member and the bytes of the
    members' parameters and of one batch."""

    members: int
    parameters: int
    rows: int
    length: int
    parameter_bytes: int
    batch_bytes: int

    @classmethod
    def of(cls, model: ModelConfig, members: int, rows: int, length: int) -> Need:
        """The need of `members` models `model` training on batches of `rows` strings (this
        process's share) of `length` tokens."""
        with torch.device("meta"):
            parameters = sum(p.numel() for p in build_model(model, [0], tied=False).parameters())
        position = TOKEN_BYTES + FLOAT_BYTES * model.d_model
        string = length * position + FLOAT_BYTES * model.vocab_size
        return cls(members, parameters, rows, length,
                   members * parameters * PARAMETER_BYTES, members * rows * string)

    def check(self, available: int | None, device: str) -> None:
        """DhwtError if the need exceeds `available` bytes (None: unknown, nothing refused)."""
        total = self.parameter_bytes + self.batch_bytes
        if available is None or total <= available:
            return
        raise DhwtError(
            f"the run needs at least {_size(total)} of memory ({self.members:,} member"
            f"{'s' * (self.members != 1)} x {self.parameters:,} parameters: "
            f"{_size(self.parameter_bytes)}; batches of {self.rows:,} strings x {self.length} "
            f"tokens: {_size(self.batch_bytes)}) but {device} has {_size(available)} available; "
            "train fewer seeds, a smaller batch or a smaller model")


def available_memory(device: torch.device) -> int | None:
    """Bytes of memory available to `device` now, or None where that cannot be read."""
    if device.type == "cuda":
        try:
            return torch.cuda.mem_get_info(device)[0]
        except (RuntimeError, AssertionError):
            return None
    if device.type != "cpu":
        return None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def allocation_failure(exc: BaseException) -> str | None:
    """torch's reason, in one line, when `exc` is a failed allocation (a GPU out of memory, or
    the CPU allocator refused); None for any other error.

    Examples:
        >>> allocation_failure(RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. "
        ...     "DefaultCPUAllocator: can't allocate memory: you tried to allocate 400 bytes."))
        "can't allocate memory: you tried to allocate 400 bytes."
        >>> allocation_failure(RuntimeError("shape mismatch")) is None
        True
    """
    text = str(exc).strip()
    if isinstance(exc, torch.OutOfMemoryError):
        return text.splitlines()[0] if text else "out of memory"
    marker = "can't allocate memory"
    if isinstance(exc, RuntimeError) and marker in text:
        return text[text.index(marker):].splitlines()[0]
    return None


def _size(n: int) -> str:
    """Bytes in decimal units, e.g. 12.4 GB."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
