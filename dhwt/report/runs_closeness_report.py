"""The report over run directories of one language (dhwt.analysis.runs_closeness): closeness
figures like the paper's, loss and accuracy against the Bayes optimum, and a table of final
values. `dhwt study` writes one for its runs; `dhwt analyze` for any run directories given.

Values over the ensemble members (seeds) are summarised as fits them (dhwt.analysis.intervals):
mean ± 95% t-interval where plausibly unimodal, the two groups (each one's count and range)
where the seeds split between the plateau and a learned fit (or fail the bimodality screen), the
values themselves where fewer than 3; plateau escape is a count with its exact interval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from dhwt.analysis.intervals import COSINE, NON_NEGATIVE, SHARE, count_text, summarise
from dhwt.analysis.runs_closeness import RunsCloseness
from dhwt.report.document import write_document
from dhwt.report.escape_report import escape_lines
from dhwt.report.figures import MEASURE_LABELS, closeness_figure, fit_figure
from dhwt.filenames import CLOSENESS_FIGURE, FIGURES, FIT_FIGURE, REPORT


def write_runs_report(
    result: RunsCloseness,
    out: Path,
    *,
    title: str,
    intro: Sequence[str] = (),
    measure: str = "normalised",
    extra: Callable[[], Sequence[str]] | None = None,
) -> Path:
    """Write out/figures/ and out/report.md of `result`; return the report's path. `extra`,
    called before anything is written, gives more report lines (e.g.
    dhwt.report.runs_similarity_report)."""
    truth = result.task.truth
    pairs, baseline, kinds, off = result.pairs, result.baseline, result.kinds, result.off
    labels = {p: f"{p[0]}-{p[1]} ({kinds[p]})" for p in pairs}
    more = list(extra()) if extra is not None else []
    figures = out / FIGURES
    closeness_figure(result.panels, figures / CLOSENESS_FIGURE, measure, labels, off,
                     result.events)
    fit_figure(result.fit_curves, figures / FIT_FIGURE, truth, result.exact, off, result.events)
    panels = [(f"{name}: {side}", c) for name, sides in result.panels.items()
              for side, c in sides.items()]
    panel_runs = [name for name, sides in result.panels.items() for _ in sides]
    exact = result.exact

    lines = [
        f"# {title}",
        "",
        *intro,
        "",
        f"Bayes-optimal accuracy {truth.bayes_accuracy:.4f} (cross-entropy "
        f"{truth.bayes_cross_entropy:.4f} nats); always predicting the most frequent target gives "
        f"{truth.marginal_accuracy:.4f}.",
        "",
        f"## {_fit_heading(result)}",
        "",
        *_unfinished_lines(result),
        "Exact, over every context of the language weighted by its probability, at each run's "
        "newest checkpoint (dhwt.analysis.population): no sampling noise. `off plateau` counts "
        "the seeds whose excess is below half the unigram baseline's, with its exact 95% "
        "(Clopper-Pearson) interval. Where a run's seeds split between the plateau and a "
        "learned fit, the outcome is bimodal and is given as those two groups (how many seeds, "
        "and their range: a median of the two would be a value no seed has); else as "
        "mean ± 95% t-interval (3 or more seeds; fewer: the values), clipped where it leaves "
        "the quantity's range (no loss below 0, no accuracy above 1) and then said so.",
        "",
        "| run | step | cross-entropy (nats) | excess over Bayes | expected accuracy | "
        "off plateau |",
        "|---|---|---|---|---|---|",
    ]
    for name, fit in result.fits.items():
        learned, n = int(off[name].sum()), len(fit.seeds)
        cells = [summarise(v, groups=off[name], bounds=bounds).text()
                 for v, bounds in ((fit.cross_entropy, NON_NEGATIVE), (fit.excess, NON_NEGATIVE),
                                   (fit.accuracy, SHARE))]
        lines.append(f"| {name} | {fit.step} | {' | '.join(cells)} | {count_text(learned, n)} |")
    lines += [
        "",
        f"Bayes optimum: cross-entropy {truth.bayes_cross_entropy:.4f} nats, accuracy "
        f"{truth.bayes_accuracy:.4f}. "
        + ("The figure draws the exact fit recorded during training (record.population_every), "
           "one line per seed." if exact else
           "The figure draws each run's fixed `train` evaluation set (variants drawn once; "
           "set record.population_every for the exact fit), which can dip below the optimum "
           "by chance; one line per seed."),
        "",
        f"![loss and accuracy over training]({FIGURES}/{FIT_FIGURE})",
    ]
    lines += [
        "",
        f"## {'Closeness' if result.unfinished else 'Final closeness'} of the tracked pairs "
        "(summarised over seeds as the fit above"
        + (", at each run's newest snapshot up to the step of its fit)" if result.unfinished
           else ")"),
        "",
        "Normalised distance = raw Euclidean distance / mean distance of the baseline pairs "
        f"({', '.join(f'{a}-{b}' for a, b in baseline)}: symbols of different classes that are "
        "predicted somewhere) in the same matrix and snapshot.",
        "",
        *_closeness_rows(panels, panel_runs, kinds, off),
    ]
    if any(result.split.values()):
        lines += ["", "Over the seeds off the plateau at the end only (the picture of models "
                  "that learned; runs with none are left out):", "",
                  *_closeness_rows(panels, panel_runs, kinds, off, only_off=True)]
    lines += [
        "",
        f"The figure: {MEASURE_LABELS[measure]} over training, over the seeds off the plateau "
        "at the end (all seeds of a run with none), since the predictions are about models "
        "that fit the language; the tables above give every seed.",
        "",
        f"![closeness ({measure})]({FIGURES}/{CLOSENESS_FIGURE})",
    ]
    lines += escape_lines(result.records, result.configs, truth, figures)
    lines += [
        "",
        *more,
        "Each run's own directory holds its metrics, snapshots, checkpoints and a per-run report "
        "with loss curves.",
        "",
    ]
    return write_document(out / REPORT, "\n".join(lines))


def _fit_heading(result: RunsCloseness) -> str:
    """"Final fit", or where a run has not finished training, the step its fit is of: "Fit at
    step N (run unfinished: N of M steps)" for one run."""
    if not result.unfinished:
        return "Final fit"
    if len(result.fits) == 1:
        (name, steps), = result.unfinished.items()
        step = result.fits[name].step
        return f"Fit at step {step} (run unfinished: {step} of {steps} steps)"
    return "Fit at each run's newest checkpoint (" + ", ".join(
        f"{name} unfinished: {result.fits[name].step} of {steps} steps"
        for name, steps in result.unfinished.items()) + ")"


