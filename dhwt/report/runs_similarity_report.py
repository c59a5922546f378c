"""The similarity section of a runs report (dhwt.analysis.runs_similarity: similarity_lines): a
line saying why it was skipped, or KNN match between members over training, the DH diagnostic,
their chance levels; figures, a CSV and a JSON of every number, markdown lines. The DH reading
itself is dhwt.report.dh_reading_report's.

The figures draw groups of curves, not one line per curve (3 runs of 3 seeds make 36 pairs):
the pairs of one run's seeds, the pairs of members of two runs, each run's DH curves; per
group the median over its curves with their range as a band, so that they stay readable at
any number of members. The tables and files give every curve.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from dhwt.analysis.dh_reading_result import (COPY_RESIDUE, EXCESS_AGREE, EXCESS_PARTLY,
                                             dh_reading, is_withheld)
from dhwt.analysis.knn_curves import Curve, SimilarityCurves
from dhwt.analysis.runs_similarity import RunsSimilarity
from dhwt.config.schedule import TieHistory, TieSchedule, tie_history
from dhwt.report.dh_reading_report import reading_text
from dhwt.report.figures import (distinct_events, legend_below, mark_events, new_figure, save,
                                  spread, step_axis)
from dhwt.directories import atomic_write_bytes
from dhwt.filenames import (FIGURES, SIMILARITY_CSV as CSV, SIMILARITY_DH_FIGURE,
                            SIMILARITY_JSON as JSON, SIMILARITY_KNN_FIGURE,
                            SIMILARITY_OTHER_FIGURE)
from dhwt.report.json_document import write_json

OTHER = {"cka": "linear CKA", "procrustes": "Procrustes relative error",
         "mutual_knn": "mutual k-NN (cosine overlap)"}
#: Most groups of seed pairs drawn one per run; more runs share one "within a run" group.
WITHIN_GROUPS = 6


def similarity_section(result: SimilarityCurves, out: Path, *, score: str = "overlap",
                       k_note: str = "", tokens_note: str = "",
                       schedules: Mapping[str, TieSchedule] | None = None,
                       runs: Mapping[str, str] | None = None) -> list[str]:
    """Write out/figures/similarity_*.png, out/similarity.csv and .json; return the markdown.
    k_note follows k (why it is what it is, see dhwt.analysis.knn.choose_k); schedules: each
    source's tie schedule, by name, for the DH reading's tie history
    (dhwt.analysis.dh_reading_result); runs: each source's run, by name, for the figures'
    groups (none: one run)."""
    write_numbers(result, out)
    pairs, dh = result.of_kind("pair"), result.of_kind("dh")
    runs = runs or {}
    events = distinct_events({name: s.events for name, s in (schedules or {}).items()})
    lines = ["## Similarity of embedding spaces over training", "",
             f"KNN Match Similarity: for each token its k = {result.k}{k_note} nearest neighbours "
             f"by {_METRIC[result.metric]}, self excluded, exact; Jaccard |A∩B|/|A∪B| and overlap "
             f"|A∩B|/k, averaged over {result.n_tokens} tokens{tokens_note}. Chance: the same "
             "measure on norm-matched random stand-ins (each row's norm kept, direction random), "
             f"dotted in the figures. Numbers at every step: `{CSV}`, `{JSON}`.", ""]
    if pairs and _has(pairs, score):
        sides = sorted({c.side for c in pairs}, key=("input", "output").index)
        names = ["tied matrix"] if result.tied_everywhere else sides
        _curves_figure([group_curves([c for c in pairs if c.side == s], runs) for s in sides],
                       names, result.steps, score, out / FIGURES / SIMILARITY_KNN_FIGURE,
                       events)
        lines += ["### Between members", "",
                  "| pair | side | step | jaccard | overlap | chance overlap "
                  "| peak overlap (step) |",
                  "|---|---|---|---|---|---|---|"]
        for c in pairs:
            t = _last(c, "overlap")
            if t is None:
                continue
            peak = int(np.nanargmax(c.values["overlap"]))
            side = "tied" if result.tied_everywhere else c.side
            lines.append(f"| {c.a} vs {c.b} | {side} | {result.steps[t]} | "
                         f"{c.values['jaccard'][t]:.4f} | {c.values['overlap'][t]:.4f} | "
                         f"{_cell(c, 'chance_overlap', t)} | "
                         f"{c.values['overlap'][peak]:.4f} ({result.steps[peak]}) |")
        lines += ["", "The figure groups the pairs (each run's seed pairs, the pairs across runs): "
                  "per group the median with the range as a band; the table gives every pair.",
                  "", f"![KNN match between members]({FIGURES}/{SIMILARITY_KNN_FIGURE})", ""]
    others = [m for m in OTHER if pairs and m in pairs[0].values]
    if others:
        _others_figure(pairs, others, result, runs, out / FIGURES / SIMILARITY_OTHER_FIGURE,
                       events)
        lines += ["| pair | side | " + " | ".join(OTHER[m] for m in others) + " (last step) |",
                  "|---|---|" + "---|" * len(others)]
        for c in pairs:
            t = _last(c, others[0])
            if t is not None:
                lines.append(f"| {c.a} vs {c.b} | {c.side} | "
                             + " | ".join(f"{c.values[m][t]:.4f}" for m in others) + " |")
        lines += ["", f"![other measures]({FIGURES}/{SIMILARITY_OTHER_FIGURE})", ""]
    if dh and _has(dh, score):
        readable = [_readable(c, result.steps, schedules) for c in dh]
        _curves_figure([group_curves(readable, runs)], ["input vs output (DH diagnostic)"],
                       result.steps, score, out / FIGURES / SIMILARITY_DH_FIGURE, events)
        lines += ["### DH diagnostic: each untied member's input vs output neighbourhoods", "",
                  "| member | step | jaccard | overlap | chance overlap | reading |",
                  "|---|---|---|---|---|---|"]
        for c in dh:
            t = _last(c, "overlap")
            chance = c.values.get("chance_overlap", np.full(len(result.steps), np.nan))[t]
            reading = _reading(c, t, int(result.steps[t]), chance, schedules, result.k,
                               result.metric, result.n_tokens)
            lines.append(f"| {c.a} | {result.steps[t]} | {c.values['jaccard'][t]:.4f} | "
                         f"{c.values['overlap'][t]:.4f} | {_cell(c, 'chance_overlap', t)} | "
                         f"{reading} |")
        hidden = any(not np.array_equal(r.values[score], c.values[score], equal_nan=True)
                     for r, c in zip(readable, dh))
        lines += ["", f"![DH diagnostic]({FIGURES}/{SIMILARITY_DH_FIGURE})", ""]
        lines += ["The figure leaves out the snapshots whose reading is withheld (right after "
                  f"an untie, while the copy residue is below {COPY_RESIDUE}); the table and "
                  f"`{CSV}` keep them.", ""] if hidden else []
        lines += [
                  "Reading: input rows gather semantically equivalent tokens (proofs/T3), output "
                  "rows conditionally equivalent ones (proofs/T1, T2), and a tied model pays "
                  "where the two differ (proofs/T4). The words follow the overlap's share of the "
                  f"way from chance to identity: >= {EXCESS_AGREE} agree, >= {EXCESS_PARTLY} "
                  "partly, below mostly disagree: a description, not a verdict. On small "
                  "synthetic languages the overlap at k 10 does not move with the exact DH "
                  "violation (experiments/dh_calibration), so what it implies for tying is "
                  "stated only as far as that calibration goes; a tied run decides.", ""]
    return lines


_METRIC = {"ip": "raw inner product", "cos": "cosine", "l2": "Euclidean distance"}


def _reading(curve: Curve, t: int, step: int, chance: float,
             schedules: Mapping[str, TieSchedule] | None, k: int, metric: str,
             vocab: int) -> str:
    """The DH reading of a dh curve at index t, withheld right after an untie."""
    history, residue = _history(curve, t, step, schedules)
    return reading_text(dh_reading(curve.values["overlap"][t], chance, k=k, metric=metric,
                                   history=history, residue=residue, vocab=vocab))


def _history(curve: Curve, t: int, step: int, schedules: Mapping[str, TieSchedule] | None
             ) -> tuple[TieHistory | None, float | None]:
    """The tie history and copy residue of a dh curve's member at index t (None: not known)."""
    schedule = (schedules or {}).get(curve.a)
    residue = curve.values["copy_residue"][t] if "copy_residue" in curve.values else None
    return tie_history(schedule, step) if schedule is not None else None, residue


