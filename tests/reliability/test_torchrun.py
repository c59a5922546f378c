"""Data-parallel training under torchrun (2 CPU processes, gloo) against the oracle of one process
with the same global batch: equal to float tolerance (weights, Adam moments, metrics, snapshots),
the data generators' states bit for bit, only rank 0 writing, and resume after the whole launch is
killed (with 2 processes again, or with 1)."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dhwt.runs.snapshots import read_snapshot
from dhwt.errors import DhwtError
from dhwt.languages import load_task
from dhwt.config import TrainConfig
from dhwt.runs.checkpoints import checkpoint_path, load_checkpoint
from dhwt.training.distributed import Parallel
from dhwt.training.ensemble import repeat_batch
from dhwt.models import build_model
from dhwt.training.trainer import Trainer, model_config

pytestmark = pytest.mark.long  # whole runs killed, resumed or launched twice: `make test-long`

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = Path(sys.executable).parent / "torchrun"
TOLERANCE = dict(rtol=1e-4, atol=1e-5)  # float32 sums in another order, over 200 steps

#: Batch mode through both tie switches, with the tie penalty (added once, on rank 0) and
#: per-member clipping (after the all-reduce): every piece that could double-count.
BATCHED = ["--seeds", "1-2", "--steps", 40, "--batch-size", 6, "--lr", 0.01,
           "--tie-schedule", "untie@10,tie@25:mean", "--tie-penalty", 0.01, "--eval-every", 5,
           "--snapshot-every", 10, "--checkpoint-every", 10]
#: Full batch: the 14 training strings split 7 + 7 with their probability weights.
FULL = ["--seeds", "3", "--steps", 200, "--lr", 0.01, "--tie-schedule", "untie@30",
        "--eval-every", 20, "--snapshot-every", 50, "--checkpoint-every", 40]


def _torchrun(args: list[object]) -> subprocess.Popen:
    return subprocess.Popen(
        [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "dhwt", *map(str, args)],
        cwd=ROOT, env=dict(os.environ, MPLBACKEND="Agg"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)


#: What a worker prints when it aborts inside torch (std::terminate, SIGABRT, no Python
#: traceback). Seen in CI twice: rank 1 of the first test, 6 s after the launch started; and
#: rank 0 of test_only_rank_0_writes, in a clean clone's `make test` on an Intel Xeon (the same
#: launches 25 and 12 times in a row here all passed): a crash below dhwt's code, not a wrong
#: result.
ABORTED = "terminate called without an active exception"


def _finish(proc: subprocess.Popen, again: list[object] | None = None) -> str:
    """The launch's stdout once it ended with exit code 0. If a worker aborted as ABORTED
    says and `again` is given, the launch runs once more with those arguments (a fresh start
    with --overwrite, or the same --resume), so a crash inside torch is told apart from a
    wrong result: a second failure of any kind fails the test."""
    out, err = proc.communicate(timeout=300)
    if proc.returncode != 0 and ABORTED in err and again is not None:
        return _finish(_torchrun(again))
    assert proc.returncode == 0, err[-3000:]
    return out


def _single(cli, args: list[object]) -> None:
    code, _, err = cli(args)
    assert code == 0, err


def _clip(grad_clip: float, directory: Path) -> Path:
    (directory / "clip.toml").write_text(f"grad_clip = {grad_clip}\n")
    return directory / "clip.toml"


def _assert_close_runs(expected: Path, actual: Path, rundirs) -> None:
    """Same files; metrics, snapshots, weights and Adam moments equal to float tolerance; step,
    tying and the generators' states equal exactly."""
    names_a, names_b = set(rundirs.files(expected)), set(rundirs.files(actual))
    assert names_a == names_b, (sorted(names_a - names_b), sorted(names_b - names_a))
    a, b = rundirs.metric_lines(expected), rundirs.metric_lines(actual)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert {k: v for k, v in x.items() if k not in ("loss", "accuracy", "gap")} == {
            k: v for k, v in y.items() if k not in ("loss", "accuracy", "gap")}
        for key in ("loss", "accuracy", "gap"):
            assert y[key] == pytest.approx(x[key], rel=1e-4, abs=1e-5), (x, key)
    for name in rundirs.files(expected):
        if name.startswith("embeddings/"):
            sa, sb = read_snapshot(expected / name), read_snapshot(actual / name)
            assert (sa.step, sa.tied, sa.seeds, sa.vocab) == (sb.step, sb.tied, sb.seeds, sb.vocab)
            for key in ("input", "output"):
                torch.testing.assert_close(torch.from_numpy(getattr(sb, key)),
                                           torch.from_numpy(getattr(sa, key)), **TOLERANCE)
    states_a, states_b = rundirs.checkpoint_states(expected), rundirs.checkpoint_states(actual)
    assert states_a.keys() == states_b.keys()
    for name, sa in states_a.items():
        sb = states_b[name]
        assert (sa["step"], sa["config"], sa["optimizer_params"]) == (
            sb["step"], sb["config"], sb["optimizer_params"])
        torch.testing.assert_close(_logits(sb), _logits(sa), **TOLERANCE)
        torch.testing.assert_close(_without_key_bias(sb), _without_key_bias(sa), **TOLERANCE)
        rundirs.assert_same(sa["rng"], sb["rng"], name)  # data, draw, dropout streams


