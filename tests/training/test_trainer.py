"""The training loop: exact resume, members equal solo runs, the NaN guard, the run directory,
the population fit recorded during training, and plain SGD against its update by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from dhwt.commands.train import report_run
from dhwt.config import TrainConfig
from dhwt.directories import LOCK, MARKER
from dhwt.errors import DhwtError
from dhwt.languages import load_language, load_task, write_dataset
from dhwt.models import output
from dhwt.models.init import member_generator
from dhwt.models.population import population_fit
from dhwt.runs import load_run
from dhwt.runs.checkpoints import latest_checkpoint, list_checkpoints
from dhwt.runs.metrics import read_metrics
from dhwt.runs.snapshots import read_snapshot, snapshot_files
from dhwt.training.runner import train_run
from dhwt.training.trainer import DATA_STREAM, Trainer


@pytest.fixture(scope="module")
def task(make_task):
    return make_task()


def _final(run_dir, config, task):
    """Everything a run leaves that must be reproducible: weights, optimizer, metrics, snapshots."""
    _, state = latest_checkpoint(run_dir / "checkpoints")
    snaps = {p.name: p.read_bytes() for p in sorted((run_dir / "embeddings").iterdir())}
    return state, (run_dir / "metrics.jsonl").read_text(), snaps


CONFIG = dict(seeds="1-2", steps=800, eval_every=40, snapshot_every=100, checkpoint_every=160,
              tie_schedule="untie@280,tie@600:mean", lr=1e-2, lr_period=120, batch_size=16,
              grad_clip=1.0, tie_penalty=1e-3)


@pytest.mark.slow
def test_resume_continues_bit_for_bit(task, tmp_path, interrupt_at, assert_same):
    config = TrainConfig(**CONFIG)
    train_run(config, task, tmp_path / "straight")
    # killed at 400 (checkpoint 320, untie@280 before it), then at 650 (checkpoint 640, tie@600)
    interrupt_at(400)
    with pytest.raises(KeyboardInterrupt):
        train_run(config, task, tmp_path / "resumed")
    lines = (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["step"] == 400  # lines past the checkpoint exist, to be cut
    interrupt_at(650)
    with pytest.raises(KeyboardInterrupt):
        train_run(config, task, tmp_path / "resumed", resume=True)
    result = train_run(config, task, tmp_path / "resumed", resume=True)
    assert result.step == 800
    straight = _final(tmp_path / "straight", config, task)
    resumed = _final(tmp_path / "resumed", config, task)
    assert_same(straight[0]["model"], resumed[0]["model"])
    assert_same(straight[0]["optimizer"], resumed[0]["optimizer"])
    assert_same(straight[0]["rng"], resumed[0]["rng"])
    assert straight[1] == resumed[1]  # metrics.jsonl: no line duplicated or lost
    assert straight[2].keys() == resumed[2].keys()
    assert_same(straight[2], resumed[2])


def _torch_settings() -> tuple[bool, int, bool]:
    return (torch.are_deterministic_algorithms_enabled(), torch.get_num_threads(),
            torch.utils.deterministic.fill_uninitialized_memory)


def test_torch_settings_of_a_run_are_restored_afterwards(task, tmp_path, interrupt_at):
    """A run sets deterministic mode (without its nan fill of new tensors) and its thread count;
    the caller's settings come back when it ends, and when it is interrupted."""
    before = _torch_settings()
    seen = []
    original = Trainer.evaluate

    def evaluate(self):
        seen.append(_torch_settings())
        return original(self)

    config = TrainConfig(steps=3, threads=2 if before[1] == 1 else 1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Trainer, "evaluate", evaluate)
        train_run(config, task, tmp_path / "done")
    assert set(seen) == {(True, config.placement.threads, False)}
    assert _torch_settings() == before
    interrupt_at(1)
    with pytest.raises(KeyboardInterrupt):
        train_run(config, task, tmp_path / "interrupted")
    assert _torch_settings() == before


def test_a_cpu_run_trains_with_freed_memory_kept(task, tmp_path, interrupt_at, fake_libc):
    """A CPU run trains inside dhwt.training.allocator.retained_memory (glibc's settings are
    changed while its steps are evaluated), which ends with the run, interrupted or not."""
    changed = [("mallopt", -4, 0), ("mallopt", -1, -1)]  # M_MMAP_MAX, M_TRIM_THRESHOLD
    seen = []
    original = Trainer.evaluate

    def evaluate(self):
        seen.append(list(fake_libc.calls))
        return original(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Trainer, "evaluate", evaluate)
        train_run(TrainConfig(steps=2, eval_every=1), task, tmp_path / "done")
        assert seen == [changed] * 3 and fake_libc.calls[2:] == [
            ("mallopt", -4, 65536), ("mallopt", -1, 128 * 1024), ("malloc_trim", 0)]
        interrupt_at(1)
        with pytest.raises(KeyboardInterrupt):
            train_run(TrainConfig(steps=2), task, tmp_path / "interrupted")
    assert fake_libc.calls[5:] == fake_libc.calls[:5]  # set, then handed back again


