"""The pieces of a training step that see all S members at once without mixing them.

Member i of an ensemble must train exactly as a solo run of its seed: its batch comes from its own
generator, its loss is its own weighted cross-entropy, the ensemble loss is the plain sum (so each
member's gradient is its own), and gradient clipping uses each member's own norm.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from dhwt.errors import DhwtError
from dhwt.languages.batch import Batch
from dhwt.models import output


def repeat_batch(batch: Batch, members: int) -> Batch:
    """One (B, L) batch seen by every member: (S, B, L) views."""
    def rep(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.unsqueeze(0).expand(members, *t.shape)
    return Batch(rep(batch.inputs), rep(batch.targets), rep(batch.weights), rep(batch.padding))


def member_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """(S,) per-member loss sum(weights * CE); logits (S, B, L, V), batch tensors (S, B, L).

    Positions with target -100 (weight 0) count for nothing. The classes are read where the
    model's memory layout has them (dhwt.models.output), so neither layout is copied. Training
    gets the same numbers without the logits: model(inputs, padding, targets=, weights=).
    """
    return output.weighted_cross_entropy(logits, batch.targets, batch.weights)


def member_accuracy(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """(S,) per-member accuracy sum(weights * [argmax == target]) (evaluation only)."""
    correct = (logits.detach().argmax(-1) == batch.targets).to(logits.dtype)
    return (batch.weights.to(logits.dtype) * correct).reshape(logits.shape[0], -1).sum(1)


#: Bytes of logits (with the softmax's temporaries) one evaluation chunk may hold: on the CPU, and
#: on a GPU (where each chunk is a round of kernel launches and its memory is plenty).
EVAL_BYTES = 2**28
GPU_EVAL_BYTES = 2**32


def eval_rows(members: int, length: int, vocab: int, budget: int = EVAL_BYTES) -> int:
    """Rows (sequences) per evaluation chunk so that S x rows x L x V float32 logits, taken three
    times (logits, log-softmax, their gather), stay within `budget` bytes; at least one."""
    return max(1, budget // (3 * 4 * members * length * vocab))


def chunked_metrics(model: Callable[..., torch.Tensor], batch: Batch,
                    rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(S,) loss and accuracy of `batch` (S, B, L) computed `rows` sequences at a time.

    The weights are global (they sum to 1 over the whole batch), so the sums over chunks equal
    member_loss and member_accuracy of one forward pass over everything, to float rounding; the
    sequences are independent, so the chunking changes nothing else. Call under torch.no_grad().
    """
    loss = accuracy = None
    for start in range(0, batch.inputs.shape[1], rows):
        part = Batch(*(None if t is None else t[:, start:start + rows]
                       for t in (batch.inputs, batch.targets, batch.weights, batch.padding)))
        logits = model(part.inputs, part.padding)
        chunk = (member_loss(logits, part), member_accuracy(logits, part))
        loss, accuracy = chunk if loss is None else (loss + chunk[0], accuracy + chunk[1])
    if loss is None or accuracy is None:
        raise DhwtError("an evaluation batch has no rows")
    return loss, accuracy


def clip_member_grads(parameters: Iterable[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """Scale each member's gradients so its own norm is at most `max_norm`; return the (S,) norms.

    Every parameter has the member dimension first. The scale is torch's clip_grad_norm_ rule,
    min(1, max_norm / (norm + 1e-6)), applied per member, so a solo run clipped with
    clip_grad_norm_ sees the same update.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    norms = torch.stack([g.reshape(g.shape[0], -1).pow(2).sum(1) for g in grads]).sum(0).sqrt()
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
    return norms