def _readable(curve: Curve, steps: np.ndarray,
              schedules: Mapping[str, TieSchedule] | None) -> Curve:
    """The dh curve as its figure draws it: NaN at the steps whose reading is withheld
    (dhwt.analysis.dh_reading_result.is_withheld: right after an untie, as diagnose and the table
    say)."""
    def hidden(t: int) -> bool:
        history, residue = _history(curve, t, int(steps[t]), schedules)
        return (history is not None and residue is not None and math.isfinite(residue)
                and is_withheld(history, residue))

    mask = np.array([hidden(t) for t in range(len(steps))], bool)
    return dataclasses.replace(curve, values={name: np.where(mask, np.nan, v)
                                              for name, v in curve.values.items()})


def _has(curves: Sequence[Curve], score: str) -> bool:
    return any(score in c.values for c in curves)


def _last(curve: Curve, name: str) -> int | None:
    """Index of the last step where the curve has a value."""
    done = np.flatnonzero(np.isfinite(curve.values[name]))
    return int(done[-1]) if len(done) else None


def _cell(curve: Curve, name: str, t: int) -> str:
    return f"{curve.values[name][t]:.4f}" if name in curve.values else "—"


def write_numbers(result: SimilarityCurves, out: Path) -> None:
    """similarity.csv (one row per curve and step) and similarity.json (the same, nested)."""
    out.mkdir(parents=True, exist_ok=True)
    names = sorted({n for c in result.curves for n in c.values})
    rows = ["kind,side,a,b,step," + ",".join(names)]
    for c in result.curves:
        for t, step in enumerate(result.steps):
            cells = [_num(c.values[n][t]) if n in c.values else "" for n in names]
            rows.append(f"{c.kind},{c.side},{c.a},{c.b},{step}," + ",".join(cells))
    atomic_write_bytes(out / CSV, ("\n".join(rows) + "\n").encode("utf-8"))
    write_json(out / JSON, similarity_document(result))


