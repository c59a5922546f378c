"""A report over run directories of one language: closeness figures like the paper's, loss and
accuracy against the Bayes optimum, and a table of final values, all read from disk. `dhwt study`
writes one for its runs; `dhwt analyze` for any run directories given.

Panels: a run that was tied at every snapshot has one matrix ("tied"); any other run has an
input and an output panel (before an untie the two coincide). Values over the ensemble members
(seeds) are summarised as fits them (dhwt.analysis.intervals): mean ± 95% t-interval where
plausibly unimodal, median and quartiles where the seeds split between the plateau and a learned
fit (or fail the bimodality screen), the values themselves where fewer than 3; plateau escape
is a count with its exact interval.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from dhwt.analysis.closeness import Closeness, pair_closeness
from dhwt.analysis.escape import SPLIT as POPULATION
from dhwt.analysis.intervals import COSINE, NON_NEGATIVE, SHARE, count_text, summarise
from dhwt.analysis.population import run_population_fit
from dhwt.report.document import write_report
from dhwt.report.escape_report import escape_lines
from dhwt.report.figures import MEASURE_LABELS, closeness_figure, fit_figure
from dhwt.filenames import FIGURES, REPORT
from dhwt.runs import load_run
from dhwt.runs.metrics import metric_table

EVAL_SPLIT = "train"  # the fixed evaluation set over the training strings (see dhwt.training)


def write_runs_report(
    runs: Mapping[str, Path],
    task,
    out: Path,
    *,
    title: str,
    intro: Sequence[str] = (),
    pairs: Sequence[tuple[str, str]] | None = None,
    measure: str = "normalised",
    extra: Callable[[], Sequence[str]] | None = None,
) -> Path:
    """Analyse the run directories `runs` (name -> dir), all trained on `task`'s language;
    write out/figures/ and out/report.md; return the report's path.

    `pairs` defaults to every pair of variants of one class (default_pairs). `extra`, called
    once the pairs are validated and before anything is written, gives more report lines
    (e.g. dhwt.report.run_similarity)."""
    truth = task.truth
    pairs = tuple(pairs or default_pairs(task.language))
    baseline = _baseline_pairs(task.language, truth)
    relation = {(r.first, r.second): r for r in truth.pairs()}
    labels = {p: f"{p[0]}-{p[1]} ({_kind(relation, p)})" for p in pairs}

    matrices: dict[str, dict[str, Closeness]] = {}  # run -> {"tied matrix" | side: closeness}
    records: dict[str, list[dict]] = {}
    fits = {name: run_population_fit(run_dir, task) for name, run_dir in runs.items()}
    plateau = truth.marginal_entropy - truth.bayes_cross_entropy
    off = {name: fit.excess < plateau / 2 for name, fit in fits.items()}  # (S,) at the end
    loaded = {name: load_run(run_dir) for name, run_dir in runs.items()}
    for name, run in loaded.items():
        snapshots = run.snapshots()
        sides = ("input",) if all(s.tied for s in snapshots) else ("input", "output")
        matrices[name] = {"tied matrix" if len(sides) == 1 else side:
                          pair_closeness(snapshots, side, pairs, baseline) for side in sides}
        records[name] = run.metrics()
    configs = {name: run.config for name, run in loaded.items()}
    events = {name: run.tie_events for name, run in loaded.items()}
    exact = all(any(r["split"] == POPULATION for r in rows) for rows in records.values())
    curve_split = POPULATION if exact else EVAL_SPLIT
    fit_curves = {name: (*metric_table(rows, curve_split, "loss"),
                         metric_table(rows, curve_split, "accuracy")[1])
                  for name, rows in records.items()}

    more = list(extra()) if extra is not None else []
    figures = out / FIGURES
    closeness_figure(matrices, figures / "closeness.png", measure, labels, off, events)
    fit_figure(fit_curves, figures / "fit.png", truth, exact, off, events)
    panels = [(f"{name}: {side}", c) for name, sides in matrices.items()
              for side, c in sides.items()]
    panel_runs = [name for name, sides in matrices.items() for _ in sides]

    lines = [
        f"# {title}",
        "",
        *intro,
        "",
        f"Bayes-optimal accuracy {truth.bayes_accuracy:.4f} (cross-entropy "
        f"{truth.bayes_cross_entropy:.4f} nats); always predicting the most frequent target gives "
        f"{truth.marginal_accuracy:.4f}.",
        "",
        "## Final fit",
        "",
        "Exact, over every context of the language weighted by its probability, at each run's "
        "newest checkpoint (dhwt.analysis.population): no sampling noise. `off plateau` counts "
        "the seeds whose excess is below half the unigram baseline's, with its exact 95% "
        "(Clopper-Pearson) interval. Where a run's seeds split between the plateau and a "
        "learned fit, the outcome is bimodal and is given as the median [quartiles]; else as "
        "mean ± 95% t-interval (3 or more seeds; fewer: the values), clipped where it leaves "
        "the quantity's range (no loss below 0, no accuracy above 1) and then said so.",
        "",
        "| run | step | cross-entropy (nats) | excess over Bayes | expected accuracy | "
        "off plateau |",
        "|---|---|---|---|---|---|",
    ]
    split: dict[str, bool] = {}  # name -> its seeds split between plateau and learned
    for name, fit in fits.items():
        learned, n = int(off[name].sum()), len(fit.seeds)
        split[name] = 0 < learned < n
        cells = [summarise(v, bimodal=split[name] or None, bounds=bounds).text()
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
        "![loss and accuracy over training](figures/fit.png)",
    ]
    lines += [
        "",
        "## Final closeness of the tracked pairs (summarised over seeds as the fit above)",
        "",
        "Normalised distance = raw Euclidean distance / mean distance of the baseline pairs "
        f"({', '.join(f'{a}-{b}' for a, b in baseline)}: symbols of different classes that are "
        "predicted somewhere) in the same matrix and snapshot.",
        "",
        *_closeness_rows(panels, panel_runs, relation, split),
    ]
    if any(split.values()):
        lines += ["", "Over the seeds off the plateau at the end only (the picture of models "
                  "that learned; runs with none are left out):", "",
                  *_closeness_rows(panels, panel_runs, relation, split, off)]
    lines += [
        "",
        f"The figure: {MEASURE_LABELS[measure]} over training, over the seeds off the plateau "
        "at the end (all seeds of a run with none), since the predictions are about models "
        "that fit the language; the tables above give every seed.",
        "",
        f"![closeness ({measure})](figures/closeness.png)",
    ]
    lines += escape_lines(records, configs, truth, figures)
    lines += [
        "",
        *more,
        "Each run's own directory holds its metrics, snapshots, checkpoints and a per-run report "
        "with loss curves.",
        "",
    ]
    return write_report(out / REPORT, "\n".join(lines))


def default_pairs(language) -> tuple[tuple[str, str], ...]:
    """Every pair of variant symbols that share a class: the pairs the paper tracks."""
    return tuple(pair for c in language.classes for pair in itertools.combinations(c.variants, 2))


def _baseline_pairs(language, truth) -> tuple[tuple[str, str], ...]:
    """Pairs of symbols from different classes, both predicted somewhere: the scale against which
    within-class distances are read (never-predicted symbols such as EVEN/ODD in the masked task
    drift far away in an output matrix and would skew it)."""
    predicted = [(c.name, s) for c in language.classes for s in c.variants
                 if s not in truth.never_predicted]
    return tuple((a, b) for (ca, a), (cb, b) in itertools.combinations(predicted, 2) if ca != cb)


def _closeness_rows(panels, panel_runs, relation, split, off=None) -> list[str]:
    """The closeness table at the last snapshot, over every seed or (`off`: name -> (S,) bool)
    only the seeds off the plateau."""
    rows = ["| panel | pair | relation | raw distance | normalised | cosine |",
            "|---|---|---|---|---|---|"]
    for (title, c), name in zip(panels, panel_runs):
        keep = slice(None) if off is None else off[name]
        if off is not None and not keep.any():
            continue
        for p, pair in enumerate(c.pairs):
            cells = [summarise(getattr(c, m)[-1, keep, p],
                               bimodal=None if off is not None else split[name] or None,
                               bounds=COSINE if m == "cosine" else NON_NEGATIVE).text()
                     for m in ("raw", "normalised", "cosine")]
            rows.append(f"| {title} | {pair[0]}-{pair[1]} | {_kind(relation, pair)} | "
                        + " | ".join(cells) + " |")
    return rows


def _kind(relation: dict, pair: tuple[str, str]) -> str:
    r = relation.get(pair) or relation.get(pair[::-1])
    return r.kind if r is not None else "?"


