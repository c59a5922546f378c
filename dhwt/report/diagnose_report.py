"""The report of `dhwt diagnose`: a terminal summary, a JSON document, and report.md with a
figure (the distribution of per-token agreement against chance, and agreement by frequency)."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import numpy as np

from dhwt.analysis.dh_reading_result import EXCESS_AGREE, EXCESS_PARTLY, dh_reading
from dhwt.analysis.diagnose_result import DiagnoseResult
from dhwt.analysis.diagnosis import Diagnosis, Subject
from dhwt.analysis.knn_curves import excess_over_chance
from dhwt.analysis.knn.sample import Estimate
from dhwt.directories import replace_report
from dhwt.filenames import FIGURES, FILE, HTML, REPORT, Layout
from dhwt.report.document import write_document
from dhwt.report.dh_reading_report import describe, reading_text
from dhwt.report.figures import new_figure, save
from dhwt.report.json_document import write_json

JSON = "diagnose.json"
#: The figure, in the report's figures/ folder.
FIGURE_NAME = "diagnose.png"
FIGURE = f"{FIGURES}/{FIGURE_NAME}"
#: Everything diagnose writes into its --out folder (dhwt.filenames).
LAYOUT: Layout = {REPORT: FILE, HTML: FILE, JSON: FILE, FIGURES: {FIGURE_NAME: FILE}}
#: Neighbours shown beside each token of the per-token tables.
SHOWN = 5
#: Columns of the terminal text's wrapped reading.
WIDTH = 100
#: The JSON key of the headline number: the input/output KNN overlap.
KEY = "input_output_knn_overlap"


def text(result: DiagnoseResult) -> str:
    """The terminal summary: one block per subject."""
    lines = [result.description, _shape(result)] + [f"note: {n}" for n in result.notes]
    for s in result.subjects:
        lines.append("")
        lines.append(f"{s.name}: {history(s, result)}")
        if s.diagnosis is None:
            lines.append(f"  tied: {s.tied_because}; {reading(s, result)}")
            continue
        d = s.diagnosis
        lines += [f"  {_scope(d)}",
                  f"  overlap  {_estimate(d.overlap)}   (|N_in ∩ N_out|/k)",
                  f"  chance   {_estimate(d.chance) if d.chance else 'not computed'}",
                  f"  jaccard  {d.jaccard:.4f}   CKA {d.cka:.4f}   Procrustes error "
                  f"{_procrustes(d)}" + (f"   copy residue {s.residue:.3f}"
                                           if s.residue is not None else ""),
                  "  reading:", *reading_lines(reading(s, result))]
    return "\n".join(lines)


def reading_lines(text: str, width: int = WIDTH) -> list[str]:
    """A reading as short bullet lines: one per clause (the parts joined by "; " or set off as
    a "[flag: ...]", outside parentheses), each wrapped to `width` columns.

    Examples:
        >>> reading_lines("they agree (k 10; ip); a tied run decides [flag: a copy; mind it]")
        ['    - they agree (k 10; ip)', '    - a tied run decides', '    - flag: a copy; mind it']
    """
    clauses, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if depth == 0 and (text.startswith("; ", i) or text.startswith(" [flag: ", i)):
            clauses.append(text[start:i])
            start = i + 2  # past "; " or " ["
        depth += (c in "([") - (c in ")]")
    clauses.append(text[start:])
    return [line for clause in clauses
            for line in textwrap.wrap(clause.removesuffix("]")
                                      if clause.startswith("flag: ") else clause, width,
                                      initial_indent="    - ", subsequent_indent="      ")]


def document(result: DiagnoseResult, top: int) -> dict[str, object]:
    """Everything in the report as JSON-ready data; the overlap of each subject under KEY."""
    return {
        "source": result.source, "kind": result.kind, "description": result.description,
        "members": result.shape[0], "tokens": result.shape[1], "dimensions": result.shape[2],
        "notes": list(result.notes), "counts": result.counts_source,
        "subjects": [_subject_document(s, result, top) for s in result.subjects],
    }


def write(result: DiagnoseResult, out: str | Path, top: int) -> Path:
    """out/report.md (and report.html), out/diagnose.json and out/figures/diagnose.png, an
    earlier report replaced whole (dhwt.directories.replace_report); the report's path."""
    def fill(folder: Path) -> None:
        measured = [s for s in result.subjects if s.diagnosis is not None]
        if measured:
            _figure(measured, folder / FIGURE)
        write_json(folder / JSON, document(result, top))
        write_document(folder / REPORT, "\n".join(_markdown(result, top, bool(measured))))

    replace_report(out, "diagnose", JSON, LAYOUT, fill)
    return Path(out) / REPORT


def history(s: Subject, result: DiagnoseResult) -> str:
    """How the subject came to be tied or untied, in words."""
    if result.kind == "checkpoint":
        return "tied" if s.diagnosis is None else \
            "untied (a pretrained checkpoint; its training history is not known)"
    if s.diagnosis is None:
        return "tied from the start" if s.tied_since is None else f"tied since step {s.tied_since}"
    return describe(s.history)