def similarity_document(result: SimilarityCurves) -> dict:
    """The curves as JSON-ready data (similarity.json): every value at every step."""
    return {
        "k": result.k, "metric": result.metric, "n_tokens": result.n_tokens,
        "steps": result.steps.tolist(), "tied_everywhere": result.tied_everywhere,
        "curves": [{"kind": c.kind, "side": c.side, "a": c.a, "b": c.b,
                    **{n: [None if math.isnan(v) else v for v in c.values[n].tolist()]
                       for n in c.values}} for c in result.curves],
    }


def _num(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.6g}"


def group_curves(curves: Sequence[Curve],
                 runs: Mapping[str, str]) -> list[tuple[str, list[Curve]]]:
    """(label, curves) groups of pair or DH curves for a figure. DH curves: one group per run.
    Pairs: one group of each run's seed pairs ("within RUN"; past WITHIN_GROUPS runs one group
    "within a run") and one of the pairs of members of two runs ("between runs"). `runs`:
    source name -> run name (sources not in it: members of one unnamed run).

    Examples:
        >>> pair = lambda a, b: Curve("pair", "input", a, b)
        >>> runs = {"t/s1": "t", "t/s2": "t", "u/s1": "u", "u/s2": "u"}
        >>> curves = [pair("t/s1", "t/s2"), pair("t/s1", "u/s1"), pair("u/s1", "u/s2")]
        >>> [(label, len(group)) for label, group in group_curves(curves, runs)]
        [('within t', 1), ('within u', 1), ('between runs', 1)]
    """
    def run(name: str) -> str:
        return runs.get(name, "")

    def key(c: Curve) -> str:
        if c.kind == "dh":
            return run(c.a) or "members"
        if run(c.a) != run(c.b):
            return "between runs"
        return f"within {run(c.a)}" if run(c.a) and len(own) <= WITHIN_GROUPS else "within a run"

    own = {run(c.a) for c in curves if run(c.a) == run(c.b)}
    groups: dict[str, list[Curve]] = {}
    for curve in curves:
        groups.setdefault(key(curve), []).append(curve)
    return sorted(groups.items(), key=lambda item: item[0] == "between runs")


