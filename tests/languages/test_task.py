"""Task serving: batch layout per objective, frequencies of variants / masks / strings against the
spec (statistical, deterministic seeds), full and eval batches, agreement with the exact truth."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

from dhwt.errors import DhwtError
from dhwt.languages import load_language
from dhwt.languages.splits import make_splits
from dhwt.languages.task import Task

# Frequencies are checked within Z standard errors of a binomial proportion. With Z = 5 a correct
# sampler fails a given check with probability < 6e-7 (two-sided normal tail), while the checks
# still resolve errors far smaller than the effects they guard (e.g. 0.1 vs 0.9 variants, 1/7
# mask positions): at n = 40k draws, 5 standard errors of p = 0.1 is 0.0075.
Z = 5.0


def within(count: int, n: int, p: float) -> bool:
    return abs(count / n - p) <= Z * math.sqrt(p * (1 - p) / n)


def task(name: str, objective: str, overrides=None, valid=0.1, test=0.1) -> Task:
    language = load_language(name, overrides)
    return Task(language, make_splits(len(language.probs), valid, test, 14), objective)


def test_paper_vocab_is_the_seven_tokens():
    t = task("parity", "mlm")
    assert t.vocab == ("0a", "0b", "1a", "1b", "EVEN", "ODD", "[MASK]")
    assert t.seq_len == 8 and t.symbols == t.vocab[:6]
    clm = task("parity", "clm")
    assert clm.vocab == ("0a", "0b", "1a", "1b", "EVEN", "ODD", "[BOS]", "[EOS]")
    assert clm.seq_len == 9


def test_mlm_variant_and_mask_frequencies_match_the_spec():
    t = task("parity", "mlm", valid=0.0, test=0.0)  # every string in train: bits are uniform
    g = torch.Generator().manual_seed(1)
    batch = t.train_batch(g, 40_000)
    tokens = torch.where(batch.targets >= 0, batch.targets, batch.inputs)
    counts = Counter(tokens.flatten().tolist())
    zeros, ones = counts[0] + counts[1], counts[2] + counts[3]
    assert within(counts[0], zeros, 0.1) and within(counts[2], ones, 0.5)
    assert within(zeros, zeros + ones, 0.5)
    positions = (batch.inputs == t.vocab.index("[MASK]")).nonzero()[:, 1]
    assert len(positions) == 40_000  # exactly one mask per string
    per_position = Counter(positions.tolist())
    assert set(per_position) == set(range(7))  # never the label
    assert all(within(per_position[j], 40_000, 1 / 7) for j in range(7))
    # the target of the masked position is a variant of the bit the label implies
    labels = batch.inputs[:, 7] - 4  # 0 EVEN, 1 ODD
    visible_ones = ((batch.inputs[:, :7] == 2) | (batch.inputs[:, :7] == 3)).sum(dim=1)
    masked_bit = (batch.targets.max(dim=1).values >= 2).long()
    assert torch.equal((visible_ones + masked_bit) % 2, labels)


def test_strings_are_sampled_by_probability():
    t = task("four-cases", "clm", valid=0.0, test=0.0)
    g = torch.Generator().manual_seed(2)
    batch = t.train_batch(g, 40_000)
    first_and_last = Counter(zip(batch.inputs[:, 1].tolist(),
                                 batch.inputs[:, 4].tolist()))
    c, d, g_ = (t.vocab.index(s) for s in ("c", "d", "g"))
    pad = t.vocab.index("[PAD]")
    expected = {(c, pad): 0.5 * 0.3, (c, g_): 0.5 * 0.7, (d, pad): 0.5 * 0.3, (d, g_): 0.5 * 0.7}
    assert set(first_and_last) == set(expected)
    assert all(within(first_and_last[k], 40_000, p) for k, p in expected.items())


def test_full_batch_serves_every_training_string_once_weighted_by_probability():
    t = task("four-cases", "mlm", valid=0.25, test=0.0)
    train = t.indices("train")
    batch = t.train_batch(torch.Generator().manual_seed(0), None)
    assert batch.inputs.shape == (len(train), t.seq_len)
    probs = torch.from_numpy(t.language.probs[train.numpy()])
    assert torch.allclose(batch.weights.sum(dim=1).double(), probs / probs.sum(), atol=1e-7)
    # the class of every token is the class string's
    tokens = torch.where(batch.targets >= 0, batch.targets, batch.inputs)
    sym_class = t.language.symbol_class
    for row, i in zip(tokens.tolist(), train.tolist()):
        classes = [sym_class[s] if s < len(sym_class) else -1 for s in row]
        assert classes == t.language.strings[i].tolist()


def test_batches_are_deterministic_given_the_generator():
    t = task("parity", "clm")
    a = t.train_batch(torch.Generator().manual_seed(5), 64)
    b = t.train_batch(torch.Generator().manual_seed(5), 64)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)


@pytest.mark.parametrize("objective", ["mlm", "clm"])
@pytest.mark.parametrize("batch_size", [None, 16])
def test_member_batches_depend_on_their_own_generator_only(objective, batch_size):
    t = task("four-cases", objective)  # padded strings of unequal length and probability
    seeds = [7, 8, 9]
    batches = t.train_batches([torch.Generator().manual_seed(s) for s in seeds], batch_size)
    assert batches.inputs.shape[0] == 3
    for i, seed in enumerate(seeds):
        alone = t.train_batch(torch.Generator().manual_seed(seed), batch_size)
        member = batches.member(i)
        for name in ("inputs", "targets", "weights", "padding"):
            assert torch.equal(getattr(member, name), getattr(alone, name)), name
        assert float(member.weights.sum()) == pytest.approx(1.0, abs=1e-6)
    assert not torch.equal(batches.inputs[0], batches.inputs[1])


def test_clm_layout_with_padding():
    t = task("four-cases", "clm", valid=0.0, test=0.0)
    batch = t.train_batch(torch.Generator().manual_seed(3), 256)
    bos, eos, pad = (t.vocab.index(s) for s in ("[BOS]", "[EOS]", "[PAD]"))
    assert (batch.inputs[:, 0] == bos).all()
    real = batch.targets != -100
    lengths = real.sum(dim=1) - 1
    for row in range(256):
        n = int(lengths[row])
        assert torch.equal(batch.targets[row, :n], batch.inputs[row, 1: n + 1])
        assert batch.targets[row, n] == eos
        assert (batch.inputs[row, n + 1:] == pad).all()
        assert torch.equal(batch.padding[row], batch.inputs[row] == pad)
    assert torch.allclose(batch.weights[real], torch.full((int(real.sum()),), 1 / real.sum()))
    assert (batch.weights[~real] == 0).all()


def test_no_padding_when_lengths_are_equal():
    t = task("parity", "clm")
    batch = t.train_batch(torch.Generator().manual_seed(0), 8)
    assert batch.padding is None and "[PAD]" not in t.vocab


def test_eval_batch_is_fixed_and_covers_every_string_and_maskable_position():
    t = task("parity", "mlm", {"n_bits": 4})
    valid = t.eval_batch("valid")
    again = task("parity", "mlm", {"n_bits": 4}).eval_batch("valid")  # a new Task, same split
    assert torch.equal(valid.inputs, again.inputs) and torch.equal(valid.targets, again.targets)
    assert valid.inputs.shape[0] == t.n_strings("valid") * 4
    mask = t.vocab.index("[MASK]")
    positions = Counter((valid.inputs == mask).nonzero()[:, 1].tolist())
    assert positions == {j: t.n_strings("valid") for j in range(4)}
    assert valid.weights.sum() == pytest.approx(1.0, abs=1e-6)


def test_empty_split_and_bad_batch_size_are_user_errors():
    t = task("parity", "mlm", valid=0.1, test=0.0)
    with pytest.raises(DhwtError, match="test split is empty"):
        t.eval_batch("test")
    with pytest.raises(DhwtError, match="unknown split"):
        t.n_strings("dev")
    with pytest.raises(DhwtError, match="batch_size"):
        t.train_batch(torch.Generator(), 0)


@pytest.mark.parametrize("objective", ["mlm", "clm"])
def test_expected_loss_of_the_bayes_predictor_is_the_exact_cross_entropy(objective):
    """Serving and truth agree: the weighted loss of the exact conditionals on sampled batches
    estimates the exact conditional entropy."""
    language = load_language("parity", {"n_bits": 3, "classes.1.p": [0.3, 0.7]})
    t = Task(language, make_splits(len(language.probs), 0.0, 0.0, 14), objective)
    truth = t.truth
    table = {}
    for i in range(len(truth.context_probs)):
        key = tuple(truth.inputs[i, : truth.positions[i] + 1]) if objective == "clm" \
            else tuple(truth.inputs[i])
        table[key] = truth.conditionals[i]
    n = 8_000
    batch = t.train_batch(torch.Generator().manual_seed(7), n)
    per_row = np.zeros(n)
    for row, col in (batch.targets != -100).nonzero().tolist():
        key = tuple(batch.inputs[row, : col + 1].tolist()) if objective == "clm" \
            else tuple(batch.inputs[row].tolist())
        loss = -math.log(table[key][batch.targets[row, col]])
        per_row[row] += float(batch.weights[row, col]) * loss
    # rows (strings) are independent draws: the estimate is their sum, with standard error
    # sqrt(n) * std(per-row contribution)
    assert abs(per_row.sum() - truth.bayes_cross_entropy) <= Z * math.sqrt(n) * per_row.std()
    assert per_row.sum() != pytest.approx(truth.marginal_entropy, abs=0.05)
