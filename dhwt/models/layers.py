"""Per-member building blocks shared by the architectures: stacked parameters and feature-major ops.

Activations are feature-major, (S, features, T) with T tokens (or T rows of any kind): a linear
map is one bmm W @ x over the member dimension, LayerNorm reduces over dim 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

Draw = Callable[[torch.Generator], torch.Tensor]
#: Floating types of fewer than 32 bits: what autocast computes in, and what dhwt's reductions
#: (LayerNorm, softmax, loss) read in float32.
HALF = (torch.bfloat16, torch.float16)


def stacked(draw: Draw, generators: Sequence[torch.Generator]) -> nn.Parameter:
    """One Parameter holding draw(g) for every member's generator, stacked on dim 0."""
    return nn.Parameter(torch.stack([draw(g) for g in generators]))


def ones(members: int, width: int, learned: bool = True) -> nn.Parameter:
    """A (members, width) Parameter of ones; `learned` False keeps it out of training."""
    return nn.Parameter(torch.ones(members, width), requires_grad=learned)


def zeros(members: int, width: int, learned: bool = True) -> nn.Parameter:
    """A (members, width) Parameter of zeros; `learned` False keeps it out of training."""
    return nn.Parameter(torch.zeros(members, width), requires_grad=learned)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Per-member W @ x + b: x (S, i, T), weight (S, o, i), bias (S, o) -> (S, o, T)."""
    return torch.baddbmm(bias.unsqueeze(2), weight, x)


def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """LayerNorm over the features of x (S, d, T) (biased variance, as torch), per-member affine;
    in float32 when x is of a half type (bf16-mixed precision: dhwt.training.precision)."""
    if x.dtype in HALF:
        x = x.float()
    centred = x - x.mean(dim=1, keepdim=True)
    scale = torch.rsqrt(centred.pow(2).mean(dim=1, keepdim=True) + eps)
    return torch.addcmul(bias.unsqueeze(2), centred * scale, weight.unsqueeze(2))
