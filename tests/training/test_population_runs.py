"""`optimizer = "population"` in a run: each member's certificate in metrics.jsonl and the
report, checked against the saved model by a second implementation of the population objective
(dhwt.models.population, from the exact conditionals); sessions.json records when and from which
code a run trained."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from dhwt import load_run
from dhwt.models.population import population_fit

L2 = 1e-3
CONFIG = """grammar = "demand"
objective = "clm"
valid_fraction = 0.0
test_fraction = 0.0
seeds = "3-4"
tie_schedule = "{schedule}"
d_model = 4
d_ff = 8
norm = "pre"
final_norm = false
positions = "learned"
dropout = 0.0
optimizer = "population"
lr = 0.01
lr_schedule = "{lr_schedule}"
batch_size = "full"
weight_decay = {l2}
steps = 40
lbfgs_steps = 50
eval_every = 20
snapshot_every = 40
checkpoint_every = 40
[set]
k = 2
pattern = "ratio"
"""


def config(tmp_path: Path, schedule: str = "tied", lr_schedule: str = "constant") -> Path:
    path = tmp_path / "population.toml"
    path.write_text(CONFIG.format(schedule=schedule, lr_schedule=lr_schedule, l2=L2))
    return path


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, cli) -> Path:
    tmp = tmp_path_factory.mktemp("population")
    code, _, err = cli(["train", "--config", config(tmp), "--out", tmp / "run"])
    assert code == 0, err
    return tmp / "run"


def test_each_member_carries_its_certificate_in_metrics_and_report(fitted):
    lines = [json.loads(line) for line in (fitted / "metrics.jsonl").read_text().splitlines()]
    certified = [r for r in lines if "grad_norm" in r]
    assert [(r["step"], r["seed"], r["split"]) for r in certified] == [
        (40, 3, "population"), (40, 4, "population")]
    assert all(r["lbfgs_iterations"] == 50 and r["drift"] > 0 and r["grad_norm"] > 0
               for r in certified)
    report = (fitted / "report.md").read_text()
    assert "## Certificate of the population fit" in report
    assert "population fit: 40 Adam steps at lr 0.01, then up to 50 L-BFGS" in report
    best = min(r["objective"] for r in certified)
    for r in certified:
        assert (f"| {r['seed']} | {r['objective']:.6f} | {r['objective'] - best:.2e} | "
                f"{r['grad_norm']:.2e} |") in report


def test_the_certificate_is_the_saved_models_objective(fitted):
    run = load_run(fitted)
    model = run.model().double()
    with torch.no_grad():
        ce, _ = population_fit(model, run.task.truth)  # the exact conditionals, not the batch
        norm = sum(p.pow(2).reshape(model.members, -1).sum(1) for p in model.parameters())
    certified = [r for r in run.metrics() if "grad_norm" in r]
    np.testing.assert_allclose([r["loss"] for r in certified], ce, rtol=1e-9)
    np.testing.assert_allclose([r["objective"] for r in certified],
                               ce + 0.5 * L2 * norm.numpy(), rtol=1e-9)
    bayes = run.task.truth.bayes_cross_entropy
    assert all(r["loss"] > bayes for r in certified)


def test_sessions_record_when_and_from_which_code(fitted):
    sessions = json.loads((fitted / "sessions.json").read_text())
    assert [(s["from_step"], s["to_step"]) for s in sessions] == [(0, 40)]
    assert sessions[0]["start_utc"] <= sessions[0]["end_utc"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent)
    if head.returncode == 0:  # the tests run from a checkout: the run names its commit
        assert sessions[0]["commit"] == head.stdout.strip()


def test_a_resumed_run_adds_a_session(tmp_path, cli):
    args = ["train", "--grammar", "parity", "--set", "n_bits=2", "--steps", 10, "--seeds", 0,
            "--eval-every", 5, "--checkpoint-every", 5, "--out", tmp_path / "run"]
    assert cli(args)[0] == 0
    assert cli([*args[:5], "--steps", 20, *args[7:], "--resume"])[0] == 0
    sessions = json.loads((tmp_path / "run" / "sessions.json").read_text())
    assert [(s["from_step"], s["to_step"]) for s in sessions] == [(0, 10), (10, 20)]


@pytest.mark.parametrize("schedule, lr_schedule, message", [
    ("untie@20", "constant", 'give tie_schedule "tied" or "untied"'),
    ("tied", "cosine", 'set lr_schedule = "constant"'),
])
def test_what_a_population_fit_cannot_take_is_refused(tmp_path, cli, schedule, lr_schedule,
                                                      message):
    code, _, err = cli(["train", "--config", config(tmp_path, schedule, lr_schedule),
                        "--out", tmp_path / "run"])
    assert code == 2 and message in err
    assert not (tmp_path / "run").exists()