def _unfinished_lines(result: RunsCloseness) -> list[str]:
    """What the report of a run that has not finished training is of, or nothing."""
    if not result.unfinished:
        return []
    return ["An unfinished run (interrupted, or still training) is analysed at the step of its "
            "newest checkpoint, from which `dhwt train --resume` continues it: its closeness, "
            "curves and escape below stop at that step too, leaving out what it recorded "
            "after (the similarity of embedding spaces, over training, takes every snapshot "
            "it holds).", ""]


def _closeness_rows(panels, panel_runs, kinds, off, only_off: bool = False) -> list[str]:
    """The closeness table at the last snapshot (off: name -> (S,) bool, the seeds off the
    plateau), over every seed (in two groups where they split) or `only_off` the seeds off the
    plateau."""
    rows = ["| panel | pair | relation | raw distance | normalised | cosine |",
            "|---|---|---|---|---|---|"]
    for (title, c), name in zip(panels, panel_runs):
        keep = off[name] if only_off else slice(None)
        if only_off and not keep.any():
            continue
        for p, pair in enumerate(c.pairs):
            cells = [summarise(getattr(c, m)[-1, keep, p], groups=None if only_off else off[name],
                               bounds=COSINE if m == "cosine" else NON_NEGATIVE).text()
                     for m in ("raw", "normalised", "cosine")]
            rows.append(f"| {title} | {pair[0]}-{pair[1]} | {kinds[pair]} | "
                        + " | ".join(cells) + " |")
    return rows


def closeness_document(result: RunsCloseness) -> dict:
    """The numbers of the report as JSON-ready data: the Bayes optimum, each run's exact final
    fit per seed (of `step`: `steps`, the steps it is configured for, where it has `finished`)
    and its seeds off the plateau, and each panel's final closeness per pair and seed."""
    truth = result.task.truth
    return {
        "bayes": {"accuracy": truth.bayes_accuracy, "cross_entropy": truth.bayes_cross_entropy,
                  "marginal_accuracy": truth.marginal_accuracy},
        "pairs": [{"pair": list(p), "relation": result.kinds[p]} for p in result.pairs],
        "baseline_pairs": [list(p) for p in result.baseline],
        "runs": {name: {"step": fit.step, "finished": name not in result.unfinished,
                        "steps": result.configs[name].optim.steps, "seeds": list(fit.seeds),
                        "cross_entropy": fit.cross_entropy, "excess": fit.excess,
                        "accuracy": fit.accuracy, "off_plateau": result.off[name],
                        "final_closeness": {
                            panel: {f"{a}-{b}": {m: getattr(c, m)[-1, :, p]
                                                 for m in ("raw", "normalised", "cosine")}
                                    for p, (a, b) in enumerate(c.pairs)}
                            for panel, c in result.panels[name].items()}}
                 for name, fit in result.fits.items()},
    }
