"""The masked-LM text Task: the masking rule and its rates (exact binomial intervals at level
1 - 1e-6, so a correct rule fails about once in a million runs), loss on masked positions only,
evaluation masks fixed per split and identical across tasks and runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dhwt.analysis.intervals import clopper_pearson
from dhwt.languages.language import MASK
from dhwt.text.text_task import TextTask

LEVEL = 1 - 1e-6
V = 50


def token_ids() -> dict[str, np.ndarray]:
    """The token ids of mlm_task's splits."""
    rng = np.random.default_rng(0)
    return {"train": rng.integers(0, V, 5000), "valid": rng.integers(0, V, 37),
            "test": rng.integers(0, V, 17)}


def mlm_task(rule="mask", rate=0.15, seq_len=8, eval_windows=None) -> TextTask:
    return TextTask(token_ids(), tuple(f"t{i}" for i in range(V)), seq_len, eval_windows, "mlm", rate,
                    rule)


def within(k: int, n: int, p: float) -> bool:
    low, high = clopper_pearson(k, n, LEVEL)
    return low <= p <= high


def test_vocabulary_gains_mask_last_and_windows_are_seq_len_tokens():
    task = mlm_task()
    assert task.vocab[-1] == MASK and len(task.vocab) == V + 1 and task.seq_len == 8
    batch = task.train_batch(torch.Generator().manual_seed(0), 16)
    assert batch.inputs.shape == batch.targets.shape == batch.weights.shape == (16, 8)


@pytest.mark.parametrize("rate", [0.15, 0.5])
def test_default_rule_masks_each_position_at_the_rate_always_with_mask(rate):
    task = mlm_task(rate=rate)
    batch = task.train_batch(torch.Generator().manual_seed(1), 4000)
    chosen = batch.targets != -100
    assert within(int(chosen.sum()), chosen.numel(), rate)
    assert (batch.inputs[chosen] == V).all() and (batch.inputs[~chosen] != V).all()
    # loss on the chosen positions only, each weighing the same, summing to 1
    assert (batch.weights[~chosen] == 0).all()
    assert torch.allclose(batch.weights[chosen], torch.tensor(1 / int(chosen.sum())))
    # independence: the number chosen per window is Binomial(seq_len, rate)
    per_window = chosen.sum(dim=1)
    for k in range(3):
        expected = float(torch.distributions.Binomial(8, torch.tensor(rate)).log_prob(
            torch.tensor(float(k))).exp())
        assert within(int((per_window == k).sum()), len(per_window), expected)


def test_bert_rule_is_80_10_10_of_the_chosen_positions():
    task = mlm_task(rule="bert")
    batch = task.train_batch(torch.Generator().manual_seed(2), 6000)
    chosen = batch.targets != -100
    n = int(chosen.sum())
    assert within(n, chosen.numel(), 0.15)
    shown, target = batch.inputs[chosen], batch.targets[chosen]
    # a random token is one of the V other ids, uniformly: it equals the target w.p. 1 / V
    assert within(int((shown == V).sum()), n, 0.8)
    assert within(int((shown == target).sum()), n, 0.1 + 0.1 / V)
    assert within(int(((shown != V) & (shown != target)).sum()), n, 0.1 * (V - 1) / V)
    assert (batch.inputs[~chosen] < V).all()


def test_train_masks_come_from_the_generator_alone():
    task = mlm_task()
    one = task.train_batch(torch.Generator().manual_seed(5), 32)
    torch.manual_seed(123)  # the global generator plays no part
    two = task.train_batch(torch.Generator().manual_seed(5), 32)
    assert torch.equal(one.inputs, two.inputs) and torch.equal(one.targets, two.targets)


@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_evaluation_masks_are_fixed_per_split_and_identical_across_tasks(split):
    torch.manual_seed(0)
    first = mlm_task().eval_batch(split)
    torch.manual_seed(99)
    task = mlm_task()
    task.train_batch(torch.Generator().manual_seed(7), 64)  # training draws change nothing
    second = task.eval_batch(split)
    assert torch.equal(first.inputs, second.inputs) and torch.equal(first.targets,
                                                                     second.targets)
    assert second is task.eval_batch(split)


def test_evaluation_covers_every_token_once_and_masks_only_real_positions():
    task = mlm_task()
    batch = task.eval_batch("valid")  # 37 tokens: windows of 8, the last padded
    assert task.n_strings("valid") == 5 and batch.padding is not None
    real = ~batch.padding
    np.testing.assert_array_equal(
        torch.where(batch.inputs[real] == V, batch.targets[real], batch.inputs[real]),
        token_ids()["valid"])
    assert int(real.sum()) == 37 and (batch.targets[batch.padding] == -100).all()
    assert (batch.weights[batch.padding] == 0).all()
    assert float(batch.weights.sum()) == pytest.approx(1.0)
    splits = [mlm_task().eval_batch(s).targets != -100 for s in ("valid", "test")]
    assert not torch.equal(splits[0][:2], splits[1][:2])  # each split has its own draw
