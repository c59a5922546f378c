"""The unit of data the trainer consumes, whatever the language or objective."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Batch:
    """One batch for one model.

    inputs:  (B, L) long token ids the model reads (MLM: with the mask token in place).
    targets: (B, L) long token ids to predict, -100 where there is no loss.
    weights: (B, L) float, zero where there is no loss, summing to 1; the loss is
             sum(weights * cross_entropy), so strings of unequal probability weigh right.
    padding: (B, L) bool, True at padding positions, or None when no sequence is padded.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    weights: torch.Tensor
    padding: torch.Tensor | None = None
