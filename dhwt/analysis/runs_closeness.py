"""What the closeness report of runs of one language computes
(dhwt.report.runs_closeness_report renders it): each run's exact final fit, which seeds left the
plateau, and the closeness of the tracked symbol pairs over training, in one typed result.

Panels: a run that was tied at every snapshot has one matrix ("tied matrix"); any other run has
an input and an output panel (before an untie the two coincide).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dhwt.analysis.closeness import Closeness, pair_closeness
from dhwt.analysis.escape import SPLIT as POPULATION
from dhwt.analysis.population import PopulationFit, run_population_fit
from dhwt.runs import load_run
from dhwt.runs.metrics import metric_table
from dhwt.runs.snapshots import read_snapshot

EVAL_SPLIT = "train"  # the fixed evaluation set over the training strings (see dhwt.training)


@dataclass(frozen=True, eq=False)
class RunsCloseness:
    """Runs (name -> directory) of one task, analysed.

    pairs: the tracked symbol pairs, kinds: each pair's exact relation, baseline: the pairs of
    different classes that scale distances; fits: each run's exact fit at its newest checkpoint,
    off: (S,) its seeds whose excess is below half the unigram baseline's (off the plateau);
    panels: run -> {"tied matrix" | "input" | "output": closeness over snapshots}; records: each
    run's metrics; fit_curves: run -> (steps, loss, accuracy) on curve_split (the exact
    population fit where every run recorded it, exact True, else the train evaluation set);
    events: each run's tie events; unfinished: run -> the steps it is configured for, for each
    run that has not finished training (interrupted, or still training), whose snapshots and
    metrics are taken up to the step of its fit only, so all its numbers are of one step."""

    runs: Mapping[str, Path]
    task: object
    pairs: tuple[tuple[str, str], ...]
    kinds: Mapping[tuple[str, str], str]
    baseline: tuple[tuple[str, str], ...]
    fits: Mapping[str, PopulationFit]
    off: Mapping[str, np.ndarray]
    panels: Mapping[str, Mapping[str, Closeness]]
    records: Mapping[str, list[dict]]
    configs: Mapping[str, object]
    events: Mapping[str, object]
    exact: bool
    fit_curves: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    unfinished: Mapping[str, int] = field(default_factory=dict)

    @property
    def split(self) -> dict[str, bool]:
        """run -> whether its seeds split between the plateau and a learned fit."""
        return {name: 0 < int(self.off[name].sum()) < len(fit.seeds)
                for name, fit in self.fits.items()}


def runs_closeness(runs: Mapping[str, Path], task,  # noqa: ANN001 (a Task)
                   pairs: Sequence[tuple[str, str]] | None = None) -> RunsCloseness:
    """Analyse the run directories `runs` (name -> dir), all trained on `task`'s language;
    `pairs` defaults to every pair of variants of one class (default_pairs)."""
    truth = task.truth
    pairs = tuple(pairs or default_pairs(task.language))
    baseline = baseline_pairs(task.language, truth)
    relation = {(r.first, r.second): r for r in truth.pairs()}
    kinds = {p: _kind(relation, p) for p in pairs}
    loaded = {name: load_run(run_dir) for name, run_dir in runs.items()}
    unfinished = {name: run.config.optim.steps for name, run in loaded.items()
                  if not run.finished}
    fits = {name: run_population_fit(run_dir, task) for name, run_dir in runs.items()}
    plateau = truth.marginal_entropy - truth.bayes_cross_entropy
    off = {name: fit.excess < plateau / 2 for name, fit in fits.items()}  # (S,) at the end
    # an unfinished run up to the step of its fit only: what it recorded after is left out
    last = {name: fits[name].step if name in unfinished else None for name in runs}
    panels: dict[str, dict[str, Closeness]] = {}
    for name, run in loaded.items():
        snapshots = [read_snapshot(path) for step, path in run.snapshot_files.items()
                     if last[name] is None or step <= last[name]]
        sides = ("input",) if all(s.tied for s in snapshots) else ("input", "output")
        panels[name] = {"tied matrix" if len(sides) == 1 else side:
                        pair_closeness(snapshots, side, pairs, baseline) for side in sides}
    records = {name: [r for r in run.metrics() if last[name] is None or r["step"] <= last[name]]
               for name, run in loaded.items()}
    exact = all(any(r["split"] == POPULATION for r in rows) for rows in records.values())
    curve_split = POPULATION if exact else EVAL_SPLIT
    fit_curves = {name: (*metric_table(rows, curve_split, "loss"),
                         metric_table(rows, curve_split, "accuracy")[1])
                  for name, rows in records.items()}
    return RunsCloseness(runs, task, pairs, kinds, baseline, fits, off, panels, records,
                         {name: run.config for name, run in loaded.items()},
                         {name: run.tie_events for name, run in loaded.items()}, exact,
                         fit_curves, unfinished)


def default_pairs(language) -> tuple[tuple[str, str], ...]:  # noqa: ANN001
    """Every pair of variant symbols that share a class: the pairs the paper tracks."""
    return tuple(pair for c in language.classes for pair in itertools.combinations(c.variants, 2))


def baseline_pairs(language, truth) -> tuple[tuple[str, str], ...]:  # noqa: ANN001
    """Pairs of symbols from different classes, both predicted somewhere: the scale against which
    within-class distances are read (never-predicted symbols such as EVEN/ODD in the masked task
    drift far away in an output matrix and would skew it)."""
    predicted = [(c.name, s) for c in language.classes for s in c.variants
                 if s not in truth.never_predicted]
    return tuple((a, b) for (ca, a), (cb, b) in itertools.combinations(predicted, 2) if ca != cb)


def _kind(relation: dict, pair: tuple[str, str]) -> str:
    r = relation.get(pair) or relation.get(pair[::-1])
    return r.kind if r is not None else "?"
