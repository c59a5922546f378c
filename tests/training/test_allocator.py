"""dhwt.training.allocator: freed memory stays with the process inside `retained_memory` (glibc)
and goes back to the system when it ends; the outermost of nested ones restores the defaults."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dhwt.training import allocator
from dhwt.training.allocator import retained_memory

BLOCK = 256 * 2**20  # bytes: far above any malloc threshold, far above RSS noise
glibc_only = pytest.mark.skipif(allocator.glibc() is None, reason="needs glibc's malloc")


#: Run in a fresh interpreter: whether glibc hands a freed block back depends on what the heap
#: already holds, and so on the tests a pytest worker ran before (an earlier one can leave a
#: free block of the size, or the worker's heap trimmed to it).
MEASURE = f"""
import os, torch
from dhwt.training.allocator import retained_memory
BLOCK = {BLOCK}

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def kept_after_free():
    block = torch.ones(BLOCK // 4)  # every page written
    held = rss()
    del block
    return 1 - (held - rss()) / BLOCK

with retained_memory() as kept:
    kept_after_free()  # the heap grows to hold a block (a free one may exist already)
    inside = kept_after_free()
    with retained_memory():
        pass
    nested = kept_after_free()  # an inner run's end changes nothing
    before_exit = rss()
print(kept, inside, nested, (before_exit - rss()) / BLOCK)
"""


@glibc_only
def test_freed_memory_stays_inside_and_goes_back_at_the_end():
    """Inside, a freed block stays resident (also after a nested one ends); at the end it goes
    back. (Outside, whether a freed block is unmapped depends on what the heap holds free
    already, so that side is the fake's test below.)"""
    out = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True,
                         check=True).stdout.split()
    kept, (inside, nested, trimmed) = out[0] == "True", map(float, out[1:])
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