def reading(s: Subject, result: DiagnoseResult) -> str:
    """What the subject's input/output match says (dhwt.report.dh_reading_report)."""
    d = s.diagnosis
    if d is None:
        return "no reading: the input and output matrices are one" \
            if result.kind == "checkpoint" else "no reading: tied"
    if d.chance is None:
        return "no reading (the chance level was not computed: --chance-queries 0)"
    return reading_text(dh_reading(d.overlap.mean, d.chance.mean, k=d.k, metric=d.metric,
                                   history=s.history, residue=s.residue, vocab=d.n_tokens))


def _markdown(result: DiagnoseResult, top: int, figure: bool) -> list[str]:
    lines = ["# DH diagnostic", "", f"Source: {result.description}. {_shape(result)}.", ""]
    lines += [f"- {n}" for n in result.notes] + ([""] if result.notes else [])
    lines += ["For each token, its k nearest neighbours among all other tokens (exact, self "
              "excluded) in the input embedding space and in the output space; the overlap "
              "|N_in ∩ N_out| / k says how far the two spaces group tokens alike. Chance: the "
              "same measure on norm-matched random stand-ins (each row's norm kept, direction "
              "random), estimated from sampled queries. Intervals are 95% Student-t over the "
              "tokens (with the finite-population correction; exact when every token is a "
              "query), clipped to [0, 1], where an overlap lies. The words follow the overlap's share of the way from chance to "
              f"identity (>= {EXCESS_AGREE}: agree, >= {EXCESS_PARTLY}: partly): a description, "
              "not a verdict. What the overlap implies for DH and tying is stated only as far as "
              "the calibration on synthetic languages supports it (experiments/dh_calibration: "
              "at k 10 / inner product it does not move with the exact violation); a tied run "
              "decides (dhwt.analysis.dh_reading_result).", ""]
    lines += ["| model | history | overlap [95% CI] | chance [95% CI] | excess over chance "
              "| CKA | Procrustes error | reading |", "|---|---|---|---|---|---|---|---|"]
    for s in result.subjects:
        d = s.diagnosis
        if d is None:
            lines.append(f"| {s.name} | tied: {s.tied_because} | — | — | — | — | — | "
                         f"{reading(s, result)} |")
            continue
        chance = _estimate(d.chance) if d.chance else "—"
        lines.append(f"| {s.name} | {history(s, result)} | {_estimate(d.overlap)} | {chance} | "
                     f"{_excess(d):.3f} | {d.cka:.4f} | {_procrustes(d)} | {reading(s, result)} |")
    lines.append("")
    if figure:
        lines += [f"![per-token agreement]({FIGURE})", ""]
    for s in result.subjects:
        if s.diagnosis is None:
            continue
        d = s.diagnosis
        lines += [f"## {s.name}", "", _scope(d) + ".", ""]
        if d.buckets:
            lines += [f"By frequency ({result.counts_source}):", "",
                      "| tokens with count | tokens | queries | overlap [95% CI] |",
                      "|---|---|---|---|"]
            lines += [f"| {b.label} | {b.overlap.population:,} | {b.overlap.n:,} | "
                      f"{_estimate(b.overlap)} |" for b in d.buckets]
            lines.append("")
        for title, rows in (("disagree most", _ranked(d, top, False, result)),
                            ("agree most", _ranked(d, top, True, result))):
            ties = ", ties to the more frequent" if d.counts is not None else ""
            lines += [f"Tokens whose input and output neighbourhoods {title}{ties}:", "",
                      "| token | count | overlap | nearest in input space | nearest in output "
                      "space |", "|---|---|---|---|---|"]
            for row in rows:
                count = "—" if row["count"] is None else f"{row['count']:,.0f}"
                lines.append(f"| {_md(row['token'])} | {count} | {row['overlap']:.2f} | "
                             f"{', '.join(_md(t) for t in row['input'][:SHOWN])} | "
                             f"{', '.join(_md(t) for t in row['output'][:SHOWN])} |")
            lines.append("")
    return lines


def _subject_document(s: Subject, result: DiagnoseResult, top: int) -> dict[str, object]:
    entry: dict[str, object] = {"name": s.name, "history": history(s, result),
                                "tied": s.diagnosis is None, "tied_because": s.tied_because,
                                "reading": reading(s, result)}
    d = s.diagnosis
    if d is None:
        return entry
    entry.update({
        "k": d.k, "metric": d.metric, "queries": len(d.tokens), "sampled": d.sampled,
        KEY: _estimate_document(d.overlap), "input_output_knn_jaccard": d.jaccard,
        "chance_knn_overlap": _estimate_document(d.chance) if d.chance else None,
        "excess_over_chance": _finite(_excess(d)), "cka": d.cka,
        "procrustes_error": _finite(d.procrustes), "whole_space_rows": d.whole_rows,
        "copy_residue": None if s.residue is None else _finite(s.residue),
        "buckets": [{"label": b.label, "low": b.low, "high": b.high,
                     **_estimate_document(b.overlap)} for b in d.buckets],
        "disagree_most": _ranked(d, top, False, result),
        "agree_most": _ranked(d, top, True, result),
    })
    return entry


