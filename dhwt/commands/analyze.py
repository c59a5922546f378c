"""`dhwt analyze RUN_DIR...`: the report of any run directories of one vocabulary.

Runs of a synthetic language (RUN_DIR/data for a run built with `--grammar`, else the dataset
directory the config names) get the closeness report with the exact relations and the Bayes
optimum (dhwt.analysis.runs_closeness, rendered by dhwt.report.runs_closeness_report); runs
without one (text) get loss, accuracy and perplexity (dhwt.analysis.runs_loss). Both get the
similarity of embedding spaces over training (dhwt.analysis.runs_similarity, rendered by
dhwt.report.runs_similarity_report): KNN match between members with its chance level, and the
DH diagnostic of untied members. Every run must
share its vocabulary. This module joins them into a dhwt.analysis.analyze_result.Analysis, whose
report and JSON document are dhwt.report.analyze_report's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from dhwt.analysis.analyze_result import Analysis, parse_pairs, run_labels
from dhwt.analysis.runs_closeness import runs_closeness
from dhwt.analysis.runs_loss import runs_loss
from dhwt.analysis.runs_similarity import SimilarityOptions, runs_similarity
from dhwt.directories import kind_of, replace_report
from dhwt.errors import DhwtError
from dhwt.filenames import ANALYZE_LAYOUT, ANALYZE_RECORD, REPORT
from dhwt.report import analyze_report
from dhwt.report.json_document import json_text, write_json
from dhwt.report.output import Output
from dhwt.runs.run import is_run, load_run
from dhwt.runs.snapshots import vocabulary_difference


def analyze_command(run_dirs: Sequence[str], out: str, pairs: str | None, measure: str,
                    similarity: SimilarityOptions, as_json: bool = False) -> Output:
    """What `dhwt analyze` prints: the line naming the report, and with `as_json` the JSON
    document of its numbers."""
    found = analyze(run_dirs, out, pairs=pairs, measure=measure, similarity=similarity)
    document = json_text(analyze_report.document(found)) if as_json else None
    return Output(document, f"report: {found.report}", as_json)


def analyze(run_dirs: Sequence[str | Path], out: str | Path, *, pairs: str | None = None,
            measure: str = "normalised", similarity: SimilarityOptions | None = None,
            owned: bool = False) -> Analysis:
    """Write out/report.md (and .html), out/figures/ and out/analyze.json for `run_dirs`;
    return the report's path and the results (analyze_report.document gives them as JSON-ready data). `out`
    must be new, empty or an earlier analyze report, which is replaced whole once the new one
    is complete (dhwt.directories.replace_report), unless `owned` (a study writing its own
    report and analysis folders in place)."""
    dirs = [Path(d) for d in run_dirs]
    if not dirs:
        raise DhwtError("give at least one run directory")
    loaded = {d: load_run(d) for d in dirs}
    kind = kind_of(Path(out)) or ("run" if is_run(out) else None)
    if kind is not None and not owned:
        raise DhwtError(f"--out {out} is a {kind} directory, whose own files (report.md, "
                        "figures/) the analysis would replace; give another directory")
    vocabularies = {d: loaded[d].vocab for d in dirs}
    other = next((d for d in dirs if vocabularies[d] != vocabularies[dirs[0]]), None)
    if other is not None:
        raise DhwtError("the runs have different vocabularies: " + vocabulary_difference(
            dirs[0], vocabularies[dirs[0]], other, vocabularies[other]))
    runs, out = dict(zip(run_labels(dirs), dirs)), Path(out)
    options = similarity or SimilarityOptions()
    data = loaded[dirs[0]].dataset
    if data is None and pairs:
        raise DhwtError(f"--pairs tracks symbols of a synthetic language; {dirs[0]} was not "
                        "trained on one")
    task = None if data is None else loaded[dirs[0]].task  # the data checked to be the run's
    record = {"runs": [str(d) for d in dirs], "pairs": pairs, "measure": measure,
              "similarity": asdict(options)}
    found: dict[str, object] = {"closeness": None, "loss": None}

    def write(folder: Path) -> Path:
        if data is None:  # no synthetic language: text
            found["similarity"] = runs_similarity(runs, options)
            found["loss"] = runs_loss(runs)
        else:
            found["closeness"] = runs_closeness(runs, task, parse_pairs(pairs) if pairs else None)
            found["similarity"] = runs_similarity(runs, options)
        analyze_report.write(folder, f"Runs: {', '.join(str(d) for d in dirs)}.",
                             found["closeness"], found["loss"], found["similarity"], measure)
        write_json(folder / ANALYZE_RECORD, record)
        return out / REPORT

    report = write(out) if owned else replace_report(out, "analyze", ANALYZE_RECORD,
                                                      ANALYZE_LAYOUT, write)
    return Analysis(report, record, found["closeness"], found["similarity"], found["loss"])