def _logits(state: dict) -> torch.Tensor:
    """What a checkpoint's model predicts on the task's fixed training evaluation batch."""
    config = TrainConfig.from_dict(state["config"])
    task = load_task(config.data.data, config.data.objective)
    model = build_model(model_config(config, task), config.members.seeds, tied=True)
    model.load_state_dict(state["model"])  # adopts the checkpoint's tying state
    batch = repeat_batch(task.eval_batch("train"), len(config.members.seeds))
    with torch.no_grad():
        return model.eval()(batch.inputs, batch.padding)


def _without_key_bias(state: dict) -> dict[str, object]:
    """Weights and Adam state, with the attention key bias zeroed. Its exact gradient is 0
    (softmax ignores a shift shared by every key), so its computed gradient is float noise
    (~1e-9) that depends on the order of summation, and Adam with eps 1e-12 turns that noise
    into full steps: the key bias wanders by ~lr per step in any two runs that sum in different
    orders, without changing a prediction (the logits are compared separately)."""
    def cut(name: str, t: torch.Tensor) -> torch.Tensor:
        if not name.endswith("in_proj_bias") or t.dim() == 0:  # (Adam's step count: a scalar)
            return t
        t, d = t.clone(), t.shape[-1] // 3
        t[..., d:2 * d] = 0
        return t

    names = [n for group in state["optimizer_params"] for n in group]
    adam = {names[i]: {k: cut(names[i], v) for k, v in per.items()}
            for i, per in state["optimizer"]["state"].items()}
    return {"model": {n: cut(n, t) for n, t in state["model"].items()}, "adam": adam}


@pytest.mark.slow
def test_two_processes_equal_one_with_the_same_global_batch(dataset, tmp_path, cli, rundirs):
    clip = _clip(1.0, tmp_path)
    args = ["train", "--data", dataset, "--config", clip, *BATCHED]
    proc = _torchrun([*args, "--out", tmp_path / "ddp"])
    _single(cli, [*args, "--out", tmp_path / "one"])
    out = _finish(proc, again=[*args, "--out", tmp_path / "ddp", "--overwrite"])
    assert out.count("trained 40 steps") == 1  # only rank 0 reports (and writes)
    _assert_close_runs(tmp_path / "one", tmp_path / "ddp", rundirs)
    # the Adam moments hold the gradient's scale, which Adam's update itself would not show:
    # a mean instead of a sum over processes would halve exp_avg
    state = load_checkpoint(tmp_path / "ddp" / "checkpoints" / "step_0000040.pt")
    assert any(v["exp_avg"].abs().max() > 1e-3 for v in state["optimizer"]["state"].values())


