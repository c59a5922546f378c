"""What `dhwt study` writes and prints of a study (dhwt.analysis.study_result.StudyResult): the
introduction of a grammar study's report, the line naming its report, or the JSON document of
its numbers."""

from __future__ import annotations

from pathlib import Path

from dhwt.analysis.study_result import StudyResult
from dhwt.config.run import TrainConfig
from dhwt.config.study import StudyConfig
from dhwt.report.analyze_report import document as analyze_document
from dhwt.report.json_document import json_text
from dhwt.report.runs_closeness_report import closeness_document


def study_intro(study: StudyConfig, trained: list[tuple[TrainConfig, Path]]) -> list[str]:
    """The lines above a grammar study's report: its description, grammar, objective, and each
    run as trained (`trained`: its config.toml and directory)."""
    objective = study.runs[0][1].data.objective
    return [
        study.description.strip(),
        "",
        f"Grammar `{study.data['grammar']}`, objective `{objective}`; runs: "
        + ", ".join(f"`{d.name}` (`{c.tying.tie_schedule}`, {c.optim.steps} steps, seeds "
                    f"{c.members.seeds})" for c, d in trained) + ".",
    ]


def study_output(result: StudyResult, as_json: bool = False) -> str:
    """What `dhwt study` prints: the line naming its report, or (`as_json`) the JSON document
    of its numbers."""
    if not as_json:
        return f"study report: {result.report}"
    return json_text({
        "report": str(result.report),
        "closeness": None if result.closeness is None else closeness_document(result.closeness),
        "analysis": None if result.analysis is None else analyze_document(result.analysis),
        "runs": None if result.per_run is None else {
            name: analyze_document(found) for name, found in result.per_run.items()}})
