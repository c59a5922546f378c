"""Dropout masks (dhwt.models.dropout): "bernoulli" is torch's bernoulli_ stream, "packed" two
15-bit fields per int32 draw, checked against a numpy reimplementation and for its law."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from dhwt.models.dropout import keep_scales

CPU = torch.device("cpu")


def _generators(seeds):
    return [torch.Generator().manual_seed(s) for s in seeds]


@pytest.mark.parametrize("n", [1, 6, 7])
def test_packed_masks_match_a_bit_by_bit_reimplementation(n):
    p, seeds = 0.3, [5, 9]
    drawn = keep_scales("packed", p, (2, n), _generators(seeds), torch.float32, CPU)
    threshold = round(0.7 * 32768)
    for row, generator in zip(drawn, _generators(seeds)):
        words = torch.empty((n + 1) // 2, dtype=torch.int32).random_(generator=generator)
        words = words.numpy().astype(np.int64)
        fields = np.concatenate([words % 2**15, (words // 2**15) % 2**15])[:n]
        expected = np.where(fields < threshold, np.float32(32768 / threshold), np.float32(0))
        np.testing.assert_array_equal(row.numpy(), expected)


def test_bernoulli_masks_are_torchs_stream_scaled():
    """The default: every earlier run's masks, bit for bit."""
    p, seeds = 0.25, [3, 4]
    drawn = keep_scales("bernoulli", p, (2, 50), _generators(seeds), torch.float32, CPU)
    for row, generator in zip(drawn, _generators(seeds)):
        expected = torch.empty(50).bernoulli_(0.75, generator=generator) / 0.75
        assert torch.equal(row, expected)


def test_packed_keep_rate_is_one_minus_p_and_the_two_fields_of_a_draw_are_independent():
    p, half = 0.1, 200_000
    keep = keep_scales("packed", p, (1, 2 * half), _generators([11]), torch.float64, CPU)[0]
    assert torch.mean(keep).item() == pytest.approx(1.0, abs=5e-3)  # E[mask] = 1 (+- ~7 sd)
    kept = (keep > 0).numpy()
    low, high = kept[:half], kept[half:]  # the fields of the same draws, position by position
    for part in (low, high):
        assert stats.binomtest(int(part.sum()), half, 1 - p).pvalue > 1e-4
    table = [[np.sum(low & high), np.sum(low & ~high)], [np.sum(~low & high), np.sum(~low & ~high)]]
    assert stats.chi2_contingency(table).pvalue > 1e-4
    assert stats.chi2_contingency(  # neighbours within a field: draws in sequence
        [[np.sum(low[:-1] & low[1:]), np.sum(low[:-1] & ~low[1:])],
         [np.sum(~low[:-1] & low[1:]), np.sum(~low[:-1] & ~low[1:])]]).pvalue > 1e-4


def test_each_members_mask_depends_on_its_own_generator_only():
    together = keep_scales("packed", 0.5, (3, 64), _generators([1, 2, 3]), torch.float32, CPU)
    alone = keep_scales("packed", 0.5, (1, 64), _generators([2]), torch.float32, CPU)
    assert torch.equal(together[1], alone[0])
    assert not torch.equal(together[0], together[1])
