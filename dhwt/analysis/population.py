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
    """The exact fit of the newest checkpoint of `run_dir`, trained on `task`."""
    from dhwt.runs import load_run

    run = load_run(run_dir)
    ce, acc = population_fit(run.model(), task.truth)
    return PopulationFit(step=run.checkpoint_steps[-1], seeds=tuple(run.config.members.seeds), cross_entropy=ce,
                         excess=ce - task.truth.bayes_cross_entropy, accuracy=acc)