def test_member_equals_a_solo_run_of_its_seed(task, tmp_path):
    common = dict(steps=300, eval_every=100, snapshot_every=100, checkpoint_every=300,
                  tie_schedule="untie@120", tie_penalty=0.01, lr=1e-2, batch_size=8,
                  grad_clip=0.5, threads=1)
    train_run(TrainConfig(seeds=[5, 7, 9], **common), task, tmp_path / "ensemble")
    train_run(TrainConfig(seeds=[7], **common), task, tmp_path / "solo")
    for step in (0, 100, 200, 300):
        name = f"step_{step:07d}.safetensors"
        ens = read_snapshot(tmp_path / "ensemble" / "embeddings" / name)
        solo = read_snapshot(tmp_path / "solo" / "embeddings" / name)
        assert ens.seeds == (5, 7, 9) and ens.tied == (step < 120)
        for key in ("input", "output"):
            torch.testing.assert_close(torch.from_numpy(getattr(ens, key)[1:2]),
                                       torch.from_numpy(getattr(solo, key)), rtol=1e-5, atol=1e-6)
    ens_lines = [json.loads(x) for x in (tmp_path / "ensemble" / "metrics.jsonl").open()]
    solo_lines = [json.loads(x) for x in (tmp_path / "solo" / "metrics.jsonl").open()]
    member = [r for r in ens_lines if r["seed"] == 7]
    assert len(member) == len(solo_lines)
    for a, b in zip(member, solo_lines):
        assert (a["step"], a["split"], a["tied"]) == (b["step"], b["split"], b["tied"])
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["accuracy"] == pytest.approx(b["accuracy"], abs=1e-6)


def test_token_major_loss_path_trains_as_the_logits_path_and_resumes_bit_for_bit(
        task, tmp_path, interrupt_at, assert_same, monkeypatch):
    """The fused training loss (dhwt.models.output, forced onto parity's small vocabulary by
    lowering the layout threshold) trains what the feature-major logits path trains, to float
    tolerance, and a run on it resumes bit for bit."""
    config = TrainConfig(seeds="1-2", steps=60, eval_every=20, snapshot_every=20,
                         checkpoint_every=20, tie_schedule="untie@30", lr=1e-2, batch_size=16,
                         dropout=0.1, threads=1)
    train_run(config, task, tmp_path / "logits")
    monkeypatch.setattr(output, "TOKEN_MAJOR_VOCAB", 1)
    calls, dense = [], []
    loss, dense_loss = output.output_loss, output.weighted_cross_entropy

    def counted(*args):
        calls.append(1)
        with monkeypatch.context() as inside:  # the logits path's loss, were it taken
            inside.setattr(output, "weighted_cross_entropy",
                           lambda *a: dense.append(1) or dense_loss(*a))
            return loss(*args)

    monkeypatch.setattr(output, "output_loss", counted)
    train_run(config, task, tmp_path / "fused")
    assert len(calls) == config.optim.steps and not dense  # every update took the fused path
    interrupt_at(40)
    with pytest.raises(KeyboardInterrupt):
        train_run(config, task, tmp_path / "resumed")
    train_run(config, task, tmp_path / "resumed", resume=True)
    fused, resumed = (_final(tmp_path / name, config, task) for name in ("fused", "resumed"))
    assert_same(fused[0]["model"], resumed[0]["model"])
    assert fused[1] == resumed[1]
    reference = [json.loads(x) for x in (tmp_path / "logits" / "metrics.jsonl").open()]
    ours = [json.loads(x) for x in fused[1].splitlines()]
    assert len(ours) == len(reference)
    for a, b in zip(ours, reference):
        assert (a["step"], a["seed"], a["split"]) == (b["step"], b["seed"], b["split"])
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)


def test_nan_guard_stops_and_keeps_the_last_good_checkpoint(task, tmp_path):
    config = TrainConfig(seeds="3-4", steps=50, lr=1e30, lr_schedule="constant", lr_min=0.0,
                         eval_every=1, checkpoint_every=1, threads=1)
    with pytest.raises(DhwtError, match=r"(loss|a weight) became (nan|inf) at step \d+ \(member "
                                        r"seed [34]\); last good checkpoint: \S+step_\d{7}\.pt$"
                       ) as info:
        train_run(config, task, tmp_path / "run")
    bad_step = int(str(info.value).split(" at step ")[1].split()[0])
    path, state = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert str(info.value).endswith(f"last good checkpoint: {path}")
    assert state["step"] <= bad_step
    assert all(torch.isfinite(v).all() for v in state["model"].values())
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").open()]
    assert all(r["step"] <= state["step"] for r in lines)
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in lines)


