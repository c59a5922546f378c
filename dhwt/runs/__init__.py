"""Run directories on disk: one package owns their layout (layout), the files in them (metrics,
embedding snapshots, checkpoints) and reading a run back (`load_run`). The trainer writes
through it; analysis, reports and the theorems' checks read through it."""

from dhwt.runs.run import Run, load_run

__all__ = ["Run", "load_run"]