def _group_label(label: str, curves: Sequence[Curve]) -> str:
    """A group's legend entry: the curve itself when alone, else the group and its size."""
    if len(curves) == 1:
        c = curves[0]
        return c.label if c.kind == "dh" else f"{c.a} vs {c.b}"
    noun = "members" if curves[0].kind == "dh" else "pairs"
    return f"{label} ({len(curves)} {noun})"


def _draw_group(ax, steps: np.ndarray, curves: Sequence[Curve], measure: str, label: str,
                color: str) -> None:
    """The median of `measure` over the group's curves, their range as a band, and the median
    chance level dotted, in one colour."""
    median, low, high = spread(np.array([c.values[measure] for c in curves]))
    ax.plot(steps, median, marker=".", lw=1.6, color=color, label=_group_label(label, curves))
    if len(curves) > 1:
        ax.fill_between(steps, low, high, color=color, alpha=0.2, lw=0)
    if f"chance_{measure}" in curves[0].values:
        chance = spread(np.array([c.values[f"chance_{measure}"] for c in curves]))[0]
        ax.plot(steps, chance, ls=":", lw=1.2, color=color)


def _colours(groups: Sequence[Sequence[tuple[str, list[Curve]]]]) -> dict[str, str]:
    """One colour per group label, the same in every panel."""
    labels = dict.fromkeys(label for panel in groups for label, _ in panel)
    return {label: f"C{i % 10}" for i, label in enumerate(labels)}


BAND_NOTE = ("line: median over the group's curves (a curve alone: itself); band: their range,\n"
             "min to max; dotted, same colour: the median chance level (norm-matched random "
             "stand-ins)")


def _curves_figure(panels: Sequence[Sequence[tuple[str, list[Curve]]]], titles: Sequence[str],
                   steps: np.ndarray, score: str, path: Path, events: Sequence[object]) -> None:
    """One panel per list of (label, curves) groups (group_curves); the tie switches of the
    runs marked."""
    fig = new_figure(4.8 * len(panels) + 0.8, 4.2)
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    colour = _colours(panels)
    for ax, groups, title in zip(axes, panels, titles):
        for label, curves in groups:
            _draw_group(ax, steps, curves, score, label, colour[label])
        ax.set_title(title, fontsize=10)
        mark_events(ax, events)
        step_axis(ax)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"KNN match ({score})")
    legend_below(fig, axes, BAND_NOTE)
    save(fig, path)


def _others_figure(pairs: Sequence[Curve], measures: Sequence[str], result: SimilarityCurves,
                   runs: Mapping[str, str], path: Path, events: Sequence[object]) -> None:
    """One panel per whole-space measure (columns) and side (rows), the pairs in groups
    (group_curves); the tie switches marked."""
    sides = sorted({c.side for c in pairs}, key=("input", "output").index)
    panels = {side: group_curves([c for c in pairs if c.side == side], runs) for side in sides}
    colour = _colours(list(panels.values()))
    fig = new_figure(4.4 * len(measures) + 0.8, 3.2 * len(sides) + 1.2)
    axes = fig.subplots(len(sides), len(measures), squeeze=False, sharex=True)
    for row, side in enumerate(sides):
        for ax, m in zip(axes[row], measures):
            for label, curves in panels[side]:
                _draw_group(ax, result.steps, curves, m, label, colour[label])
            title = "tied matrix" if result.tied_everywhere else side
            ax.set_title(f"{OTHER[m]}: {title}", fontsize=10)
            mark_events(ax, events)
            if row == len(sides) - 1:
                step_axis(ax)
            ax.grid(alpha=0.3)
    legend_below(fig, axes.ravel(), BAND_NOTE.split(";")[0] + "; band: their range, min to max")
    save(fig, path)


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
