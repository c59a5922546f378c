"""What the loss section of a report on text runs computes (dhwt.report.runs_loss_report renders
it): for runs whose task has no exact ground truth, each run's last evaluation of each split
summarised over members, and loss and accuracy over training, read from metrics.jsonl. Runs of a
synthetic language get the closeness report instead (dhwt.analysis.runs_closeness), which
compares with the Bayes optimum."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dhwt.analysis.intervals import NON_NEGATIVE, SHARE, Summary, summarise
from dhwt.config.schedule import TieEvent
from dhwt.errors import DhwtError
from dhwt.runs import Run, load_run
from dhwt.runs.metrics import metric_table

FINAL_SPLITS = ("valid", "test", "train")  # final values, one run's next to each other
CURVES = ("valid", "train")  # curves: the trainer evaluates "test" at the last step only


@dataclass(frozen=True)
class FinalLoss:
    """One run's last evaluation of one split: cross-entropy (nats) and accuracy over members,
    each interval kept in its quantity's range (dhwt.analysis.intervals); windows: how many
    sequences the split's evaluation holds (text: windows of the run's seq_len tokens), None
    where the run's data is not at hand to count them."""

    run: str
    split: str
    step: int
    loss: Summary
    accuracy: Summary
    windows: int | None = None

    @property
    def perplexity(self) -> float:
        """exp of the mean cross-entropy."""
        return math.exp(self.loss.centre)


@dataclass(frozen=True, eq=False)
class RunsLoss:
    """finals: per run, its splits in FINAL_SPLITS order; loss, accuracy: split -> run ->
    (steps (T,), values (T, S)) over training, for the CURVES splits some run evaluated; events:
    each run's tie switches."""

    finals: tuple[FinalLoss, ...]
    loss: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]
    accuracy: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]
    events: dict[str, tuple[TieEvent, ...]]


def runs_loss(runs: Mapping[str, Path]) -> RunsLoss:
    """The loss and accuracy of `runs` (name -> run directory)."""
    loaded = {name: load_run(run) for name, run in runs.items()}
    records = {name: run.metrics() for name, run in loaded.items()}
    finals = []
    for name, rows in records.items():
        splits = [split for split in FINAL_SPLITS if any(r["split"] == split for r in rows)]
        windows = _windows(loaded[name], splits)
        for split in splits:
            steps, losses = metric_table(rows, split, "loss")
            finals.append(FinalLoss(
                name, split, int(steps[-1]), summarise(losses[-1], bounds=NON_NEGATIVE),
                summarise(metric_table(rows, split, "accuracy")[1][-1], bounds=SHARE),
                windows.get(split)))
    loss, accuracy = {}, {}
    for split in CURVES:
        curves = {name: metric_table(r, split, "loss") for name, r in records.items()
                  if any(x["split"] == split for x in r)}
        if curves:
            loss[split] = curves
            accuracy[split] = {name: metric_table(records[name], split, "accuracy")
                               for name in curves}
    return RunsLoss(tuple(finals), loss, accuracy,
                    {name: run.tie_events for name, run in loaded.items()})


def _windows(run: Run, splits: list[str]) -> dict[str, int]:
    """split -> the sequences its evaluation holds, counted on the run's data as its config
    names it (the same windows the trainer evaluated: check_task holds them equal); none where
    that data is not at hand (a corpus on another machine, a task given only in code)."""
    try:
        task = run.task
    except DhwtError:
        return {}
    return {split: task.n_strings(split) for split in splits}
