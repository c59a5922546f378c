"""The unit of data the trainer consumes, whatever the language or objective."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Batch:
    """One batch for one model; for an ensemble of S members every tensor has a leading member
    dimension, (S, B, L) (`stack_batches`, `member`).

    inputs:  (B, L) long token ids the model reads (MLM: with the mask token in place).
    targets: (B, L) long token ids to predict, -100 where there is no loss.
    weights: (B, L) float, zero where there is no loss, summing to 1; the loss is
             sum(weights * cross_entropy), so strings of unequal probability weigh right.
    padding: (B, L) bool, True at padding positions, or None when no sequence is padded.

    Examples:
        >>> import torch
        >>> from dhwt.languages.batch import Batch, stack_batches
        >>> one = Batch(inputs=torch.tensor([[0, 6]]), targets=torch.tensor([[-100, 1]]),
        ...             weights=torch.tensor([[0.0, 1.0]]))  # predict token 1 at position 1
        >>> both = stack_batches([one, one])  # an ensemble of 2 members
        >>> both.inputs.shape
        torch.Size([2, 1, 2])
        >>> torch.equal(both.member(1).targets, one.targets), both.padding
        (True, None)
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    weights: torch.Tensor
    padding: torch.Tensor | None = None

    def member(self, i: int) -> Batch:
        """Member i's (B, L) batch of an ensemble's (S, B, L) one."""
        return Batch(*(None if t is None else t[i]
                       for t in (self.inputs, self.targets, self.weights, self.padding)))

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


def stack_batches(batches: Sequence[Batch]) -> Batch:
    """S per-member batches (B, L) -> one Batch of (S, B, L) tensors."""
    shapes = {tuple(b.inputs.shape) for b in batches}
    if len(shapes) != 1:
        raise ValueError(f"member batches differ in shape: {sorted(shapes)}")
    pads = [b.padding for b in batches]
    padding = None if all(p is None for p in pads) else torch.stack(
        [torch.zeros_like(b.inputs, dtype=torch.bool) if p is None else p
         for b, p in zip(batches, pads)])
    return Batch(torch.stack([b.inputs for b in batches]), torch.stack([b.targets for b in batches]),
                 torch.stack([b.weights for b in batches]), padding)
