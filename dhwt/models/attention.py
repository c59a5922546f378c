"""Scaled dot-product attention for tiny heads and short sequences, position-major.

torch's CPU attention (flash attention for CPU, or matmuls) works on (N, H, L, dh) blocks: for
the EXor model (dh = 4, L = 8, N = S * 114 sequences) each block is a few hundred flops and the
per-block work dominates. Here the sequences of a member are the innermost, contiguous dim:
q, k, v are (S, H, dh, L, B), the scores (S, H, L, L, B), and every step is an elementwise op or
a reduction over an outer dim of length dh or L, vectorised over the B sequences. Forward and
backward are written out (the backward is the usual softmax-attention gradient), so autograd
keeps one node and the saved probabilities. It beats torch's flash attention on short
sequences and narrow heads and loses on longer ones (the scores grow as L^2 per sequence), so
`fits` draws the line at L <= 8 and dh <= 8 (the timings: experiments/benchmarks/README.md).
"""

from __future__ import annotations

import torch

from dhwt.models.layers import twice

#: The longest sequence and the widest head that `attention` serves (see the module docstring).
MAX_LENGTH = 8
MAX_HEAD_DIM = 8


def fits(length: int, head_dim: int) -> bool:
    """True when `attention` is the faster way for sequences of `length` and heads of `head_dim`."""
    return length <= MAX_LENGTH and head_dim <= MAX_HEAD_DIM


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """softmax(q.k * scale, over keys where allowed) . v for q, k, v (S, H, dh, L, B).

    allowed: None (every key) or bool broadcastable to the scores (S, H, L_query, L_key, B),
    True where a query may attend to a key; every query must be allowed at least one key.
    Returns (S, H, dh, L, B).
    """
    if twice():  # autograd's graph of the same formula (dhwt.models.layers.twice_differentiable)
        scores = (q.unsqueeze(4) * k.unsqueeze(3)).sum(2) * scale
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        return (scores.softmax(3).unsqueeze(2) * v.unsqueeze(3)).sum(4)
    return _Attention.apply(q, k, v, allowed, scale)


def _contract(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sum over dh of a[:, :, c, i, None, :] * b[:, :, c, None, j, :]: (S, H, L, L, B) from two
    (S, H, dh, L, B), accumulated over c in place (no (dh, L, L) temporary)."""
    out = a[:, :, 0].unsqueeze(3) * b[:, :, 0].unsqueeze(2)
    for c in range(1, a.shape[2]):
        out.addcmul_(a[:, :, c].unsqueeze(3), b[:, :, c].unsqueeze(2))
    return out


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, allowed, scale):  # type: ignore[override]
        scores = _contract(q, k).mul_(scale)  # (S, H, Lq, Lk, B)
        if allowed is not None:
            scores.masked_fill_(~allowed, float("-inf"))
        scores.sub_(scores.amax(3, keepdim=True)).exp_()
        p = scores.div_(scores.sum(3, keepdim=True))
        ctx.save_for_backward(q, k, v, p)
        ctx.scale = scale
        return (p.unsqueeze(2) * v.unsqueeze(3)).sum(4)  # sum over keys

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        q, k, v, p = ctx.saved_tensors
        grad = grad.contiguous()  # it arrives through a transpose: strided ops are 2-4x slower
        grad_v = (p.unsqueeze(2) * grad.unsqueeze(4)).sum(3)  # sum over queries
        grad_p = _contract(grad, v)
        grad_s = grad_p.sub_((grad_p * p).sum(3, keepdim=True)).mul_(p).mul_(ctx.scale)
        grad_q = (grad_s.unsqueeze(2) * k.unsqueeze(3)).sum(4)
        grad_k = (grad_s.unsqueeze(2) * q.unsqueeze(4)).sum(3)
        return grad_q, grad_k, grad_v, None, None
