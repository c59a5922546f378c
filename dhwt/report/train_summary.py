"""What `dhwt train` prints of a run it trained (dhwt.runs.result.RunResult): one line, after a
line per note (a repair a resume made, what the run's data leaves out), or the JSON document of
the same result."""

from __future__ import annotations

from dhwt.report.json_document import json_text
from dhwt.runs.result import RunResult


def trained(result: RunResult, resume: bool, as_json: bool = False) -> str:
    """The line (or with `as_json` the JSON document) of what training did."""
    if as_json:
        return json_text(document(result, resume))
    where = f"run directory: {result.run_dir} (see report.md)"
    notes = "".join(f"{note}\n" for note in result.notes)
    if not resume:
        return f"{notes}trained {result.step} steps in {result.seconds:.1f} s; {where}"
    if not result.touched:
        return (f"{result.run_dir} is already trained to step {result.step}; nothing to do (to "
                f"train on, --resume --steps M with M > {result.step})")
    if result.start == result.step:
        return f"{notes}training had reached step {result.step}; wrote its report; {where}"
    return (f"{notes}resumed at step {result.start} and trained to step {result.step} "
            f"({result.step - result.start} steps) in {result.seconds:.1f} s; {where}")


def document(result: RunResult, resume: bool) -> dict:
    """The result as JSON-ready data: the run, the steps trained, the last evaluation (one
    record per member and split, as metrics.jsonl holds them) and the newest checkpoint."""
    return {"run_dir": str(result.run_dir), "resumed": resume, "start": result.start,
            "step": result.step, "trained": result.touched, "seconds": result.seconds,
            "notes": list(result.notes), "checkpoint": str(result.checkpoint),
            "final_metrics": result.final_metrics}
