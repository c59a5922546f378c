"""The training loop: exact resume, members equal solo runs, the NaN guard, the run directory."""

from __future__ import annotations

import json

import pytest
import torch

from dhwt.commands.train import report_run
from dhwt.directories import LOCK, MARKER
from dhwt.errors import DhwtError
from dhwt.models import output
from dhwt.config import TrainConfig
from dhwt.training.runner import train_run
from dhwt.runs.checkpoints import latest_checkpoint, list_checkpoints
from dhwt.training.trainer import Trainer
from dhwt.runs.snapshots import read_snapshot


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
    calls = []
    fused_apply = output._FusedCrossEntropy.apply
    monkeypatch.setattr(output._FusedCrossEntropy, "apply",
                        lambda *args: calls.append(1) or fused_apply(*args))
    train_run(config, task, tmp_path / "fused")
    assert len(calls) == config.optim.steps  # every update took the fused path
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
