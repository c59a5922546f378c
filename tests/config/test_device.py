"""TrainConfig.device on a machine without a GPU: the setting, its resolution (and torchrun's
backend) with a GPU faked where only the choice is tested, runs on "cpu" and "auto" equal to the
default bit for bit, and checkpoints that load whatever device wrote them."""

from __future__ import annotations

import io
import json
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from dhwt.errors import DhwtError
from dhwt.config import TrainConfig
from dhwt.training.runner import train_run
from dhwt.training import distributed
from dhwt.runs.checkpoints import (latest_checkpoint, list_checkpoints, load_checkpoint,
                                      save_checkpoint)
from dhwt.config.device import backend_for, resolve_device

GPU = torch.cuda.is_available()
no_gpu_only = pytest.mark.skipif(GPU, reason="tests the answer of a machine without a GPU")
CONFIG = dict(seeds="1-2", steps=60, eval_every=20, snapshot_every=20, checkpoint_every=20,
              tie_schedule="untie@30", dropout=0.1, lr=1e-2, batch_size=8)


@pytest.fixture(scope="module")
def task(make_task):
    return make_task()


@pytest.fixture
def fake_gpus(monkeypatch):
    """torch believes it sees two GPUs (only for choices that touch none)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


@contextmanager
def _saved_as_if_on_gpu():
    """Every torch.save in the block tags its tensors with cuda:0, as a GPU run's would be."""
    original = torch.serialization.location_tag
    torch.serialization.location_tag = lambda storage: "cuda:0"
    try:
        yield
    finally:
        torch.serialization.location_tag = original


def _outcome(run_dir: Path) -> tuple[dict, str, dict[str, bytes]]:
    """The final checkpoint (without the device it records), metrics and snapshot bytes."""
    _, state = latest_checkpoint(run_dir / "checkpoints")
    state["config"].pop("device")
    snaps = {p.name: p.read_bytes() for p in sorted((run_dir / "embeddings").iterdir())}
    return state, (run_dir / "metrics.jsonl").read_text(), snaps


# -- the setting and its resolution ---------------------------------------------------------------
@pytest.mark.parametrize("bad", ["gpu", "CPU", "cuda:", "cuda:x", "cuda:-1", "", 0, None])
def test_bad_device_is_a_one_line_error(bad):
    with pytest.raises(DhwtError, match=r"^device must be one of cpu, cuda, cuda:N, auto .*got "):
        TrainConfig(device=bad)


def test_cpu_and_auto_resolve_here():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == (torch.device("cuda", 0) if GPU else torch.device("cpu"))


@no_gpu_only
@pytest.mark.parametrize("asked", ["cuda", "cuda:0", "cuda:3"])
def test_a_gpu_that_is_not_there_is_refused(asked):
    with pytest.raises(DhwtError, match=f"^device {asked} asks for a GPU, but torch .* sees none"):
        resolve_device(asked)


def test_one_gpu_for_several_processes_is_refused():
    """Checked before anything else: the mistake is in the command, whatever the machine."""
    with pytest.raises(DhwtError, match="device cuda:1 puts all 2 processes on one GPU; under "
                                        "torchrun give device cuda"):
        resolve_device("cuda:1", local_rank=0, world_size=2)


def test_each_process_takes_the_gpu_of_its_local_rank(fake_gpus):
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda", local_rank=1, world_size=4) == torch.device("cuda", 1)
    assert resolve_device("auto", local_rank=1, world_size=4) == torch.device("cuda", 1)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(DhwtError, match=r"LOCAL_RANK 2\) needs GPU 2, but torch sees 2 GPUs"):
        resolve_device("cuda", local_rank=2, world_size=3)
    with pytest.raises(DhwtError, match="device cuda:5 needs GPU 5"):
        resolve_device("cuda:5")
    assert backend_for(torch.device("cuda", 1)) == "nccl"
    assert backend_for(torch.device("cpu")) == "gloo"


