"""Run theorem checks: each check's outcome and time, and the Verification `dhwt verify-theorems`
renders (dhwt.report.verify_theorems_report)."""

from __future__ import annotations

import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass

from tqdm import tqdm

from dhwt.errors import DhwtError
from dhwt.theory.check import Check, Outcome
from dhwt.theory.registry import select


@dataclass(frozen=True)
class Row:
    """One check's result and how long it took."""

    check: Check
    outcome: Outcome
    seconds: float


def run_check(check: Check, seed: int) -> Row:
    """Run one check with its own generator. A crash is a failure, reported with its cause."""
    start = time.perf_counter()
    try:
        outcome = check.run(check.trial(seed))
    except Exception as exc:  # a bug or a broken dependency: say so in the row, never pass
        last = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{last.filename.split('/')[-1]}:{last.lineno}"
        outcome = Outcome("fail", f"error {type(exc).__name__}: {exc} ({where})")
    return Row(check, outcome, time.perf_counter() - start)


def run_checks(checks: Sequence[Check], seed: int) -> list[Row]:
    """Run `checks` in order, with a progress bar on a terminal."""
    bar = tqdm(checks, desc="checks", unit="check", disable=None, leave=False)
    return [run_check(c, seed) for c in bar]


@dataclass(frozen=True)
class Verification:
    """The checks run, their rows, the time they took, and whether --full would add some."""

    rows: tuple[Row, ...]
    seconds: float
    full_adds: bool

    @property
    def failed(self) -> int:
        """How many checks failed."""
        return sum(r.outcome.status == "fail" for r in self.rows)

    @property
    def code(self) -> int:
        """The exit code: 1 when a check failed, else 0."""
        return 1 if self.failed else 0


def verify(only: str | None, full: bool, seed: int) -> Verification:
    """Run the selected checks."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise DhwtError(f"--seed must be a non-negative integer, got {seed!r}")
    checks = select(only, full)
    start = time.perf_counter()
    rows = run_checks(checks, seed)
    return Verification(tuple(rows), time.perf_counter() - start,
                        not full and any(c.full_only for c in select(only, True)))
