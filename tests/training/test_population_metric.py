"""record.population_every: the exact population fit recorded during training."""

from __future__ import annotations

import numpy as np
import pytest

from dhwt.models.population import population_fit
from dhwt.training.runner import train_run
from dhwt.config import TrainConfig
from dhwt.errors import DhwtError
from dhwt.languages import load_language, load_task, write_dataset
from dhwt.runs import load_run
from dhwt.commands.train import report_run
from dhwt.runs.metrics import read_metrics


def test_population_lines_match_the_checkpointed_model(tmp_path):
    """The last step's "population" lines equal population_fit of the checkpointed model (a
    second path: the model rebuilt from the checkpoint, not the live trainer), and population
    is recorded only at multiples of population_every and at the last step."""
    write_dataset(load_language("parity", {"n_bits": 4, "strings": "paper"}), tmp_path / "d")
    task = load_task(tmp_path / "d", "mlm")
    config = TrainConfig(data=str(tmp_path / "d"), seeds="3-4", steps=30, eval_every=5,
                         population_every=10, checkpoint_every=30, snapshot_every=30,
                         tie_schedule="untie@12")
    train_run(config, task, tmp_path / "run")
    lines = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl")
             if r["split"] == "population"]
    assert sorted({r["step"] for r in lines}) == [0, 10, 20, 30]
    run = load_run(tmp_path / "run")
    cross_entropy, accuracy = population_fit(run.model(), task.truth)
    last = sorted((r for r in lines if r["step"] == 30), key=lambda r: r["member"])
    assert [r["seed"] for r in last] == [3, 4]
    np.testing.assert_allclose([r["loss"] for r in last], cross_entropy, rtol=1e-6)
    np.testing.assert_allclose([r["accuracy"] for r in last], accuracy, rtol=1e-6)
    assert all(r["loss"] > task.truth.bayes_cross_entropy for r in lines)
    for data in (run.task, task):  # a task holding the truth serves as well as the truth
        given = population_fit(run.model(), data)
        np.testing.assert_array_equal(given[0], cross_entropy)
        np.testing.assert_array_equal(given[1], accuracy)
    with pytest.raises(DhwtError, match="takes a task \\(with .truth\\) or a GroundTruth, got "
                                        "str"):
        population_fit(run.model(), "parity")
    report_run(tmp_path / "run", task)  # as `dhwt train` writes it once the run has trained
    exact = (tmp_path / "run" / "report.md").read_text().split("## Exact fit")[1]
    for r in last:  # the report's exact table is the recorded lines
        assert f"| {r['seed']} | {r['loss']:.4f} | " in exact.split("## Evaluation sets")[0]


def test_population_every_must_be_a_multiple_of_eval_every():
    with pytest.raises(DhwtError, match=r"population_every must be a multiple of eval_every"):
        TrainConfig(eval_every=10, population_every=15)
    with pytest.raises(DhwtError, match="population_every must be"):
        TrainConfig(population_every=-1)
    assert TrainConfig().record.population_every == 0
