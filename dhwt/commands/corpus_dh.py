"""`dhwt corpus-dh`: the distributional hypothesis estimated from counts, without a model.

The counting and comparing is dhwt.analysis.corpus_dh_result's; dhwt.report.corpus_dh_report
renders it (the text, the JSON document and the --out folder).
"""

from __future__ import annotations

from pathlib import Path

from dhwt.analysis.corpus_dh_result import CorpusDhOptions, corpus_dh
from dhwt.directories import check_report_dir
from dhwt.report import corpus_dh_report
from dhwt.report.output import Output, rendered

__all__ = ["CorpusDhOptions", "check_out", "corpus_dh_command"]


def corpus_dh_command(options: CorpusDhOptions, *, as_json: bool = False,
                      out: str | None = None) -> Output:
    """What `dhwt corpus-dh` prints: the JSON document or the text report, and with `out` the
    files written there (--out is checked before any counting)."""
    if out is not None:
        check_out(out)
    result = corpus_dh(options)
    if out is not None:
        corpus_dh_report.write(result, out)
        if not as_json:
            return Output(f"{corpus_dh_report.text(result)}\n{corpus_dh_report.written(out)}")
    return rendered(result, as_json, corpus_dh_report.text, corpus_dh_report.document)


def check_out(out: str | Path) -> None:
    """DhwtError unless `out` may hold the report: new, empty, or an earlier corpus-dh report
    (dhwt.directories.check_report_dir)."""
    check_report_dir(out, "corpus-dh", corpus_dh_report.JSON, corpus_dh_report.LAYOUT)