def test_run_directory_layout_and_report(task, tmp_path):
    config = TrainConfig(seeds="1-2", steps=30, eval_every=10, snapshot_every=15,
                         checkpoint_every=10, tie_schedule="untie@10", threads=1)
    result = train_run(config, task, tmp_path / "run")
    run = tmp_path / "run"
    assert not (run / "report.md").exists()  # the runner trains; the recipe writes the report
    report_run(run, task)
    assert sorted(p.name for p in run.iterdir()) == [MARKER, LOCK, "checkpoints", "config.toml",
                                                     "embeddings", "figures", "metrics.jsonl",
                                                     "report.html", "report.md", "sessions.json"]
    assert TrainConfig.from_toml(run / "config.toml") == config
    assert [p.name for p in list_checkpoints(run / "checkpoints")] == ["step_0000020.pt",
                                                                       "step_0000030.pt"]
    assert sorted(p.name for p in (run / "embeddings").iterdir()) == [
        f"step_{s:07d}.safetensors" for s in (0, 15, 30)]
    snap = read_snapshot(run / "embeddings" / "step_0000030.safetensors")
    assert snap.input.shape == (2, len(task.vocab), 4) == snap.output.shape
    assert snap.vocab == task.vocab and snap.tied is False
    lines = [json.loads(x) for x in (run / "metrics.jsonl").open()]
    assert {r["step"] for r in lines} == {0, 10, 20, 30}
    assert {r["split"] for r in lines} >= {"train", "train_fresh"}
    assert set(lines[0]) == {"step", "member", "seed", "split", "loss", "accuracy", "lr", "tied",
                             "gap"}
    assert [r["tied"] for r in lines if r["split"] == "train" and r["member"] == 0] == [
        True, False, False, False]  # untie@10 is in force at the evaluation of step 10
    assert (run / "figures" / "training.png").stat().st_size > 1000
    assert "figures/training.png" in (run / "report.md").read_text()
    assert len(result.final_metrics) == len([r for r in lines if r["step"] == 30])
    with pytest.raises(DhwtError, match="already exists"):
        train_run(config, task, run)


def test_resume_refuses_a_different_config_and_a_truncated_checkpoint(task, tmp_path):
    config = TrainConfig(steps=20, checkpoint_every=10, threads=1)
    first = train_run(config, task, tmp_path / "run")
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text()
    again = train_run(config, task, tmp_path / "run", resume=True)  # a finished run: nothing to do
    assert again.final_metrics == first.final_metrics and again.step == 20
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == metrics
    with pytest.raises(DhwtError, match=r"cannot resume .* with lr = 0.1: the run was configured "
                                        r"with 0.0005"):
        train_run(TrainConfig(steps=20, checkpoint_every=10, threads=1, lr=0.1), task,
              tmp_path / "run", resume=True)
    with pytest.raises(DhwtError, match=r"cannot resume .* with steps = 10: the run is configured "
                                        r"for 20 steps, and --steps may extend it, not shorten"):
        train_run(TrainConfig(steps=10, checkpoint_every=10, threads=1), task, tmp_path / "run",
              resume=True)
    newest = list_checkpoints(tmp_path / "run" / "checkpoints")[-1]
    newest.write_bytes(newest.read_bytes()[:1000])
    with pytest.raises(DhwtError, match="step_0000020.pt is truncated or corrupt.*step_0000010.pt"):
        train_run(config, task, tmp_path / "run", resume=True)


# ---------------------------------------------------------------------------------------------
# record.population_every: the exact population fit recorded during training.


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


# ---------------------------------------------------------------------------------------------
# optimizer = "sgd" (plain gradient descent) against the update computed by hand, and the decay
# of input rows no input reads against its closed form under both optimizers.


FOUR_CASES = str(Path(__file__).resolve().parents[2] / "synthetic" / "four-cases.toml")


def sgd_config(data, **changes) -> TrainConfig:
    values = dict(data=str(data), objective="clm", d_model=8, n_layers=1, n_heads=2, d_ff=8,
                  tie_schedule="untied", seeds=[3, 4], steps=30, lr=0.05, lr_min=0.005,
                  lr_schedule="cosine", weight_decay=0.5, optimizer="sgd", eval_every=30,
                  snapshot_every=30, checkpoint_every=30)
    return TrainConfig(**{**values, **changes})


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    """The four-cases dataset, every string for training."""
    path = tmp_path_factory.mktemp("data") / "four-cases"
    write_dataset(load_language(FOUR_CASES), path, valid_fraction=0.0, test_fraction=0.0)
    return path


