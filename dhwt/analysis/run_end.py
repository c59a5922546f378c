"""What a run's end-of-run report shows, computed (dhwt.report.run_report renders it): its
metric lines, those of its last step, and each member's exact fit at that step where the task
has ground truth (recorded by the trainer, or computed here from the last checkpoint:
dhwt.analysis.population).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dhwt.analysis.escape import SPLIT as POPULATION
from dhwt.analysis.population import run_population_fit
from dhwt.config.run import TrainConfig
from dhwt.runs.run import Run

#: The evaluation sets of a text task whose size the report gives in windows.
WINDOW_SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class RunEnd:
    """A finished run's numbers: every metric line (`records`), those of its last step
    (`final`), each member's exact fit there (`exact`: seed, loss, accuracy, and a population
    fit's certificate; [] for text), and a text task's windows per evaluation set (`windows`;
    None for a synthetic language)."""

    records: list[dict[str, object]]
    final: list[dict[str, object]]
    exact: list[dict[str, object]]
    windows: dict[str, int] | None


def run_end(run_dir: Path, config: TrainConfig, task) -> RunEnd:  # noqa: ANN001 (a Task or TextTask)
    """The numbers of the run in `run_dir`, trained to config.optim.steps on `task`."""
    records = Run(run_dir, config).metrics()
    final = [r for r in records if r["step"] == config.optim.steps]
    exact = [r for r in final if r["split"] == POPULATION]
    if task.truth is not None and not exact:
        fit = run_population_fit(run_dir, task)
        exact = [{"seed": seed, "loss": float(ce), "accuracy": float(acc)}
                 for seed, ce, acc in zip(fit.seeds, fit.cross_entropy, fit.accuracy)]
    windows = None if task.truth is not None else {
        **{split: task.n_strings(split) for split in WINDOW_SPLITS},
        "train_fresh": config.optim.batch_size}
    return RunEnd(records, final, exact, windows)
