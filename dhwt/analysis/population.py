"""The exact population fit of a trained run: how far its predictions are from the language.

Over every context r of the language with its exact probability P(r), for each ensemble member:
cross-entropy and expected accuracy (dhwt.models.population.population_fit), and
- excess         cross-entropy minus the Bayes optimum = sum_r P(r) KL(p(.|r) || q(.|r)) >= 0.

The model comes from the run's newest checkpoint (analysis reads files, never a live trainer).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dhwt.models.population import population_fit


@dataclass(frozen=True)
class PopulationFit:
    """Exact fit of every member of one run at one step; arrays are (S,)."""

    step: int
    seeds: tuple[int, ...]
    cross_entropy: np.ndarray
    excess: np.ndarray
    accuracy: np.ndarray


def run_population_fit(run_dir: str | Path, task) -> PopulationFit:
    """The exact fit of the newest checkpoint of `run_dir`, trained on `task` (its step taken
    first, so a checkpoint the run writes meanwhile is not mixed in)."""
    from dhwt.runs import load_run

    run = load_run(run_dir)
    steps = run.checkpoint_steps
    model = run.model(steps[-1] if steps else None)  # none: the error that says so
    ce, acc = population_fit(model, task.truth)
    return PopulationFit(step=steps[-1], seeds=tuple(run.config.members.seeds), cross_entropy=ce,
                         excess=ce - task.truth.bayes_cross_entropy, accuracy=acc)
