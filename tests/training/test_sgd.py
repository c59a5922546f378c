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
from dhwt.runs.checkpoints import latest_checkpoint
from dhwt.training.trainer import Trainer

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
    trainer = Trainer([(config(four), tmp_path / "run")], task)
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    states = [g.get_state() for g in trainer.streams["data"]]
    batch = trainer._draw(trainer.streams["data"])
    for g, state in zip(trainer.streams["data"], states):
        g.set_state(state)
    loss = trainer.model(batch.inputs, batch.padding, targets=batch.targets,
                         weights=batch.weights).sum()
    grads = torch.autograd.grad(loss, params)
    trainer._update()
    lr, wd = 0.05, 0.5  # lr_at(0) of the cosine schedule is its peak
    for p, p0, g in zip(params, before, grads):
        torch.testing.assert_close(p.detach(), p0 - lr * (g + wd * p0), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_rows_no_input_reads_decay_by_the_closed_form(four, task, tmp_path, optimizer):
    """In the causal four-cases language [EOS] is only a target and [PAD] only sits after the
    last symbol (loss weight 0, attended by no earlier position): their input rows get no
    gradient, so each update multiplies them by 1 - lr_t wd, lr_t the cosine schedule's."""
    trainer = Trainer([(config(four, optimizer=optimizer), tmp_path / "run")], task)
    rows = [task.vocab.index(s) for s in ("[EOS]", "[PAD]", "[BOS]")]
    start = trainer.model.embeddings.input_weight.detach()[:, rows].clone()
    for _ in range(10):
        trainer._update()
    end = trainer.model.embeddings.input_weight.detach()[:, rows]
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
    trainer = Trainer([(config(four, tie_schedule="untie@2", steps=4), tmp_path / "run")], task)
    for _ in range(2):
        trainer._update()
    trainer._apply_events()
    emb = trainer.model.embeddings
    assert not emb.tied and torch.equal(emb.output_weight, emb.input_weight)
    trainer._update()
    assert not torch.equal(emb.output_weight, emb.input_weight)