@pytest.fixture(scope="module")
def four_task(four):
    return load_task(four, "clm")


def test_sgd_is_recorded_and_checked(four):
    c = sgd_config(four)
    assert c.optim.optimizer == "sgd"
    assert 'optimizer = "sgd"' in c.to_toml()
    assert TrainConfig(data=str(four)).optim.optimizer == "adamw"
    with pytest.raises(DhwtError, match="optimizer must be one of adamw, sgd, population, got 'adam'"):
        sgd_config(four, optimizer="adam")


@pytest.mark.slow
def test_an_sgd_update_is_plain_gradient_descent_with_weight_decay(four, four_task, tmp_path):
    """The checkpoint of step 1 against one update by hand from the weights a run starts from
    and the batch its data streams draw first."""
    c = sgd_config(four, steps=1, eval_every=1, snapshot_every=1, checkpoint_every=1)
    model = Trainer([(c, tmp_path / "unused")], four_task).model  # the run's starting weights
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    batch = four_task.train_batches([member_generator(s, DATA_STREAM) for s in c.members.seeds],
                               c.optim.batch_size)
    loss = model(batch.inputs, batch.padding, targets=batch.targets, weights=batch.weights).sum()
    grads = torch.autograd.grad(loss, list(params.values()))
    train_run(c, four_task, tmp_path / "run")
    after = latest_checkpoint(tmp_path / "run" / "checkpoints")[1]["model"]
    lr, wd = 0.05, 0.5  # lr_at(0) of the cosine schedule is its peak
    for (name, p0), g in zip(params.items(), grads):
        torch.testing.assert_close(after[name], p0.detach() - lr * (g + wd * p0.detach()),
                                   rtol=1e-5, atol=1e-6)


def input_rows(run_dir: Path, step: int, rows: list[int]) -> torch.Tensor:
    """The input-embedding rows `rows` of every member in the run's snapshot of `step`."""
    return torch.from_numpy(read_snapshot(snapshot_files(run_dir)[step]).input[:, rows])


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_rows_no_input_reads_decay_by_the_closed_form(four, four_task, tmp_path, optimizer):
    """In the causal four-cases language [EOS] is only a target and [PAD] only sits after the
    last symbol (loss weight 0, attended by no earlier position): their input rows get no
    gradient, so each update multiplies them by 1 - lr_t wd, lr_t the cosine schedule's."""
    train_run(sgd_config(four, optimizer=optimizer, snapshot_every=10), four_task,
              tmp_path / "run")
    rows = [four_task.vocab.index(s) for s in ("[EOS]", "[PAD]", "[BOS]")]
    start, end = (input_rows(tmp_path / "run", step, rows) for step in (0, 10))
    lr, lr_min, wd = 0.05, 0.005, 0.5
    decay = math.prod(1 - wd * (lr_min + (lr - lr_min) * (1 + math.cos(math.pi * t / 30)) / 2)
                      for t in range(10))  # the first 10 updates of the 30-step schedule
    torch.testing.assert_close(end[:, :2], start[:, :2] * decay, rtol=1e-5, atol=0.0)
    assert not torch.allclose(end[:, 2], start[:, 2] * decay, rtol=1e-3)  # [BOS] is read


@pytest.mark.slow
def test_an_sgd_run_resumes_bit_for_bit(four, four_task, tmp_path, interrupt_at, assert_same):
    c = sgd_config(four, steps=6, eval_every=2, snapshot_every=2, checkpoint_every=2)
    train_run(c, four_task, tmp_path / "whole")
    interrupt_at(3)
    with pytest.raises(KeyboardInterrupt):
        train_run(c, four_task, tmp_path / "cut")
    train_run(c, four_task, tmp_path / "cut", resume=True)
    whole = latest_checkpoint(tmp_path / "whole" / "checkpoints")[1]
    cut = latest_checkpoint(tmp_path / "cut" / "checkpoints")[1]
    assert_same(whole["model"], cut["model"])
    assert_same(whole["optimizer"], cut["optimizer"])


def test_sgd_goes_through_a_tie_switch(four, four_task, tmp_path):
    """SGD keeps no optimizer state, so an untie has no moments to copy: the run goes on, and
    the output matrix starts as a copy of the input matrix."""
    c = sgd_config(four, tie_schedule="untie@2", steps=3, eval_every=1, snapshot_every=1)
    train_run(c, four_task, tmp_path / "run")
    files = snapshot_files(tmp_path / "run")
    switched, after = read_snapshot(files[2]), read_snapshot(files[3])
    assert not switched.tied and (switched.output == switched.input).all()
    assert not (after.output == after.input).all()
