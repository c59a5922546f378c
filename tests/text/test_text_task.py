"""The causal text Task on id streams whose windows can be checked by hand (ids = positions)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dhwt.errors import DhwtError
from dhwt.text.text_task import TextTask, load_text_task


def stream_task(seq_len=8, eval_windows=None) -> TextTask:
    ids = {"train": np.arange(200), "valid": np.arange(1000, 1037), "test": np.arange(5000, 5017)}
    vocab = tuple(str(i) for i in range(6000))
    return TextTask(ids, vocab, seq_len, eval_windows)


def test_train_windows_are_contiguous_random_and_seeded():
    task = stream_task()
    batch = task.train_batch(torch.Generator().manual_seed(0), 64)
    assert batch.inputs.shape == batch.targets.shape == (64, 8) and batch.padding is None
    starts = batch.inputs[:, 0]
    np.testing.assert_array_equal(batch.inputs, starts[:, None] + torch.arange(8))
    np.testing.assert_array_equal(batch.targets, batch.inputs + 1)  # ids are positions
    assert starts.min() >= 0 and starts.max() <= 200 - 9 and len(set(starts.tolist())) > 40
    assert float(batch.weights.sum()) == pytest.approx(1.0)
    again = task.train_batch(torch.Generator().manual_seed(0), 64)
    assert torch.equal(again.inputs, batch.inputs)


def test_eval_predicts_every_token_but_the_first_once():
    task = stream_task()
    batch = task.eval_batch("valid")
    assert batch is task.eval_batch("valid")
    predicted = batch.targets[batch.weights > 0]
    np.testing.assert_array_equal(predicted, np.arange(1001, 1037))  # row-major = stream order
    assert task.n_strings("valid") == 5  # 36 predictions in windows of 8
    assert float(batch.weights.sum()) == pytest.approx(1.0)
    assert (batch.targets[batch.weights == 0] == -100).all()
    # the context of a target is its window so far: inputs precede targets by one
    real = batch.weights > 0
    np.testing.assert_array_equal(batch.inputs[real] + 1, batch.targets[real])


def test_train_evaluation_is_a_fixed_spread_sample_and_caps_apply():
    task = stream_task()
    starts = task.eval_batch("train").inputs[:, 0].tolist()
    assert len(starts) == task.n_strings("valid") == 5
    assert starts[0] == 0 and starts[-1] == 8 * ((200 - 1) // 8 - 1)
    capped = stream_task(eval_windows=2)
    assert capped.n_strings("valid") == 2 and capped.n_strings("train") == 2
    assert capped.eval_batch("test").inputs[:, 0].tolist() == [5000, 5008]


def test_bad_requests():
    task = stream_task()
    with pytest.raises(DhwtError, match="positive integer batch size"):
        task.train_batch(torch.Generator(), None)
    with pytest.raises(DhwtError, match="unknown split"):
        task.eval_batch("dev")
    with pytest.raises(DhwtError, match="a window needs"):
        TextTask({"train": np.arange(5), "valid": np.arange(5), "test": np.arange(5)},
                 ("a",), 8)


def test_load_from_a_corpus_directory(tmp_path):
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text("a b c d e f\n" * 5)
    task = load_text_task(tmp_path, "word", 4, cache_dir=tmp_path / "cache")
    assert task.vocab == ("a", "b", "c", "d", "e", "f", "<eos>", "<unk>")
    assert task.objective == "clm" and task.truth is None
    batch = task.eval_batch("test")
    assert batch.inputs[0].tolist() == [0, 1, 2, 3] and batch.targets[0].tolist() == [1, 2, 3, 4]