def _workers(pid: int) -> list[int]:
    """The processes torchrun started: those whose parent is `pid` (from /proc/N/stat, whose
    fourth field is the parent's pid; the text after the last ')' skips the command name)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children


@pytest.mark.slow
def test_full_batch_killed_launch_resumes_with_two_processes_or_one(dataset, tmp_path, cli,
                                                                    rundirs):
    """The whole launch is killed (workers and launcher, SIGKILL) after a checkpoint; the run then
    resumes under torchrun, and a copy of it in one process: both end as the one-process run."""
    args = ["train", "--data", dataset, *FULL]
    run = tmp_path / "ddp"
    proc = _torchrun([*args, "--out", run])
    target = checkpoint_path(run / "checkpoints", 40)
    deadline = time.monotonic() + 300
    while not target.is_file():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.002)
    workers = _workers(proc.pid)
    for pid in [*workers, proc.pid]:
        os.kill(pid, signal.SIGKILL)
    proc.communicate()
    assert len(workers) == 2, workers
    assert not (run / "report.md").exists(), "the launch ended before the kill"
    # the one-process reference runs only now: run while the launch was being watched, it gave
    # the launch time to finish all its steps before the kill (the test's old flakiness)
    _single(cli, [*args, "--out", tmp_path / "one"])
    shutil.copytree(run, tmp_path / "ddp-then-one")
    resume = ["train", "--out", run, "--resume"]
    _finish(_torchrun(resume), again=resume)
    _assert_close_runs(tmp_path / "one", run, rundirs)
    _single(cli, ["train", "--out", tmp_path / "ddp-then-one", "--resume"])
    _assert_close_runs(tmp_path / "one", tmp_path / "ddp-then-one", rundirs)


# -- the pieces, in one process -------------------------------------------------------------------
@pytest.mark.parametrize("rows, world", [(r, w) for r in (2, 3, 7, 14) for w in (1, 2, 3)
                                         if r >= w])  # fewer rows than processes is refused
def test_shards_partition_the_rows_and_keep_the_global_weights(rows, world, dataset):
    batch = repeat_batch(load_task(dataset, "mlm").eval_batch("train"), 2)
    batch = type(batch)(*(None if t is None else t[:, :rows] for t in (
        batch.inputs, batch.targets, batch.weights, batch.padding)))
    shards = [Parallel(rank, world).shard(batch) for rank in range(world)]
    assert all(s.inputs.shape[1] in (rows // world, -(-rows // world)) for s in shards)
    for field in ("inputs", "targets", "weights"):
        joined = torch.cat([getattr(s, field) for s in shards], dim=1)
        assert torch.equal(joined, getattr(batch, field))


@pytest.mark.parametrize("config, fragment", [
    (dict(dropout=0.1), "dropout 0.1 is not supported with 2 processes"),
    (dict(batch_size=1), "a training batch has 1 row, fewer than the 2 processes"),
])
def test_what_cannot_be_split_is_refused_before_anything_runs(config, fragment, dataset,
                                                              tmp_path):
    with pytest.raises(DhwtError, match=fragment):
        Trainer([(TrainConfig(data=str(dataset), steps=5, **config), tmp_path / "run")],
                load_task(dataset, "mlm"), Parallel(0, 2))
    assert not (tmp_path / "run").exists()


def test_a_bad_torchrun_environment_is_a_clear_error(dataset, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    code, _, err = cli(["train", "--data", dataset, "--steps", 2, "--out", tmp_path / "run"])
    assert code == 2 and err == ("error: WORLD_SIZE is 2 but MASTER_ADDR is not set; start "
                                 "several processes with torchrun (see "
                                 "docs/how-to/run-a-study.md)\n")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_only_rank_0_writes(dataset, tmp_path):
    """The two processes started by hand as torchrun would (RANK, WORLD_SIZE, MASTER_ADDR/PORT),
    rank 1 unable to write more than 64 bytes to any file (RLIMIT_FSIZE; torch itself probes the
    temporary directory with a few bytes; a config.toml, a metrics line, a snapshot or a
    checkpoint is far larger): the run still completes, and only rank 0 prints."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["train", "--data", dataset, "--seeds", "1-2", "--steps", 12, "--batch-size", 4,
            "--tie-schedule", "untie@4", "--eval-every", 4, "--checkpoint-every", 4,
            "--out", tmp_path / "run"]

    def no_writes() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    def launch() -> tuple[list[int], str, str, str, str]:
        procs = [subprocess.Popen(
            [sys.executable, "-m", "dhwt", *map(str, args)], cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, preexec_fn=no_writes if rank else None,
            env=dict(os.environ, MPLBACKEND="Agg", RANK=str(rank), LOCAL_RANK=str(rank),
                     WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
            for rank in (0, 1)]
        (out0, err0), (out1, err1) = (p.communicate(timeout=300) for p in procs)
        return [p.returncode for p in procs], out0, err0, out1, err1

    codes, out0, err0, out1, err1 = launch()
    if codes != [0, 0] and ABORTED in err0 + err1:  # a crash inside torch: once more, afresh
        shutil.rmtree(tmp_path / "run", ignore_errors=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        codes, out0, err0, out1, err1 = launch()
    assert codes == [0, 0], err0[-2000:] + err1[-2000:]
    assert "trained 12 steps" in out0 and out1 == ""
    assert (tmp_path / "run" / "report.md").is_file()
