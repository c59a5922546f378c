"""`dhwt analyze RUN_DIR...`: the report of any run directories of one vocabulary.

Runs of a synthetic language (RUN_DIR/data for a run built with `--grammar`, else the dataset
directory the config names) get the closeness report with the exact relations and the Bayes
optimum (dhwt.analysis.runs_closeness, rendered by dhwt.report.runs_report); runs without one
(text) get loss, accuracy and perplexity. Both get the similarity of embedding spaces over
training (dhwt.analysis.runs_similarity, rendered by dhwt.report.run_similarity): KNN match
between members with its chance level, and the DH diagnostic of untied members. Every run must
share its vocabulary. This module joins them into a dhwt.analysis.run_analysis.Analysis, whose
report and JSON document are dhwt.report.analyze_report's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from dhwt.analysis.run_analysis import Analysis
from dhwt.analysis.runs_closeness import runs_closeness
from dhwt.analysis.runs_loss import runs_loss
from dhwt.analysis.runs_similarity import SimilarityOptions, runs_similarity
from dhwt.directories import kind_of, replace_report
from dhwt.errors import DhwtError
from dhwt.filenames import ANALYZE_LAYOUT, ANALYZE_RECORD, REPORT
from dhwt.report import analyze_report
from dhwt.report.json_document import json_text, write_json
from dhwt.runs.run import is_run, load_run
from dhwt.runs.snapshots import vocabulary_difference


def parse_pairs(text: str) -> tuple[tuple[str, str], ...]:
    """`"0a:0b,1a:1b"` -> (("0a", "0b"), ("1a", "1b"))."""
    pairs = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 2 or not all(parts):
            raise DhwtError(f"bad --pairs {text!r}: write pairs as A:B joined by commas, "
                            f"e.g. 0a:0b,1a:1b")
        pairs.append((parts[0], parts[1]))
    return tuple(pairs)


def run_labels(dirs: Sequence[Path]) -> list[str]:
    """Each run's label in the report: the shortest ending of the resolved paths that tells
    every run apart (its name alone where that does). One directory given twice is refused.

    Examples:
        >>> run_labels([Path("a/runs/tied"), Path("a/runs/untied")])
        ['tied', 'untied']
        >>> run_labels([Path("study_a/runs/tied"), Path("study_b/runs/tied")])
        ['study_a/runs/tied', 'study_b/runs/tied']
    """
    resolved = [d.resolve() for d in dirs]
    for i, path in enumerate(resolved):
        if path in resolved[:i]:
            first = dirs[resolved.index(path)]
            raise DhwtError(f"{first} is given twice; give each run once" if first == dirs[i]
                            else f"{first} and {dirs[i]} are the same run directory; give each "
                            "run once")

    def endings(depth: int) -> list[str]:
        return ["/".join(p.parts[-depth:]).lstrip("/") for p in resolved]

    # the whole paths differ, so some depth up to the longest tells them apart
    return endings(next(depth for depth in range(1, max(len(p.parts) for p in resolved) + 1)
                        if len(set(endings(depth))) == len(dirs)))


def analyze_command(run_dirs: Sequence[str], out: str, pairs: str | None, measure: str,
                    similarity: SimilarityOptions, as_json: bool = False) -> tuple[str, str | None]:
    """What `dhwt analyze` prints: the line naming the report, and with `as_json` the JSON
    document of its numbers."""
    found = analyze(run_dirs, out, pairs=pairs, measure=measure, similarity=similarity)
    return f"report: {found.report}", json_text(analyze_report.document(found)) if as_json else None


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
