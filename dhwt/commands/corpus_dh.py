"""`dhwt corpus-dh`: the distributional hypothesis estimated from counts, without a model.

Joins dhwt.analysis.corpus_dh_result (the counting and comparing) and
dhwt.report.corpus_dh_report (the text, the JSON document and the --out folder).
"""

from __future__ import annotations

from pathlib import Path

from dhwt.analysis.corpus_dh_result import CorpusDhOptions, corpus_dh
from dhwt.directories import check_report_dir
from dhwt.report import corpus_dh_report
from dhwt.report.json_document import json_text

__all__ = ["CorpusDhOptions", "check_out", "corpus_dh_command"]


def corpus_dh_command(options: CorpusDhOptions, *, as_json: bool = False,
                      out: str | None = None) -> str:
    """What `dhwt corpus-dh` prints: the JSON document or the text report (and with `out`,
    the files written there; --out is checked before any counting)."""
    if out is not None:
        check_out(out)
    result = corpus_dh(options)
    if out is not None:
        corpus_dh_report.write(result, out)
    if as_json:
        return json_text(corpus_dh_report.document(result))
    text = corpus_dh_report.text(result)
    if out is not None:
        text += (f"\nwrote {out}: report.md, report.html, {corpus_dh_report.JSON}, "
                 f"{corpus_dh_report.PER_TOKEN}, {corpus_dh_report.FIGURE}")
    return text


def check_out(out: str | Path) -> None:
    """DhwtError unless `out` may hold the report: new, empty, or an earlier corpus-dh report
    (dhwt.directories.check_report_dir)."""
    check_report_dir(out, "corpus-dh", corpus_dh_report.JSON, corpus_dh_report.LAYOUT)