def _ranked(d: Diagnosis, top: int, agree: bool, result: DiagnoseResult) -> list[dict]:
    """The `top` queries of least (agree False) or most overlap; ties to the more frequent
    token when counts are known, then to the lower token id."""
    frequent = -d.counts if d.counts is not None else np.zeros(len(d.tokens))
    order = np.lexsort((d.tokens, frequent,
                        -d.overlap_per_token if agree else d.overlap_per_token))
    rows = []
    for i in order[:top]:
        rows.append({"id": int(d.tokens[i]), "token": result.token(int(d.tokens[i])),
                     "overlap": float(d.overlap_per_token[i]),
                     "count": None if d.counts is None else float(d.counts[i]),
                     "input": [result.token(int(j)) for j in d.input.indices[i]],
                     "output": [result.token(int(j)) for j in d.output.indices[i]]})
    return rows


def _figure(subjects: list[Subject], path: Path) -> None:
    """Left: each subject's distribution of per-token overlap, its chance mean dotted. Right
    (when counts were given): mean overlap by frequency bucket with its interval."""
    buckets = any(s.diagnosis.buckets for s in subjects)
    fig = new_figure(5.2 * (1 + buckets), 3.4)
    axes = fig.subplots(1, 1 + buckets, squeeze=False)[0]
    k = subjects[0].diagnosis.k
    bins = np.arange(k + 2) / k - 0.5 / k
    for s in subjects:
        d = s.diagnosis
        (line,) = axes[0].step(bins[:-1] + 0.5 / k, np.histogram(d.overlap_per_token, bins)[0]
                               / len(d.tokens), where="mid", label=s.name, lw=1.4)
        if d.chance is not None:
            axes[0].axvline(d.chance.mean, ls=":", color=line.get_color())
    axes[0].set_xlabel(f"overlap |N_in ∩ N_out| / k (k = {k}); dotted: chance mean")
    axes[0].set_ylabel("share of tokens (log)")
    axes[0].set_yscale("log")
    axes[0].set_xlim(-0.5 / k, 1 + 0.5 / k)
    axes[0].grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    if buckets:
        ax = axes[1]
        for s in subjects:
            bs = s.diagnosis.buckets
            x = np.arange(len(bs))
            mean = np.array([b.overlap.mean for b in bs])
            err = np.array([[b.overlap.mean - b.overlap.low, b.overlap.high - b.overlap.mean]
                            for b in bs]).T
            ax.errorbar(x, mean, yerr=np.where(np.isfinite(err), err, 0), marker="o", capsize=3,
                        label=s.name)
            ax.set_xticks(x, [b.label for b in bs], rotation=30, fontsize=7)
        ax.set_xlabel("token count (groups of the tokens seen, equal-size unless one count "
                      "repeats)")
        ax.set_ylabel("mean overlap (95% CI)")
        ax.grid(alpha=0.3)
    save(fig, path)


def _shape(result: DiagnoseResult) -> str:
    members, n, d = result.shape
    return (f"{members} member{'s' if members > 1 else ''}, " if result.kind == "run" else "") \
        + f"{n:,} tokens x {d} dimensions"


def _scope(d: Diagnosis) -> str:
    queries = (f"all {d.n_tokens:,} tokens (exact)" if not d.sampled else
               f"{len(d.tokens):,} sampled query tokens of {d.n_tokens:,}, each against all")
    chance = f"; chance from {d.chance.n:,} queries" if d.chance else ""
    return (f"k = {d.k}{d.k_note}, metric {d.metric}, {queries}{chance}; CKA and Procrustes over "
            f"{d.whole_rows:,} rows")


def _procrustes(d: Diagnosis) -> str:
    return (f"{d.procrustes:.4f}" if math.isfinite(d.procrustes) else
            "not computed (the widths differ)")


def _estimate(e: Estimate) -> str:
    if e.exact:
        return f"{e.mean:.4f} (exact)"
    return f"{e.mean:.4f} [{e.low:.4f}, {e.high:.4f}]"


def _estimate_document(e: Estimate) -> dict[str, object]:
    return {"mean": e.mean, "low": _finite(e.low), "high": _finite(e.high), "queries": e.n,
            "tokens": e.population}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _excess(d: Diagnosis) -> float:
    return excess_over_chance(d.overlap.mean, d.chance.mean) if d.chance else float("nan")


def _md(token: str) -> str:
    """A token string for a Markdown table: quoted with escapes, pipes escaped."""
    return json.dumps(token, ensure_ascii=False).replace("|", "\\|")
