"""The output layer of every EnsembleLM: logits = h @ E_out^T (+ b), and the training loss from h.

Layout rule (decided here and nowhere else, by `token_major`): for a vocabulary of fewer than
TOKEN_MAJOR_VOCAB classes the logits are feature-major, (S, V, T) memory, and the cross-entropy
runs over class dim 1 with the tokens contiguous; from TOKEN_MAJOR_VOCAB classes on they are
token-major, (S, T, V) memory, and `output_loss` computes the loss and its gradient in place in
them. Why: a softmax over a short contiguous class dim is several times slower than over a
strided one with long contiguous token rows, and the other way round for a wide vocabulary
(the timings that set TOKEN_MAJOR_VOCAB: experiments/benchmarks/README.md).

The loss of one member is sum_t w_t CE(logits_t, y_t), positions with target -100 counting for
nothing (`weighted_cross_entropy` from logits; `output_loss` from h, the training path).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dhwt.models.layers import HALF, twice

#: The smallest vocabulary whose logits are token-major (see the module docstring).
TOKEN_MAJOR_VOCAB = 64
#: Bytes of one member's logits in one chunk of the fused loss's elementwise work: cache-sized on
#: the CPU; on a GPU, where each chunk costs kernel launches, a bound on the chunk's temporaries.
CHUNK_BYTES = 2**23
GPU_CHUNK_BYTES = 2**28
IGNORE = -100


def token_major(vocab: int) -> bool:
    """True when logits over `vocab` classes are laid out (S, T, V); else (S, V, T)."""
    return vocab >= TOKEN_MAJOR_VOCAB


def logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """h (S, d, T) feature-major, weight (S, V, d), bias (S, V) or None -> logits (S, T, V), in
    the memory layout `token_major` chooses (a transposed view when feature-major)."""
    if token_major(weight.shape[1]):
        if bias is None:
            return torch.bmm(h.mT, weight.mT)
        return torch.baddbmm(bias.unsqueeze(1), h.mT, weight.mT)
    if bias is None:
        return torch.bmm(weight, h).mT
    return torch.baddbmm(bias.unsqueeze(2), weight, h).mT


def weighted_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """(S,) sum(weights * CE) per member; logits (S, ..., V) in either layout, targets and
    weights (S, ...). The class dim goes where the memory has it, so neither layout is copied.
    Logits of a half type (bf16-mixed) are read in float32: the loss is a float32 sum."""
    members, vocab = logits.shape[0], logits.shape[-1]
    if logits.dtype in HALF:
        logits = logits.float()
    if logits.stride(-1) == 1:
        ce = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1),
                             ignore_index=IGNORE, reduction="none")
    else:
        ce = F.cross_entropy(logits.movedim(-1, 1), targets, ignore_index=IGNORE,
                             reduction="none")
    return (weights.to(logits.dtype) * ce.view(targets.shape)).reshape(members, -1).sum(1)


def output_loss(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                targets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(S,) per-member loss of the logits of h, without keeping them when they are token-major.

    h (S, d, T), weight (S, V, d), bias (S, V) or None, targets and weights (S, ...) with T
    entries per member. Equals weighted_cross_entropy(logits(h, weight, bias), targets, weights)
    to float rounding. Logits are made only for the tokens that have a target when that saves
    work (`targeted`).
    """
    members = h.shape[0]
    h, targets, weights = targeted(h, targets.reshape(members, -1), weights.reshape(members, -1))
    if twice() or not token_major(weight.shape[1]):
        return weighted_cross_entropy(logits(h, weight, bias), targets, weights)
    grads = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (h, weight, bias))
    return _FusedCrossEntropy.apply(h, weight, bias, targets, weights, grads)


