"""Freed memory kept by the process while a run trains on the CPU (glibc's malloc).

torch's CPU tensors come from malloc, and glibc serves every block above its mmap threshold
(128 KiB to 32 MiB, adaptive) with a fresh mmap and unmaps it on free; it also returns the free
top of its heap to the system. So each training step's large tensors (the logits, the gradients
of the weights, the activations kept for the backward pass) land on fresh pages, and the kernel
faults and zeroes every 4 KiB of them again, step after step. `retained_memory` turns both off
for the length of a run (mallopt M_MMAP_MAX 0: blocks come from the heap; M_TRIM_THRESHOLD -1:
the heap is never trimmed), so from the second step on the step reuses pages it already holds.
What it costs: the process keeps its peak memory until the run ends. On exit glibc's fixed
defaults come back (M_MMAP_MAX 65,536, M_TRIM_THRESHOLD 128 KiB; glibc has no way back to its
adaptive thresholds) and `malloc_trim(0)` hands the free memory back. Elsewhere than glibc
(macOS, musl) it does nothing. The timings: experiments/benchmarks/LOG.md ("Where the
GPT-2-small step goes").

Examples:
    >>> from dhwt.training.allocator import retained_memory
    >>> with retained_memory() as kept:
    ...     pass  # train here; kept is True where the process's malloc is glibc's
"""

from __future__ import annotations

import contextlib
import ctypes
import platform
from collections.abc import Iterator

#: mallopt's parameters and glibc's documented defaults for them (mallopt(3)).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
DEFAULT_TRIM_THRESHOLD = 128 * 1024
DEFAULT_MMAP_MAX = 65536

_depth = 0  # nested runs in one process: the outermost exit restores


def glibc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc (with mallopt and malloc_trim), else None."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    libc = ctypes.CDLL(None)
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


@contextlib.contextmanager
def retained_memory(on: bool = True) -> Iterator[bool]:
    """Inside: freed memory stays with the process (see the module doc); yields whether it does
    (False when `on` is False or the C library is not glibc)."""
    global _depth
    libc = glibc() if on else None
    if libc is None:
        yield False
        return
    if _depth == 0:
        libc.mallopt(M_MMAP_MAX, 0)
        libc.mallopt(M_TRIM_THRESHOLD, -1)
    _depth += 1
    try:
        yield True
    finally:
        _depth -= 1
        if _depth == 0:
            libc.mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
            libc.mallopt(M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)
            libc.malloc_trim(0)
