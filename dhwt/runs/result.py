"""What a command left from a run: training's run directory, as the runner returns it
(dhwt.training.runner) and dhwt.report.train_summary renders it; an export's folder, as `dhwt
export` returns it (dhwt.runs.hf_export) and dhwt.report.export_report renders it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunResult:
    """What a finished run left: its directory, final step, last evaluation and checkpoint, and
    the step this call started from (0 fresh; the checkpoint's on resume); `touched` is False
    for a finished run that a resume left as it was; `notes`: what a resume repaired in the
    run's record (dhwt.runs.history)."""

    run_dir: Path
    step: int
    final_metrics: list[dict[str, object]]
    checkpoint: Path
    seconds: float
    start: int = 0
    touched: bool = True
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Exported:
    """What was written: the folder, the member's seed, the step, whether tied, the notes."""

    out: Path
    member: int
    seed: int
    step: int
    tied: bool
    files: tuple[str, ...]
    notes: tuple[str, ...]
