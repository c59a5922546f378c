"""What `dhwt analyze` finds (dhwt.commands.analyze joins it; dhwt.report.analyze_report renders
it): the closeness of a synthetic language's runs or the loss of text runs, and the similarity
of embedding spaces over training, with the report written and the record of what was
analysed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dhwt.analysis.runs_closeness import RunsCloseness
from dhwt.analysis.runs_loss import RunsLoss
from dhwt.analysis.runs_similarity import RunsSimilarity


@dataclass(frozen=True, eq=False)
class Analysis:
    """What `dhwt analyze` found: the report's path, what was analysed (the record), the
    closeness of a synthetic language's runs (None for text), the loss of text runs (None for a
    synthetic language's) and the similarity."""

    report: Path
    record: dict
    closeness: RunsCloseness | None
    similarity: RunsSimilarity
    loss: RunsLoss | None = None
