"""The similarity section of a runs report from its result (dhwt.analysis.runs_similarity):
a line saying why it was skipped, or the curves' figures, files and markdown
(dhwt.report.similarity_report)."""

from __future__ import annotations

from pathlib import Path

from dhwt.analysis.runs_similarity import RunsSimilarity
from dhwt.report.similarity_report import similarity_section


def similarity_lines(result: RunsSimilarity, out: Path) -> list[str]:
    """Write the curves' files into `out`; return the report lines (none when nothing was
    asked)."""
    if result.curves is None and result.skipped is None:
        return []
    heading = ["## Similarity of embedding spaces over training", ""]
    if result.skipped is not None:
        return heading + [f"Skipped: {result.skipped}.", ""]
    return similarity_section(result.curves, out, score=result.options.score,
                              k_note=result.k_note, tokens_note=result.tokens_note,
                              schedules=result.schedules, runs=result.run_of)
