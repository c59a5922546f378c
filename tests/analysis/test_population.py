"""The exact population fit, checked against Monte Carlo over the task's own sampler (an
independent code path: it draws variants and masks instead of enumerating contexts)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dhwt.analysis.population import run_population_fit
from dhwt.models import build_model
from dhwt.models.population import population_fit
from dhwt.config.run import TrainConfig
from dhwt.training.ensemble import member_accuracy, member_loss
from dhwt.training.runner import train_run
from dhwt.training.trainer import model_config


@pytest.fixture(scope="module", params=["mlm", "clm"])
def task(request, make_task):
    return make_task(request.param, overrides={"n_bits": 3}, valid_fraction=0.0, seed=0)


def test_matches_monte_carlo_over_the_sampler(task):
    config = TrainConfig(objective=task.objective, seeds=[3, 4])
    model = build_model(model_config(config, task), config.members.seeds, tied=False)
    ce, acc = population_fit(model, task.truth)
    generators = [torch.Generator().manual_seed(s) for s in (10, 11)]
    losses, accs = [], []
    with torch.no_grad():
        for _ in range(600):
            batch = task.train_batches(generators, None)
            logits = model(batch.inputs, batch.padding)
            losses.append(member_loss(logits, batch).numpy())
            accs.append(member_accuracy(logits, batch).numpy())
    for draws, exact in ((np.array(losses), ce), (np.array(accs), acc)):
        sem = draws.std(0, ddof=1) / np.sqrt(len(draws))
        assert np.all(np.abs(draws.mean(0) - exact) < 5 * sem + 1e-9), (draws.mean(0), exact, sem)


def test_random_models_sit_above_the_bayes_optimum(task):
    config = TrainConfig(objective=task.objective, seeds=[1, 2, 3])
    ce, acc = population_fit(build_model(model_config(config, task), config.members.seeds, tied=True),
                             task.truth)
    assert np.all(ce - task.truth.bayes_cross_entropy > 0)
    assert np.all(acc <= task.truth.bayes_accuracy + 1e-12)


def test_run_fit_reads_the_newest_checkpoint(task, tmp_path):
    config = TrainConfig(objective=task.objective, seeds=[5, 6], steps=30, lr=1e-2,
                         tie_schedule="untie@10", eval_every=10, snapshot_every=10,
                         checkpoint_every=10)
    train_run(config, task, tmp_path / "run")
    fit = run_population_fit(tmp_path / "run", task)
    assert fit.step == 30 and fit.seeds == (5, 6)
    np.testing.assert_allclose(fit.excess, fit.cross_entropy - task.truth.bayes_cross_entropy)
    assert np.all(fit.excess > 0)
