"""metrics.jsonl: one JSON object per line, appended and flushed as evaluations happen.

Each line has at least `step`. On resume the file is cut back to the lines with step <= the
checkpoint's step (atomically), so a resumed run neither repeats nor loses a line, and a line half
written by a killed process is dropped.

With `tensorboard` (dhwt.config.run.RecordConfig) the same writer also logs each line's numbers as
TensorBoard scalars in RUN_DIR/tensorboard, so that the two never disagree. tensorboard is an
optional extra (`pip install 'dhwt[tensorboard]'`), imported only when a run asks for it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from dhwt.errors import DhwtError
from dhwt.directories import atomic_write_bytes
from dhwt.filenames import TENSORBOARD_MEMBER


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
    """All complete lines of a metrics file (a final line cut short by a kill is skipped);
    DhwtError naming the first other line that is not UTF-8 JSON.

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
    lines = path.read_bytes().split(b"\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if number == len(lines):  # the unterminated last line of a killed writer
                break
            what = "UTF-8 text" if isinstance(exc, UnicodeDecodeError) else "valid JSON"
            raise DhwtError(f"{path} line {number} is not {what}") from None
    return records


def truncate_metrics(path: Path, step: int) -> None:
    """Keep only the lines with step <= `step`, rewriting the file atomically."""
    kept = [r for r in read_metrics(path) if int(r["step"]) <= step]
    atomic_write_bytes(path, "".join(json.dumps(r) + "\n" for r in kept).encode("utf-8"))


TENSORBOARD_MISSING = ("--tensorboard needs the tensorboard package: "
                       "pip install 'dhwt[tensorboard]'")


def summary_writer() -> type:
    """torch's SummaryWriter, imported here and only when a run asks for TensorBoard (the
    package is an optional extra); DhwtError if tensorboard is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise DhwtError(TENSORBOARD_MISSING) from None
    return SummaryWriter


def board_scalars(record: dict[str, object]) -> tuple[dict[str, float], dict[str, float]]:
    """The TensorBoard scalars of a trainer's metric line: (those of its split: loss, accuracy
    and perplexity = exp(loss), tagged e.g. "loss/valid"; those of its member at its step, which
    every split's line repeats: lr, tied (1 or 0) and gap).

    Examples:
        >>> line = {"step": 10, "member": 0, "seed": 42, "split": "valid", "loss": 0.0,
        ...         "accuracy": 0.5, "lr": 1e-3, "tied": True, "gap": 0.0}
        >>> split, member = board_scalars(line)
        >>> split
        {'loss/valid': 0.0, 'accuracy/valid': 0.5, 'perplexity/valid': 1.0}
        >>> member
        {'lr': 0.001, 'tied': 1.0, 'gap': 0.0}
    """
    split, loss = record["split"], float(record["loss"])
    # Stored as float32, where exp(loss) is inf beyond 88 nats; min() keeps math.exp finite.
    return ({f"loss/{split}": loss, f"accuracy/{split}": float(record["accuracy"]),
             f"perplexity/{split}": math.exp(min(loss, 709.0))},
            {"lr": float(record["lr"]), "tied": float(record["tied"]),
             "gap": float(record["gap"])})


class MetricsWriter:
    """Appends records to metrics.jsonl, one flushed line each. Given `tensorboard` (a folder,
    RUN_DIR/tensorboard), it also logs each record's board_scalars there at the record's step
    (the global step), in one subfolder per member, seed_S, which TensorBoard shows as one run
    each (the seeds overlaid in one chart); the events are flushed with the line.

    `start`: the step the run goes on from (0, or the checkpoint's step on resume, where
    truncate_metrics has cut metrics.jsonl back to it). Events of later steps, left by a run
    killed past its last checkpoint, must not show twice: each event file opened here begins
    with SummaryWriter(purge_step=start + 1), whose SessionLog.START makes TensorBoard drop what
    it read before at steps > start. (TensorBoard's Rust loader ignores that event but drops a
    series' points from a step written again onwards: the stale points go as soon as the
    resumed run logs that series.)"""

    def __init__(self, path: Path, tensorboard: Path | None = None, start: int = 0) -> None:
        self.path = path
        self._board_class = None if tensorboard is None else summary_writer()
        self._tensorboard, self._purge_step = tensorboard, start + 1
        self._boards: dict[int, object] = {}  # a SummaryWriter per seed, opened at its first line
        self._member_steps: dict[int, int] = {}  # per seed, the step of its last lr, tied, gap
        self._fh = open(path, "a", encoding="utf-8")

    def write(self, records: list[dict[str, object]]) -> None:
        self._fh.write("".join(json.dumps(r) + "\n" for r in records))
        self._fh.flush()
        if self._tensorboard is None:
            return
        for record in records:
            seed, step = int(record["seed"]), int(record["step"])
            if seed not in self._boards:
                self._boards[seed] = self._board_class(
                    str(self._tensorboard / TENSORBOARD_MEMBER.format(seed)),
                    purge_step=self._purge_step)
            split, member = board_scalars(record)
            if self._member_steps.get(seed) == step:  # logged with another split's line
                member = {}
            self._member_steps[seed] = step
            for tag, value in {**split, **member}.items():
                self._boards[seed].add_scalar(tag, value, step)
        for board in self._boards.values():
            board.flush()

    def close(self) -> None:
        self._fh.close()
        for board in self._boards.values():
            board.close()
