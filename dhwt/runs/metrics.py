"""metrics.jsonl: one JSON object per line, appended and flushed as evaluations happen.

Each line has at least `step`. On resume the file is cut back to the lines with step <= the
checkpoint's step (atomically), so a resumed run neither repeats nor loses a line, and a line half
written by a killed process is dropped.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dhwt.errors import DhwtError
from dhwt.directories import atomic_write_bytes


def metric_table(records: list[dict], split: str,
                 metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps (T,), values (T, S)) of one split's metric from metrics records, members in
    index order; nan where a member has no line at a step.

    Examples:
        >>> rows = [{"step": s, "member": m, "split": "train", "loss": s + m}
        ...         for s in (0, 10) for m in (0, 1)]
        >>> steps, table = metric_table(rows, "train", "loss")
        >>> steps.tolist(), table.tolist()
        ([0, 10], [[0.0, 1.0], [10.0, 11.0]])
    """
    rows = [r for r in records if r["split"] == split]
    steps = sorted({r["step"] for r in rows})
    members = {m: i for i, m in enumerate(sorted({r["member"] for r in rows}))}
    table = np.full((len(steps), len(members)), np.nan)
    at = {s: i for i, s in enumerate(steps)}
    for r in rows:
        table[at[r["step"]], members[r["member"]]] = r[metric]
    return np.array(steps), table


def read_metrics(path: Path) -> list[dict[str, object]]:
    """All complete lines of a metrics file (a final line cut short by a kill is skipped).

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> tmp = tempfile.TemporaryDirectory()
        >>> path = Path(tmp.name) / "metrics.jsonl"
        >>> writer = MetricsWriter(path)
        >>> writer.write([{"step": 0, "loss": 1.5}, {"step": 10, "loss": 0.75}])
        >>> writer.close()
        >>> with open(path, "a") as file:  # a line a killed writer left half written
        ...     _ = file.write('{"step": 20, "lo')
        >>> read_metrics(path)
        [{'step': 0, 'loss': 1.5}, {'step': 10, 'loss': 0.75}]
        >>> tmp.cleanup()
    """
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):  # the unterminated last line of a killed writer
                break
            raise DhwtError(f"{path} line {number} is not valid JSON") from None
    return records


def truncate_metrics(path: Path, step: int) -> None:
    """Keep only the lines with step <= `step`, rewriting the file atomically."""
    kept = [r for r in read_metrics(path) if int(r["step"]) <= step]
    atomic_write_bytes(path, "".join(json.dumps(r) + "\n" for r in kept).encode("utf-8"))


class MetricsWriter:
    """Appends records to metrics.jsonl, one flushed line each."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = open(path, "a", encoding="utf-8")

    def write(self, records: list[dict[str, object]]) -> None:
        self._fh.write("".join(json.dumps(r) + "\n" for r in records))
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()
