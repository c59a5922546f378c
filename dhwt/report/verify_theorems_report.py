"""What `dhwt verify-theorems` prints of a dhwt.theory.runner.Verification: the table (one line
per check), the summary line and, when --full would add checks, a note saying so; or the JSON
document of the same rows."""

from __future__ import annotations

from collections.abc import Sequence

from dhwt.theory.runner import Row, Verification

COLUMNS = ("theorem", "kind", "check", "prediction", "measured", "result", "s")


def cells(row: Row) -> tuple[str, ...]:
    """One row's cells, in the order of COLUMNS."""
    c, o = row.check, row.outcome
    return (c.theorem, c.kind, c.name, c.prediction, o.measured, o.status.upper(),
            f"{row.seconds:.1f}")


def format_table(rows: Sequence[Row]) -> str:
    """A plain-text table with one line per check."""
    grid = [COLUMNS, *(cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in grid) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip()
             for line in grid]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def text(result: Verification) -> str:
    """The table, the summary line (passed, failed, seconds), and the note that --full adds
    checks when it would."""
    failed = result.failed
    lines = [format_table(result.rows),
             f"{len(result.rows) - failed} passed, {failed} failed in {result.seconds:.1f} s"]
    if result.full_adds:
        lines.append("(--full adds the long empirical checks)")
    return "\n".join(lines)


def document(result: Verification) -> dict:
    """The checks as JSON-ready data: one record per check (the table's columns, with the
    seconds unrounded), and the counts of passed and failed ones."""
    failed = result.failed
    return {"checks": [dict(zip(COLUMNS[:-1], cells(row)[:-1]), seconds=row.seconds)
                       for row in result.rows],
            "passed": len(result.rows) - failed, "failed": failed, "seconds": result.seconds,
            "full_adds_checks": result.full_adds}
