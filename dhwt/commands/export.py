"""`dhwt export RUN --to hf --out DIR`: one member of a run written as a Hugging Face checkpoint
that transformers loads (dhwt.runs.hf_export), and the line saying what was written
(dhwt.report.export_report)."""

from __future__ import annotations

from functools import partial

from dhwt.report import export_report
from dhwt.report.output import Output, rendered
from dhwt.runs.hf_export import ExportOptions, export_run

__all__ = ["ExportOptions", "export_command"]


def export_command(run_dir: str, out: str, options: ExportOptions, as_json: bool = False
                   ) -> Output:
    """Export; what `dhwt export` prints: the line saying what was written (or, `as_json`, its
    JSON document)."""
    done = export_run(run_dir, out, options)
    return rendered(done, as_json, partial(export_report.text, run_dir=run_dir),
                    partial(export_report.document, run_dir=run_dir))
