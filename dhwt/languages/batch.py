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

    def to(self, device: torch.device) -> Batch:
        """This batch on `device` (itself if already there). Bound for a GPU, the tensors go
        through pinned memory and are copied without blocking the host."""
        if self.inputs.device == device:
            return self
        pin = device.type == "cuda"

        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            if t is None:
                return None
            return (t.pin_memory() if pin else t).to(device, non_blocking=pin)

        return Batch(move(self.inputs), move(self.targets), move(self.weights), move(self.padding))
