"""Per-member building blocks shared by the architectures: stacked parameters and feature-major ops.

Activations are feature-major, (S, features, T) with T tokens (or T rows of any kind): a linear
map is one bmm W @ x over the member dimension, LayerNorm reduces over dim 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn
from torch.autograd.function import once_differentiable

Draw = Callable[[torch.Generator], torch.Tensor]
#: Floating types of fewer than 32 bits: what autocast computes in, and what dhwt's reductions
#: (LayerNorm, softmax, loss) read in float32.
HALF = (torch.bfloat16, torch.float16)
_twice = False


@contextmanager
def twice_differentiable() -> Iterator[None]:
    """Within it, the ops with a hand-written backward (LayerNorm, small attention, the fused
    loss) build autograd's graph of the same formula instead: the same values, differentiable
    twice (a Hessian, dhwt.training.newton), slower.

    Examples:
        >>> import torch
        >>> x = torch.randn(1, 3, 2, dtype=torch.float64, requires_grad=True)
        >>> w, b = torch.ones(1, 3, dtype=torch.float64), torch.zeros(1, 3, dtype=torch.float64)
        >>> with twice_differentiable():
        ...     g, = torch.autograd.grad(layer_norm(x, w, b, 1e-5).pow(3).sum(), x,
        ...                              create_graph=True)
        >>> g.requires_grad
        True
    """
    global _twice
    before, _twice = _twice, True
    try:
        yield
    finally:
        _twice = before


def twice() -> bool:
    """True inside `twice_differentiable`."""
    return _twice


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
    in float32 when x is of a half type (bf16-mixed precision: dhwt.training.precision).

    One autograd node with its backward written out, in fewer ops than autograd's graph of the
    same formula (torch's own LayerNorm reduces over the last dims only): each op is a pass over
    the activations and, with several threads, a parallel region, which on a busy core costs a
    scheduler slice (experiments/benchmarks/LOG.md, "Where the GPT-2-small step goes").

    Examples:
        >>> import torch
        >>> x = torch.randn(2, 5, 3, dtype=torch.float64)
        >>> w, b = torch.rand(2, 5, dtype=torch.float64), torch.rand(2, 5, dtype=torch.float64)
        >>> y = layer_norm(x, w, b, 1e-5)
        >>> ref = torch.nn.functional.layer_norm(x[1].T, (5,), w[1], b[1], 1e-5).T
        >>> torch.allclose(y[1], ref)
        True
    """
    if x.dtype in HALF:
        x = x.float()
    if _twice:
        centred = x - x.mean(1, keepdim=True)
        normed = centred * (centred.square().mean(1, keepdim=True) + eps).rsqrt()
        return torch.addcmul(bias.unsqueeze(2), normed, weight.unsqueeze(2))
    return _LayerNorm.apply(x, weight, bias, eps)


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):  # type: ignore[override]
        centred = x - x.mean(1, keepdim=True)  # not var_mean: over dim 1 it is 100x slower
        rstd = centred.square().mean(1, keepdim=True).add_(eps).rsqrt_()
        normed = centred.mul_(rstd)
        ctx.save_for_backward(normed, rstd, weight)
        return torch.addcmul(bias.unsqueeze(2), normed, weight.unsqueeze(2))

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        normed, rstd, weight = ctx.saved_tensors
        need_x, need_weight, need_bias, _ = ctx.needs_input_grad
        grad_weight = (grad * normed).sum(2) if need_weight else None
        grad_bias = grad.sum(2) if need_bias else None
        grad_x = None
        if need_x:  # rstd (g - mean(g) - normed mean(g normed)) for g = grad * weight
            g = grad * weight.unsqueeze(2)
            mean_g = g.mean(1, keepdim=True)
            mean_gn = (g * normed).mean(1, keepdim=True)
            grad_x = g.sub_(torch.addcmul(mean_g, normed, mean_gn)).mul_(rstd)
        return grad_x, grad_weight, grad_bias, None
