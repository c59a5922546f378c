"""Run theorem checks and print the table `dhwt verify-theorems` shows."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tqdm import tqdm

from dhwt.errors import DhwtError
from dhwt.theory.check import Check, Outcome
from dhwt.theory.registry import select

COLUMNS = ("theorem", "kind", "check", "prediction", "measured", "result", "s")


@dataclass(frozen=True)
class Row:
    """One check's result and how long it took."""

    check: Check
    outcome: Outcome
    seconds: float

    def cells(self) -> tuple[str, ...]:
        c, o = self.check, self.outcome
        return (c.theorem, c.kind, c.name, c.prediction, o.measured, o.status.upper(),
                f"{self.seconds:.1f}")


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


def format_table(rows: Sequence[Row]) -> str:
    """A plain-text table with one line per check."""
    cells = [COLUMNS, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary(rows: Sequence[Row], seconds: float) -> str:
    failed = sum(r.outcome.status == "fail" for r in rows)
    return f"{len(rows) - failed} passed, {failed} failed in {seconds:.1f} s"


@dataclass(frozen=True)
class Verification:
    """The checks run, their rows, the time they took, and whether --full would add some."""

    rows: tuple[Row, ...]
    seconds: float
    full_adds: bool

    @property
    def code(self) -> int:
        """The exit code: 1 when a check failed, else 0."""
        return 1 if any(r.outcome.status == "fail" for r in self.rows) else 0


def verify(only: str | None, full: bool, seed: int) -> Verification:
    """Run the selected checks."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise DhwtError(f"--seed must be a non-negative integer, got {seed!r}")
    checks = select(only, full)
    start = time.perf_counter()
    rows = run_checks(checks, seed)
    return Verification(tuple(rows), time.perf_counter() - start,
                        not full and any(c.full_only for c in select(only, True)))


def verify_theorems(only: str | None, full: bool, seed: int,
                    echo: Callable[[str], None] = print) -> int:
    """Run the selected checks, print the table and a summary; return the exit code (1: a fail)."""
    result = verify(only, full, seed)
    echo(format_table(result.rows))
    echo(summary(result.rows, result.seconds))
    if result.full_adds:
        echo("(--full adds the long empirical checks)")
    return result.code


def document(result: Verification) -> dict:
    """The checks as JSON-ready data: one record per check (the table's columns), and the
    counts of passed and failed ones."""
    failed = sum(r.outcome.status == "fail" for r in result.rows)
    return {"checks": [dict(zip(COLUMNS[:-1], row.cells()[:-1]), seconds=row.seconds)
                       for row in result.rows],
            "passed": len(result.rows) - failed, "failed": failed, "seconds": result.seconds,
            "full_adds_checks": result.full_adds}
