"""fit_population: members end where their certificates say, at a point a second optimiser
(torch's own L-BFGS with a strong-Wolfe line search, one member alone) cannot improve; and
`optimizer = "population"` in a run, checked against the saved model."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from dhwt import load_run
from dhwt.errors import DhwtError
from dhwt.languages import compute_truth, load_language
from dhwt.languages.population import population_batch
from dhwt.models import ModelConfig, build_model
from dhwt.models.population import population_fit
from dhwt.training.population import PopulationOptions, fit_population

#: Run until the gradient norm is below 1e-4 (at most 4,000 iterations): the end does not hang
#: on how fast one CPU's rounding lets L-BFGS converge.
OPTIONS = PopulationOptions(adam_steps=300, lbfgs_steps=4000, l2=0.1, tolerance=1e-4)
SHORT = PopulationOptions(adam_steps=100, lbfgs_steps=100, l2=0.1, window=50)


def fitted(seeds, tied=True, options=OPTIONS):
    language = load_language("demand", {"k": 2, "pattern": "ratio", "dose": 0.0})
    batch = population_batch(language, "clm")
    config = ModelConfig(vocab_size=len(language.vocab("clm")), max_len=4, d_model=4, d_ff=8,
                         norm="pre", final_norm=False, positions="learned", causal=True)
    model = build_model(config, seeds, tied=tied)
    return language, batch, model, fit_population(model, batch, options)


def objective(model, batch, l2):
    members = (model.members, -1, -1)
    ce = model(batch.inputs.expand(members), targets=batch.targets.expand(members),
               weights=batch.weights.double().expand(members))
    norm = sum(p.pow(2).reshape(model.members, -1).sum(1) for p in model.parameters())
    return ce + 0.5 * l2 * norm, ce


def test_the_certificate_is_what_the_model_holds():
    language, batch, model, cert = fitted([0, 1], options=SHORT)
    value, ce = objective(model, batch, OPTIONS.l2)
    grads = torch.autograd.grad(value.sum(), list(model.parameters()))
    norm = torch.cat([g.reshape(2, -1) for g in grads], 1).norm(dim=1)
    np.testing.assert_allclose(cert.objective, value.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(cert.cross_entropy, ce.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(cert.grad_norm, norm.numpy(), rtol=1e-6, atol=1e-14)
    assert (cert.drift > 0).all()  # the strong-Wolfe line search only ever goes down
    bayes = compute_truth(language, "clm").bayes_cross_entropy
    assert (cert.cross_entropy > bayes).all()


@pytest.mark.slow
@pytest.mark.long  # a whole fit to 4,000 L-BFGS iterations
def test_a_second_optimiser_cannot_improve_a_certified_member():
    _, batch, model, cert = fitted([5])
    assert cert.grad_norm[0] < 1e-3 and 0 <= cert.drift[0] < 1e-6
    params = list(model.parameters())
    lbfgs = torch.optim.LBFGS(params, max_iter=200, tolerance_grad=1e-12,
                              tolerance_change=1e-15, line_search_fn="strong_wolfe")

    def closure():
        lbfgs.zero_grad()
        value, _ = objective(model, batch, OPTIONS.l2)
        value.sum().backward()
        return value.sum()

    lbfgs.step(closure)
    after, _ = objective(model, batch, OPTIONS.l2)
    assert cert.objective[0] - float(after[0].detach()) < 1e-6


def test_members_are_independent_in_the_adam_phase():
    adam_only = PopulationOptions(adam_steps=200, lbfgs_steps=0, l2=0.1)
    *_, both = fitted([3, 4], options=adam_only)
    *_, alone = fitted([4], options=adam_only)
    assert both.objective[1] == pytest.approx(alone.objective[0], abs=1e-12)


def test_bad_options_are_one_error():
    with pytest.raises(DhwtError, match="lr must be a finite number > 0"):
        PopulationOptions(lr=0.0)


def test_newton_ends_at_a_local_minimum():
    newton = PopulationOptions(adam_steps=300, lbfgs_steps=100, newton_steps=100, l2=0.1)
    _, batch, model, cert = fitted([2], options=newton)
    assert cert.grad_norm[0] < 1e-6  # L-BFGS: ~1e-3 at best
    # positive semidefinite to rounding: a head's rotations leave F flat (dhwt.training.newton)
    assert cert.min_eigenvalue[0] > -1e-8
    assert cert.newton_fall[0] >= 0 and 0 < cert.newton_iterations[0] <= 100
    value, _ = objective(model, batch, newton.l2)
    assert cert.objective[0] == pytest.approx(float(value[0].detach()), rel=1e-12)
    params = list(model.parameters())
    start = [p.detach().clone() for p in params]
    g = torch.Generator().manual_seed(0)
    for _ in range(20):  # every nearby point in a random direction is higher
        with torch.no_grad():
            for p, p0 in zip(params, start):
                p.copy_(p0 + 1e-3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        assert float(objective(model, batch, newton.l2)[0][0]) > cert.objective[0]


# ---------------------------------------------------------------------------------------------
# `optimizer = "population"` in a run: each member's certificate in metrics.jsonl and the
# report, checked against the saved model by a second implementation of the population objective
# (dhwt.models.population, from the exact conditionals); sessions.json records when and from
# which code a run trained.


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
def fitted_run(tmp_path_factory, cli) -> Path:
    tmp = tmp_path_factory.mktemp("population")
    code, _, err = cli(["train", "--config", config(tmp), "--out", tmp / "run"])
    assert code == 0, err
    return tmp / "run"


def test_each_member_carries_its_certificate_in_metrics_and_report(fitted_run):
    lines = [json.loads(line) for line in (fitted_run / "metrics.jsonl").read_text().splitlines()]
    certified = [r for r in lines if "grad_norm" in r]
    assert [(r["step"], r["seed"], r["split"]) for r in certified] == [
        (40, 3, "population"), (40, 4, "population")]
    assert all(r["lbfgs_iterations"] == 50 and r["drift"] > 0 and r["grad_norm"] > 0
               for r in certified)
    report = (fitted_run / "report.md").read_text()
    assert "## Certificate of the population fit" in report
    assert "population fit: 40 Adam steps at lr 0.01, then up to 50 L-BFGS" in report
    best = min(r["objective"] for r in certified)
    for r in certified:
        assert (f"| {r['seed']} | {r['objective']:.6f} | {r['objective'] - best:.2e} | "
                f"{r['grad_norm']:.2e} |") in report


def test_the_certificate_is_the_saved_models_objective(fitted_run):
    run = load_run(fitted_run)
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


def test_sessions_record_when_and_from_which_code(fitted_run):
    sessions = json.loads((fitted_run / "sessions.json").read_text())
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


def test_newton_steps_add_the_second_order_certificate(tmp_path, cli):
    """With newton_steps, each member's line and the report carry Newton's fall, iterations and
    the Hessian's smallest eigenvalue; at K 2 and L2 0.1 Newton converges (gradient norm near
    rounding, no negative eigenvalue), and the eigenvalue recorded is the one of the saved
    model's Hessian, computed again here by central differences of plain gradients."""
    l2 = 0.1
    path = config(tmp_path)
    path.write_text(path.read_text().replace("lbfgs_steps = 50", "lbfgs_steps = 50\n"
                                             "newton_steps = 200")
                    .replace(f"weight_decay = {L2}", f"weight_decay = {l2}"))
    code, _, err = cli(["train", "--config", path, "--out", tmp_path / "run"])
    assert code == 0, err
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text()
             .splitlines()]
    certified = [r for r in lines if "grad_norm" in r]
    assert len(certified) == 2
    assert all(r["grad_norm"] < 1e-6 and r["newton_fall"] >= 0 and r["newton_iterations"] > 0
               and r["min_eigenvalue"] > -1e-6 for r in certified)
    report = (tmp_path / "run" / "report.md").read_text()
    assert "then up to 50 L-BFGS iterations and 200 Newton iterations a member" in report
    for r in certified:
        assert f"| {r['newton_iterations']} | {r['min_eigenvalue']:+.2e} |" in report
    run = load_run(tmp_path / "run")
    model = run.model()
    assert next(model.parameters()).dtype == torch.float64  # as fitted, not rounded to float32
    batch = population_batch(run.task.language, "clm")
    params = [p for p in model.parameters() if p.requires_grad]
    flat = torch.cat([p.detach().reshape(model.members, -1) for p in params], dim=1)

    def gradient(member: int, x: torch.Tensor) -> torch.Tensor:
        """The gradient of member's F at x (its parameters, flat), by one plain backward."""
        with torch.no_grad():
            start = 0
            for p in params:
                size = p[member].numel()
                p[member] = x[start:start + size].view_as(p[member])
                start += size
        expand = (model.members, -1, -1)
        ce = model(batch.inputs.expand(expand), None, targets=batch.targets.expand(expand),
                   weights=batch.weights.double().expand(expand))[member]
        value = ce + 0.5 * l2 * sum(p[member].pow(2).sum() for p in params)
        grads = torch.autograd.grad(value, params)
        return torch.cat([g[member].reshape(-1) for g in grads])

    eps = 1e-6  # the error falls as eps²: at 1e-4 the steep directions are off by 2
    for member, r in enumerate(certified):  # central differences of the gradient
        x = flat[member]
        columns = [(gradient(member, x + eps * e) - gradient(member, x - eps * e)) / (2 * eps)
                   for e in torch.eye(len(x), dtype=torch.float64)]
        gradient(member, x)
        h = torch.stack(columns)
        smallest = float(np.linalg.eigvalsh(((h + h.T) / 2).numpy())[0])
        assert abs(smallest - r["min_eigenvalue"]) < 1e-6, (smallest, r["min_eigenvalue"])
