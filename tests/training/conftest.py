"""Fixtures of the trainer's tests: comparing saved states, a fake C library under
dhwt.training.allocator (interrupting a run at a step: tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

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


def _assert_same(a: object, b: object) -> None:
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        assert a == b


@pytest.fixture(scope="session")
def assert_same() -> Callable[[object, object], None]:
    """assert_same(a, b): nested checkpoint values (dicts, lists, tuples) equal, tensors bit for
    bit (same dtype, same values)."""
    return _assert_same
