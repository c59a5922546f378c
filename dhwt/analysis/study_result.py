"""What `dhwt study` found (dhwt.commands.study computes it, dhwt.report.study_report renders
it): its report, and the results that report shows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dhwt.analysis.analyze_result import Analysis
from dhwt.analysis.runs_closeness import RunsCloseness


@dataclass(frozen=True, eq=False)
class StudyResult:
    """A study run: its report, and the results it renders (a grammar study: the closeness of
    its runs; a text study: the analysis over all runs and one per run, by name)."""

    report: Path
    closeness: RunsCloseness | None = None
    analysis: Analysis | None = None
    per_run: dict[str, Analysis] | None = None
