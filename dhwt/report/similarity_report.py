"""The similarity section of a runs report: KNN match between members over training, the DH
diagnostic, their chance levels; figures, a CSV and a JSON of every number, markdown lines. The
DH reading itself is dhwt.report.dh_reading's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from dhwt.analysis.knn_curves import Curve, SimilarityCurves
from dhwt.config.schedule import TieSchedule
from dhwt.report.dh_reading import EXCESS_AGREE, EXCESS_PARTLY, member_reading, tie_history
from dhwt.report.figures import (distinct_events, legend_below, mark_events, new_figure, save,
                                  step_axis)
from dhwt.directories import atomic_write_bytes

SCORES = ("overlap", "jaccard")
OTHER = {"cka": "linear CKA", "procrustes": "Procrustes relative error",
         "mutual_knn": "mutual k-NN (cosine overlap)"}
CSV = "similarity.csv"
JSON = "similarity.json"


def similarity_section(result: SimilarityCurves, out: Path, *, score: str = "overlap",
                       k_note: str = "", tokens_note: str = "",
                       schedules: Mapping[str, TieSchedule] | None = None) -> list[str]:
    """Write out/figures/similarity_*.png, out/similarity.csv and .json; return the markdown.
    k_note follows k (why it is what it is, see dhwt.analysis.knn.choose_k); schedules: each
    source's tie schedule, by name, for the DH reading's tie history (dhwt.report.dh_reading)."""
    write_numbers(result, out)
    pairs, dh = result.of_kind("pair"), result.of_kind("dh")
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
        _curves_figure([[c for c in pairs if c.side == s] for s in sides], names, result.steps,
                       score, out / "figures" / "similarity_knn.png", events)
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
        lines += ["", "![KNN match between members](figures/similarity_knn.png)", ""]
    others = [m for m in OTHER if pairs and m in pairs[0].values]
    if others:
        _others_figure(pairs, others, result, out / "figures" / "similarity_other.png", events)
        lines += ["| pair | side | " + " | ".join(OTHER[m] for m in others) + " (last step) |",
                  "|---|---|" + "---|" * len(others)]
        for c in pairs:
            t = _last(c, others[0])
            if t is not None:
                lines.append(f"| {c.a} vs {c.b} | {c.side} | "
                             + " | ".join(f"{c.values[m][t]:.4f}" for m in others) + " |")
        lines += ["", "![other measures](figures/similarity_other.png)", ""]
    if dh and _has(dh, score):
        _curves_figure([dh], ["input vs output (DH diagnostic)"], result.steps, score,
                       out / "figures" / "similarity_dh.png", events)
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
        lines += ["", "![DH diagnostic](figures/similarity_dh.png)", "",
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
    schedule = (schedules or {}).get(curve.a)
    residue = curve.values["copy_residue"][t] if "copy_residue" in curve.values else None
    return member_reading(curve.values["overlap"][t], chance, k=k, metric=metric,
                          history=tie_history(schedule, step) if schedule is not None else None,
                          residue=residue, vocab=vocab)


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
    document = {
        "k": result.k, "metric": result.metric, "n_tokens": result.n_tokens,
        "steps": result.steps.tolist(), "tied_everywhere": result.tied_everywhere,
        "curves": [{"kind": c.kind, "side": c.side, "a": c.a, "b": c.b,
                    **{n: [None if math.isnan(v) else v for v in c.values[n].tolist()]
                       for n in c.values}} for c in result.curves],
    }
    atomic_write_bytes(out / JSON, json.dumps(document, indent=1).encode("utf-8"))


def _num(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.6g}"


def _curves_figure(panels: Sequence[Sequence[Curve]], titles: Sequence[str], steps: np.ndarray,
                   score: str, path: Path, events: Sequence[object]) -> None:
    """One panel per group of curves: each curve solid, its chance level dotted, same colour;
    the tie switches of the runs marked."""
    fig = new_figure(4.8 * len(panels) + 0.6, 3.8)
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    for ax, curves, title in zip(axes, panels, titles):
        for c in curves:
            (line,) = ax.plot(steps, c.values[score], marker=".", lw=1.4,
                              label=c.label if c.kind == "dh" else f"{c.a} vs {c.b}")
            if f"chance_{score}" in c.values:
                ax.plot(steps, c.values[f"chance_{score}"], ls=":", lw=1.2,
                        color=line.get_color())
        ax.set_title(title, fontsize=10)
        mark_events(ax, events)
        step_axis(ax)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"KNN match ({score})")
    legend_below(fig, axes, "solid: measured; dotted, same colour: its chance level "
                 "(norm-matched random stand-ins)")
    save(fig, path)


def _others_figure(pairs: Sequence[Curve], measures: Sequence[str], result: SimilarityCurves,
                   path: Path, events: Sequence[object]) -> None:
    """One panel per whole-space measure, one line per pair; the tie switches marked."""
    fig = new_figure(4.4 * len(measures) + 0.6, 3.6)
    axes = fig.subplots(1, len(measures), squeeze=False)[0]
    for ax, m in zip(axes, measures):
        for c in pairs:
            ax.plot(result.steps, c.values[m], marker=".", lw=1.2, label=c.label)
        ax.set_title(OTHER[m], fontsize=10)
        mark_events(ax, events)
        step_axis(ax)
        ax.grid(alpha=0.3)
    legend_below(fig, axes)
    save(fig, path)