@torch.compiler.disable  # data-dependent shapes: eager under torch.compile (no graph warning)
def targeted(h: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The columns of h (S, d, T) that have a target, with their targets and weights (S, T),
    when every member has the same number n of them and n <= T / 2; else all three unchanged.

    A masked-LM batch has one target in L tokens: its output layer (logits, softmax, their
    backward) then works on n = T / L columns instead of T. The loss is the same sum of the same
    terms (tokens without a target add 0); the gradient of h is zero off the targets either
    way. Members with different counts (no task here makes them) keep the dense path, and so
    does a GPU (counting there is a host synchronisation per step)."""
    if h.device.type == "cuda":  # the count would make every step wait for the device
        return h, targets, weights
    has = targets != IGNORE
    counts = has.sum(1)
    n = int(counts[0])
    if n == 0 or 2 * n > targets.shape[1] or not bool((counts == n).all()):
        return h, targets, weights
    columns = has.nonzero()[:, 1].view(-1, n)  # (S, n), each member's in order
    picked = h.gather(2, columns.unsqueeze(1).expand(-1, h.shape[1], -1))
    return picked, targets.gather(1, columns), weights.gather(1, columns)


def chunk_rows(vocab: int, device: torch.device = torch.device("cpu")) -> int:
    """Tokens per chunk of the fused loss's elementwise work: one member's chunk of logits about
    CHUNK_BYTES (GPU_CHUNK_BYTES on a GPU). It does not depend on S, so a member sums in the same
    order as a solo run."""
    budget = GPU_CHUNK_BYTES if device.type == "cuda" else CHUNK_BYTES
    return max(1, budget // (4 * vocab))


class _FusedCrossEntropy(torch.autograd.Function):
    """The loss from token-major logits made by one matmul, with d loss / d logits made in place.

    The logits z (S, T, V) come from one bmm. Then, a chunk of tokens at a time (so the chunk
    stays in cache between the steps), the log-softmax is read for the loss and z is overwritten
    with softmax - onehot, the gradient of CE w.r.t. the logits. The backward pass is two bmms
    with that (and a matrix-vector product for the bias); each token's weight w times the
    member's incoming gradient is folded into the small side of each product (h's columns, the
    gradient of h), never into the (T, V) block. So no (T, V) tensor but z is ever made, and z is
    read and written once outside the matmuls (F.cross_entropy's path: log-softmax out of z,
    a zero-filled gradient, the scatter, the log-softmax backward). Not twice differentiable.
    Under bf16-mixed z is bfloat16 (the product's output): each chunk's log-softmax and the loss
    are float32, the gradient kept in z is rounded to bfloat16, and the backward products take
    bfloat16 operands, as autocast's would.
    """

    @staticmethod
    def forward(ctx, h, weight, bias, targets, weights, grads):  # type: ignore[override]
        members, _, tokens = h.shape
        ignore = targets == IGNORE
        index = targets.masked_fill(ignore, 0).unsqueeze(2)  # (S, T, 1)
        wide = torch.float32 if h.dtype in HALF else h.dtype  # the loss's type: never half
        scale = weights.to(wide).masked_fill(ignore, 0.0)  # (S, T)
        z = logits(h, weight, bias)  # (S, T, V), contiguous
        loss = h.new_zeros(members, dtype=wide)
        minus_one = z.new_full((1, 1, 1), -1.0)
        rows = chunk_rows(weight.shape[1], z.device)
        softmax_type = torch.float32 if z.dtype in HALF else None
        for start in range(0, tokens, rows):
            part = slice(start, start + rows)
            chunk, y = z[:, part], index[:, part]
            log_p = torch.log_softmax(chunk, dim=2, dtype=softmax_type)
            loss.sub_((scale[:, part] * log_p.gather(2, y).squeeze(2)).sum(1))
            if grads:
                if chunk.dtype == log_p.dtype:
                    torch.exp(log_p, out=chunk)
                else:
                    chunk.copy_(log_p.exp_())
                chunk.scatter_add_(2, y, minus_one.expand(y.shape))
        if grads:
            ctx.save_for_backward(h, weight, z, scale)
            ctx.bias = bias is not None
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):  # type: ignore[override]
        h, weight, z, scale = ctx.saved_tensors
        need_h, need_weight, need_bias = ctx.needs_input_grad[:3]
        scale = (scale * grad_loss.unsqueeze(1)).unsqueeze(1)  # (S, 1, T)
        low = z.dtype  # the products' operand type: float32, or bfloat16 under bf16-mixed
        grad_h = grad_weight = grad_bias = None
        if need_h:
            grad_h = torch.bmm(weight.mT.to(low), z.mT).mul_(scale).to(h.dtype)
        if need_weight:
            grad_weight = torch.bmm(z.mT, (h * scale).mT.to(low)).to(weight.dtype)
        if ctx.bias and need_bias:
            grad_bias = torch.bmm(scale.to(low), z).squeeze(1).to(weight.dtype)
        return grad_h, grad_weight, grad_bias, None, None, None
