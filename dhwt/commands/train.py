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
        reported = parallel.on_writer(lambda: report_run(result))
    return reported if parallel.writes else None


def report_run(result: RunResult, task=None) -> RunResult:  # noqa: ANN001 (a Task or TextTask)
    """Write the figure and report.md of the run `result` trained on `task` (None: the run's own
    data), or left finished without its report (then the result says that it wrote it); note
    when its training split holds at most half of the language (split_line)."""
    run = load_run(result.run_dir)
    if not result.touched and run.report.is_file():
        return result
    task = run.task if task is None else task
    try:
        with lock(result.run_dir, f"run directory {result.run_dir}"):
            write_run_report(result.run_dir, run.config, task,
                             run_end(result.run_dir, run.config, task))
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted at step {result.step} while writing the report of "
                          f"{result.run_dir}; training is done and --resume writes it") from None
    except OSError as exc:
        raise DhwtError(f"cannot write the report of {result.run_dir}: {exc.strerror or exc}; "
                        "training is done and --resume writes it") from None
    line = split_line(task, FEW) if result.start == 0 else None
    return replace(result, touched=True, notes=(*result.notes, *([f"note: {line}"] if line else [])))
