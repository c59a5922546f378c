"""`dhwt diagnose PATH`: the DH diagnostic of a dhwt run directory, a pretrained checkpoint or a
Hugging Face Hub id (dhwt.analysis.diagnose_result), rendered by dhwt.report.diagnose_report
(the summary, the JSON document, and the --out folder)."""

from __future__ import annotations

from dhwt.analysis.diagnose_result import DiagnoseOptions, diagnose_path
from dhwt.directories import check_report_dir
from dhwt.report import diagnose_report
from dhwt.report.output import Output, rendered

__all__ = ["DiagnoseOptions", "check_out", "diagnose_command"]


def diagnose_command(path: str, options: DiagnoseOptions, out: str | None = None,
                     as_json: bool = False) -> Output:
    """What `dhwt diagnose` prints: the summary or (`as_json`) the JSON document, and the line
    naming the report written to `out` (--out is checked before anything is read)."""
    if out is not None:
        check_out(out)
    result = diagnose_path(path, options)
    note = None if out is None else f"report: {diagnose_report.write(result, out, options.top)}"
    return rendered(result, as_json, diagnose_report.text,
                    lambda found: diagnose_report.document(found, options.top), note)


def check_out(out: str) -> None:
    """Refuse a report directory that holds anything but an earlier diagnose report
    (dhwt.directories.check_report_dir)."""
    check_report_dir(out, "diagnose", diagnose_report.JSON, diagnose_report.LAYOUT)
