"""optimizer = "sgd" (plain gradient descent) against the update computed by hand, and the decay
of input rows no input reads against its closed form under both optimizers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from dhwt.training.runner import train_run
from dhwt.config import TrainConfig
from dhwt.errors import DhwtError
from dhwt.languages import load_language, load_task, write_dataset
from dhwt.models.init import member_generator
from dhwt.runs.checkpoints import latest_checkpoint
from dhwt.runs.snapshots import read_snapshot, snapshot_files
from dhwt.training.trainer import DATA_STREAM, Trainer

FOUR_CASES = str(Path(__file__).resolve().parents[2] / "synthetic" / "four-cases.toml")


def config(data, **changes) -> TrainConfig:
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
def task(four):
    return load_task(four, "clm")


def test_sgd_is_recorded_and_checked(four):
    c = config(four)
    assert c.optim.optimizer == "sgd"
    assert 'optimizer = "sgd"' in c.to_toml()
    assert TrainConfig(data=str(four)).optim.optimizer == "adamw"
    with pytest.raises(DhwtError, match="optimizer must be one of adamw, sgd, population, got 'adam'"):
        config(four, optimizer="adam")


@pytest.mark.slow
def test_an_sgd_update_is_plain_gradient_descent_with_weight_decay(four, task, tmp_path):
    """The checkpoint of step 1 against one update by hand from the weights a run starts from
    and the batch its data streams draw first."""
    c = config(four, steps=1, eval_every=1, snapshot_every=1, checkpoint_every=1)
    model = Trainer([(c, tmp_path / "unused")], task).model  # the weights the run starts from
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    batch = task.train_batches([member_generator(s, DATA_STREAM) for s in c.members.seeds],
                               c.optim.batch_size)
    loss = model(batch.inputs, batch.padding, targets=batch.targets, weights=batch.weights).sum()
    grads = torch.autograd.grad(loss, list(params.values()))
    train_run(c, task, tmp_path / "run")
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
def test_rows_no_input_reads_decay_by_the_closed_form(four, task, tmp_path, optimizer):
    """In the causal four-cases language [EOS] is only a target and [PAD] only sits after the
    last symbol (loss weight 0, attended by no earlier position): their input rows get no
    gradient, so each update multiplies them by 1 - lr_t wd, lr_t the cosine schedule's."""
    train_run(config(four, optimizer=optimizer, snapshot_every=10), task, tmp_path / "run")
    rows = [task.vocab.index(s) for s in ("[EOS]", "[PAD]", "[BOS]")]
    start, end = (input_rows(tmp_path / "run", step, rows) for step in (0, 10))
    lr, lr_min, wd = 0.05, 0.005, 0.5
    decay = math.prod(1 - wd * (lr_min + (lr - lr_min) * (1 + math.cos(math.pi * t / 30)) / 2)
                      for t in range(10))  # the first 10 updates of the 30-step schedule
    torch.testing.assert_close(end[:, :2], start[:, :2] * decay, rtol=1e-5, atol=0.0)
    assert not torch.allclose(end[:, 2], start[:, 2] * decay, rtol=1e-3)  # [BOS] is read


@pytest.mark.slow
def test_an_sgd_run_resumes_bit_for_bit(four, task, tmp_path, interrupt_at, assert_same):
    c = config(four, steps=6, eval_every=2, snapshot_every=2, checkpoint_every=2)
    train_run(c, task, tmp_path / "whole")
    interrupt_at(3)
    with pytest.raises(KeyboardInterrupt):
        train_run(c, task, tmp_path / "cut")
    train_run(c, task, tmp_path / "cut", resume=True)
    whole = latest_checkpoint(tmp_path / "whole" / "checkpoints")[1]
    cut = latest_checkpoint(tmp_path / "cut" / "checkpoints")[1]
    assert_same(whole["model"], cut["model"])
    assert_same(whole["optimizer"], cut["optimizer"])


def test_sgd_goes_through_a_tie_switch(four, task, tmp_path):
    """SGD keeps no optimizer state, so an untie has no moments to copy: the run goes on, and
    the output matrix starts as a copy of the input matrix."""
    c = config(four, tie_schedule="untie@2", steps=3, eval_every=1, snapshot_every=1)
    train_run(c, task, tmp_path / "run")
    files = snapshot_files(tmp_path / "run")
    switched, after = read_snapshot(files[2]), read_snapshot(files[3])
    assert not switched.tied and (switched.output == switched.input).all()
    assert not (after.output == after.input).all()