@pytest.mark.parametrize("device, backend, current", [("cuda", "nccl", torch.device("cuda", 1)),
                                                      ("auto", "nccl", torch.device("cuda", 1)),
                                                      ("cpu", "gloo", None)])
def test_torchrun_joins_with_the_backend_of_the_device(fake_gpus, monkeypatch, device, backend,
                                                       current):
    """What launch() asks torch.distributed for, as process LOCAL_RANK 1 of a 2-process launch."""
    for key, value in dict(WORLD_SIZE="2", RANK="1", LOCAL_RANK="1", MASTER_ADDR="localhost",
                           MASTER_PORT="29999").items():
        monkeypatch.setenv(key, value)
    calls = {}
    monkeypatch.setattr(torch.distributed, "init_process_group",
                        lambda backend, **kw: calls.update(backend=backend, **kw))
    monkeypatch.setattr(torch.distributed, "destroy_process_group", lambda: None)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.update(current=d))
    with distributed.launch(device) as parallel:
        assert (parallel.rank, parallel.world_size, parallel.local_rank) == (1, 2, 1)
    assert calls["backend"] == backend and calls.get("current") == current
    with pytest.raises(DhwtError, match="cuda:0 puts all 2 processes on one GPU"):
        with distributed.launch("cuda:0"):
            pass


# -- runs -----------------------------------------------------------------------------------------
def test_cpu_and_auto_runs_equal_the_default_bit_for_bit(task, tmp_path, assert_same):
    """Dropout on, untie half-way: data, dropout masks, weights, optimizer and every file agree."""
    if GPU:
        pytest.skip("auto resolves to a GPU here")
    default = _outcome(train_run(TrainConfig(**CONFIG), task, tmp_path / "default").run_dir)
    for device in ("cpu", "auto"):
        run = train_run(TrainConfig(**CONFIG, device=device), task, tmp_path / device).run_dir
        state, metrics, snaps = _outcome(run)
        assert metrics == default[1] and snaps == default[2]
        assert_same(state, default[0])
        assert f'device = "{device}"' in (run / "config.toml").read_text()


def test_checkpoint_written_on_a_gpu_loads_on_the_cpu(tmp_path):
    state = {"w": torch.arange(6.0).view(2, 3), "rng": [torch.zeros(4, dtype=torch.uint8)]}
    with _saved_as_if_on_gpu():
        path = save_checkpoint(tmp_path, 7, state)
    payload = path.read_bytes().partition(b"\n")[2]
    if not GPU:
        with pytest.raises(RuntimeError, match="CUDA"):  # the file really asks for a GPU
            torch.load(io.BytesIO(payload), weights_only=True)
    loaded = load_checkpoint(path)
    assert loaded["w"].device.type == "cpu" and torch.equal(loaded["w"], state["w"])
    assert load_checkpoint(path, map_location="meta")["w"].device.type == "meta"


def test_run_checkpointed_on_a_gpu_resumes_on_the_cpu_bit_for_bit(task, tmp_path, interrupt_at,
                                                                 assert_same):
    """The checkpoints of the interrupted run carry cuda tags; --resume (with another device
    setting, which a resume may change) loads them and ends as the uninterrupted run."""
    whole = _outcome(train_run(TrainConfig(**CONFIG), task, tmp_path / "whole").run_dir)
    config = TrainConfig(**CONFIG, device="cpu")
    interrupt_at(50)
    with _saved_as_if_on_gpu(), pytest.raises(KeyboardInterrupt):
        train_run(config, task, tmp_path / "cut")
    assert [p.name for p in list_checkpoints(tmp_path / "cut" / "checkpoints")][-1] == \
        "step_0000040.pt"
    other = "cpu" if GPU else "auto"  # auto would resume on a GPU where there is one
    train_run(TrainConfig(**CONFIG, device=other), task, tmp_path / "cut", resume=True)
    state, metrics, snaps = _outcome(tmp_path / "cut")
    assert metrics == whole[1] and snaps == whole[2]
    assert_same(state, whole[0])
    with pytest.raises(DhwtError, match="cannot resume .* with lr = 0.02"):
        train_run(TrainConfig(**{**CONFIG, "lr": 0.02}), task, tmp_path / "cut", resume=True)


