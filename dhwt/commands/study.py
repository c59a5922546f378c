"""`dhwt study FILE.toml --out DIR`: a study file read (dhwt.config.study.StudyConfig), its runs
trained in its claimed directory (dhwt.training.study), then, still holding the claim, each
run's report written (as `dhwt train` writes it: dhwt.commands.train.report_run), the study
analysed (a grammar study: the closeness of its runs; a text study: `dhwt analyze` of all runs
and of each) and its report written (dhwt.report.runs_closeness_report, dhwt.report.study_report).
"""

from __future__ import annotations

from pathlib import Path

from dhwt.analysis.runs_closeness import runs_closeness
from dhwt.analysis.runs_similarity import SimilarityOptions
from dhwt.analysis.study_result import StudyResult
from dhwt.commands.analyze import analyze
from dhwt.commands.train import report_run
from dhwt.config.study import StudyConfig
from dhwt.report.runs_closeness_report import write_runs_report
from dhwt.report.study_report import study_intro, study_output
from dhwt.runs.layout import StudyPaths, run_paths
from dhwt.training.study import (Say, claimed_study, study_task, train_study,
                                 trained_configs)
from dhwt.training.study_jobs import JobSettings


def study_command(study_file: str, out: str, overwrite: bool = False,
                  as_json: bool = False, *, steps: int | None = None,
                  jobs: JobSettings | None = None, say: Say | None = None) -> str:
    """What `dhwt study` prints: the line naming its report, or (`as_json`) the JSON document
    of its numbers (say: where its progress lines go, study_results)."""
    result = study_results(StudyConfig.from_toml(study_file), out, overwrite=overwrite,
                           steps=steps, jobs=jobs, say=say)
    return study_output(result, as_json)


def study_results(study: StudyConfig, out: str | Path, *, overwrite: bool = False,
                  steps: int | None = None, jobs: JobSettings | None = None,
                  say: Say | None = None) -> StudyResult:
    """Run (or continue) `study` into `out` (dhwt.training.study: `overwrite`, `steps`, `jobs`
    and `say` are its); write the report of each run trained now or still without one, then
    the study's; return its report and results."""
    with claimed_study(study, out, overwrite=overwrite, steps=steps, jobs=jobs) as paths:
        trained = set(train_study(study, paths, steps=steps, jobs=jobs, say=say))
        runs = [paths.run(name) for name, _ in study.runs]
        task = None if study.is_text else study_task(study, paths)
        for run_dir in runs:
            if run_dir in trained or not run_paths(run_dir).report.is_file():
                task = study_task(study, paths) if task is None else task
                report_run(run_dir, task)
        if say is not None:
            say(f"writing the report of {len(runs)} run{'s' if len(runs) > 1 else ''}")
        if study.is_text:
            return _text_report(runs, paths)
        closeness = runs_closeness({d.name: d for d in runs}, task, study.pairs)
        report = write_runs_report(closeness, paths.root, title=f"Study: {study.name}",
                                   intro=study_intro(study, trained_configs(study, paths)),
                                   measure=study.measure)
        return StudyResult(report, closeness=closeness)


def _text_report(runs: list[Path], paths: StudyPaths) -> StudyResult:
    """analysis/NAME/report.md per run (KNN match between its members over tokens seen in
    training, DH diagnostic) and report.md over all runs (loss, perplexity)."""
    per_run = {run.name: analyze([run], paths.analysis_of(run.name),
                                 similarity=SimilarityOptions(tokens="seen"), owned=True)
               for run in runs}
    found = analyze(runs, paths.root, similarity=SimilarityOptions(measures="none"), owned=True)
    return StudyResult(found.report, analysis=found, per_run=per_run)
