"""Fixtures of the trainer's tests: a fake C library under dhwt.training.allocator (comparing
saved states and interrupting a run at a step: tests/conftest.py)."""

from __future__ import annotations

import pytest

from dhwt.training import allocator


class FakeLibc:
    """A C library whose malloc settings only record their calls."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append(("mallopt", param, value))
        return 1

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(("malloc_trim", pad))
        return 1


@pytest.fixture
def fake_libc(monkeypatch) -> FakeLibc:
    """dhwt.training.allocator sees a FakeLibc as glibc (the process's malloc is untouched)."""
    libc = FakeLibc()
    monkeypatch.setattr(allocator, "glibc", lambda: libc)
    return libc
