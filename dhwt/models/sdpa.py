"""torch's scaled dot product attention with dropout, each member's mask from its own generator.

SDPA draws its dropout mask from the device's default generator, and its fused GPU kernels (flash,
memory-efficient) take no other. An ensemble's members must each draw from their own generator
(dhwt.models.base: member s of an ensemble equals a solo run of seeds[s]), so the members'
sequences are attended one member at a time, with the member's generator state swapped into the
default generator around its call and read back afterwards (a host-side copy of seed and offset;
no synchronisation with the device). The default generator's own state is restored at the end.
The masks are the fused kernels' (another stream than dhwt's hand-written softmax dropout), equal
to it in distribution: each attention weight kept with probability 1 - p and scaled by 1 / (1 - p).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def default_generator(device: torch.device) -> torch.Generator:
    """The generator torch draws from on `device` when it is given none."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return torch.cuda.default_generators[index]
    return torch.default_generator


def member_dropout_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             allowed: torch.Tensor | None, causal: bool, p: float,
                             generators: Sequence[torch.Generator]) -> torch.Tensor:
    """SDPA with dropout p of q, k, v (S*B, H, L, dh), member-major (member s holds rows s*B to
    (s+1)*B), each member's mask drawn from generators[s] (on q's device, advanced as if the call
    drew from it). allowed: None, or bool (S*B, 1, L, L), True where a query may attend to a key
    (causality included); causal applies when allowed is None. Returns (S*B, H, L, dh).

    Examples:
        >>> import torch
        >>> q = k = v = torch.randn(4, 2, 5, 3)  # two members of two sequences
        >>> g = [torch.Generator().manual_seed(s) for s in (1, 2)]
        >>> out = member_dropout_attention(q, k, v, None, True, 0.5, g)
        >>> solo = member_dropout_attention(q[2:], k[2:], v[2:], None, True, 0.5,
        ...                                 [torch.Generator().manual_seed(2)])
        >>> torch.equal(out[2:], solo)  # member 1's rows depend on its own generator only
        True
    """
    batch = q.shape[0] // len(generators)
    default = default_generator(q.device)
    saved = default.get_state()
    heads = []
    try:
        for s, generator in enumerate(generators):
            rows = slice(s * batch, (s + 1) * batch)
            default.set_state(generator.get_state())
            heads.append(F.scaled_dot_product_attention(
                q[rows], k[rows], v[rows], dropout_p=p,
                attn_mask=None if allowed is None else allowed[rows],
                is_causal=causal and allowed is None))
            generator.set_state(default.get_state())
    finally:
        default.set_state(saved)
    return torch.cat(heads)
