"""The report of `dhwt analyze` (dhwt.analysis.analyze_result.Analysis): report.md with its
figures, the closeness report for a synthetic language's runs
(dhwt.report.runs_closeness_report) or the loss section for text runs
(dhwt.report.runs_loss_report), then the similarity section
(dhwt.report.runs_similarity_report); and the JSON document of its numbers."""

from __future__ import annotations

from pathlib import Path

from dhwt.analysis.analyze_result import Analysis
from dhwt.analysis.runs_closeness import RunsCloseness
from dhwt.analysis.runs_loss import RunsLoss
from dhwt.analysis.runs_similarity import RunsSimilarity
from dhwt.filenames import REPORT
from dhwt.report.document import write_document
from dhwt.report.runs_closeness_report import closeness_document, write_runs_report
from dhwt.report.runs_loss_report import loss_lines
from dhwt.report.runs_similarity_report import similarity_document, similarity_lines


def write(folder: Path, intro: str, closeness: RunsCloseness | None, loss: RunsLoss | None,
          similarity: RunsSimilarity, measure: str) -> None:
    """folder/report.md (and .html) and the figures and files of its sections: the closeness
    report (`closeness`, with `measure`) or the loss section (`loss`), then the similarity."""
    if closeness is None:
        section = similarity_lines(similarity, folder)
        lines = ["# Runs report", "", intro, "", *loss_lines(loss, folder), *section]
        write_document(folder / REPORT, "\n".join(lines))
    else:
        write_runs_report(closeness, folder, title="Closeness of symbol pairs", intro=[intro],
                          measure=measure, extra=lambda: similarity_lines(similarity, folder))


def document(result: Analysis) -> dict:
    """The analysis as JSON-ready data: the record (analyze.json), each run's final fit
    (synthetic runs) and the similarity curves (similarity.json's numbers), or why they were
    skipped."""
    similarity = result.similarity
    return {**result.record, "report": str(result.report),
            "closeness": None if result.closeness is None else closeness_document(
                result.closeness),
            "similarity_curves": None if similarity.curves is None else similarity_document(
                similarity.curves),
            "similarity_skipped": similarity.skipped}