def test_dropout_generators_of_another_device_type_restart_from_seed_and_step(task, tmp_path,
                                                                              interrupt_at,
                                                                              assert_same):
    """A checkpoint whose dropout states come from another type of device (a GPU's) cannot set
    the CPU generators: they restart from each member's seed and the step. The run goes on from
    the same weights, deterministically, but with other masks than the uninterrupted run."""
    whole = _outcome(train_run(TrainConfig(**CONFIG), task, tmp_path / "whole").run_dir)
    finals = []
    for name in ("a", "b"):
        interrupt_at(50)
        with pytest.raises(KeyboardInterrupt):
            train_run(TrainConfig(**CONFIG), task, tmp_path / name)
        path, state = latest_checkpoint(tmp_path / name / "checkpoints")
        state["rng"]["dropout_device"] = "cuda"
        state["rng"]["dropout"] = torch.zeros(2, 16, dtype=torch.uint8)  # a CUDA-sized state
        save_checkpoint(path.parent, int(state["step"]), state)
        train_run(TrainConfig(**CONFIG), task, tmp_path / name, resume=True)
        finals.append(_outcome(tmp_path / name))
    assert_same(finals[0][0], finals[1][0])
    assert finals[0][1] == finals[1][1]
    def upto(metrics: str, step: int) -> list[dict]:
        return [r for r in map(json.loads, metrics.splitlines()) if r["step"] <= step]

    assert upto(finals[0][1], 40) == upto(whole[1], 40)
    assert upto(finals[0][1], 60) != upto(whole[1], 60)
    assert not torch.equal(finals[0][0]["model"]["embeddings.input_weight"],
                           whole[0]["model"]["embeddings.input_weight"])


# -- the command line on a machine without a GPU ---------------------------------------------------
def _refused(outcome: tuple[int, str, str], fragment: str) -> None:
    code, out, err = outcome
    assert code == 2 and out == "", (code, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert fragment in err, err


@no_gpu_only
def test_train_on_cuda_is_one_error_line_and_writes_nothing(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "gpu.toml"
    config.write_text('device = "cuda"\nsteps = 2\n')
    for args in (["--device", "cuda"], ["--device", "cuda:1"], ["--config", config]):
        _refused(cli(["train", "--grammar", "parity", *args, "--out", tmp_path / "run"]),
                 "asks for a GPU, but torch")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.toml"]  # no run, no staging
    _refused(cli(["train", "--grammar", "parity", "--device", "tpu", "--out", tmp_path / "run"]),
             "device must be one of cpu, cuda, cuda:N, auto")


@no_gpu_only
def test_resume_may_change_the_device_and_cuda_leaves_the_run_untouched(cli, tmp_path):
    run = tmp_path / "run"
    assert cli(["train", "--grammar", "parity", "--steps", 4, "--checkpoint-every", 2,
                "--out", run])[0] == 0
    before = {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    _refused(cli(["train", "--out", run, "--resume", "--device", "cuda"]), "sees none")
    assert {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()} == before
    code, out, err = cli(["train", "--out", run, "--resume", "--device", "auto", "--steps", 6])
    assert code == 0 and "resumed at step 4 and trained to step 6" in out, err
    assert 'device = "cpu"' in (run / "config.toml").read_text()  # as given when created


@no_gpu_only
def test_study_on_cuda_is_one_error_line_and_writes_nothing(cli, tmp_path):
    study = tmp_path / "s.toml"
    study.write_text('[data]\ngrammar = "parity"\n[train]\nsteps = 2\ndevice = "cuda"\n'
                     '[[runs]]\nname = "a"\n')
    _refused(cli(["study", study, "--out", tmp_path / "out"]), "device cuda asks for a GPU")
    assert not (tmp_path / "out").exists()
