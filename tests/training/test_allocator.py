"""dhwt.training.allocator: freed memory stays with the process inside `retained_memory` (glibc)
and goes back to the system when it ends; the outermost of nested ones restores the defaults."""

from __future__ import annotations

import os

import pytest
import torch

from dhwt.training import allocator
from dhwt.training.allocator import retained_memory

BLOCK = 256 * 2**20  # bytes: far above any malloc threshold, far above RSS noise
glibc_only = pytest.mark.skipif(allocator.glibc() is None, reason="needs glibc's malloc")


def _rss() -> int:
    """Resident bytes of this process (/proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _kept_after_free() -> float:
    """Share of a freshly written BLOCK that is still resident once the tensor is freed."""
    block = torch.ones(BLOCK // 4)  # every page written
    held = _rss()
    del block
    return 1 - (held - _rss()) / BLOCK


@glibc_only
def test_freed_memory_stays_inside_and_goes_back_at_the_end():
    """(Outside, whether a freed block is unmapped depends on what the heap holds free already,
    so that side is the fake's test below.)"""
    with retained_memory() as kept:
        _kept_after_free()  # the heap grows to hold a block (a free one may exist already)
        inside = _kept_after_free()
        with retained_memory():
            pass
        nested = _kept_after_free()  # an inner run's end changes nothing
        before_exit = _rss()
    trimmed = (before_exit - _rss()) / BLOCK
    assert kept and inside > 0.9 and nested > 0.9 and trimmed > 0.9, (inside, nested, trimmed)


def test_the_outermost_sets_and_restores_glibcs_defaults(fake_libc):
    with retained_memory():
        with retained_memory():
            assert fake_libc.calls == [("mallopt", -4, 0), ("mallopt", -1, -1)]  # M_MMAP_MAX, TRIM
        assert len(fake_libc.calls) == 2
    assert fake_libc.calls[2:] == [("mallopt", -4, 65536), ("mallopt", -1, 128 * 1024),
                                   ("malloc_trim", 0)]
    with retained_memory():  # the next one is the outermost again
        assert fake_libc.calls[5:] == fake_libc.calls[:2]


def test_off_it_does_nothing(fake_libc):
    with retained_memory(on=False) as kept:
        assert not kept and not fake_libc.calls


def test_without_glibc_it_does_nothing(monkeypatch):
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("musl", "1.2"))
    assert allocator.glibc() is None
    with retained_memory() as kept:
        assert not kept
