"""`dhwt train`: a run's config resolved from the flags and files
(dhwt.training.run_config), trained by the library (dhwt.training.runner), then its figure and
report.md written (dhwt.analysis.run_end computes, dhwt.report.run_report renders).

Under torchrun every process runs this; rank 0 creates RUN_DIR (the others wait for it) and is
the only one to write (dhwt.training.distributed).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dhwt.analysis.run_end import run_end
from dhwt.directories import lock
from dhwt.errors import DhwtError, Interrupted
from dhwt.report.run_report import FEW, split_line, write_run_report
from dhwt.runs.layout import run_paths
from dhwt.runs.result import RunResult
from dhwt.runs.run import load_run
from dhwt.training.distributed import launch
from dhwt.training.run_config import resolve_run_config, run_inputs
from dhwt.training.runner import train_run


def train_command(options: dict[str, object], *, config_file: str | None, out: str,
                  overwrite: bool = False, resume: bool = False) -> RunResult | None:
    """Run `dhwt train`. `options` holds only the flags the user gave (TrainConfig field names).
    Returns the result on rank 0 (the only process of a plain launch) and None on the others."""
    run_dir = Path(out)
    config = resolve_run_config(options, config_file, run_dir, overwrite, resume)
    with launch(config.placement.device) as parallel:  # its backend follows the device
        result = train_run(config, None, run_dir, resume=resume, overwrite=overwrite,
                           inputs=(config_file, *run_inputs(config)), parallel=parallel)
        reported = parallel.on_writer(lambda: _reported(result))
    return reported if parallel.writes else None


def _reported(result: RunResult) -> RunResult:
    """`result` once the run's report is written: where it trained, or where it had finished
    without its report (then the result says that it wrote it); noting when its training split
    holds at most half of the language (split_line)."""
    if not result.touched and run_paths(result.run_dir).report.is_file():
        return result
    task = load_run(result.run_dir).task
    report_run(result.run_dir, task)
    line = split_line(task, FEW) if result.start == 0 else None
    return replace(result, touched=True, notes=(*result.notes, *([f"note: {line}"] if line else [])))


def report_run(run_dir: Path, task) -> None:  # noqa: ANN001 (a Task or TextTask)
    """Write the figure and report.md of the finished run in `run_dir`, trained on `task`
    (dhwt.analysis.run_end computes, dhwt.report.run_report renders), holding its lock."""
    config = load_run(run_dir).config
    try:
        with lock(run_dir, f"run directory {run_dir}"):
            write_run_report(run_dir, config, task, run_end(run_dir, config, task))
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted at step {config.optim.steps} while writing the report "
                          f"of {run_dir}; training is done and --resume writes it") from None
    except OSError as exc:
        raise DhwtError(f"cannot write the report of {run_dir}: {exc.strerror or exc}; "
                        "training is done and --resume writes it") from None
