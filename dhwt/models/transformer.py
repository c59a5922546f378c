"""An ensemble-native transformer for masked and causal language modelling.

Every parameter has a leading member dimension S: member s is a whole model, and S members run as
one computation (batched matmuls, attention on all S*B sequences at once: torch's scaled dot
product attention, or dhwt.models.attention for tiny heads and short sequences), with no Python
loop over members in the forward pass. Member s is drawn from generators derived from seeds[s]
alone, so it equals a solo model built with [seeds[s]]. The loss of an ensemble is the sum of the
members' losses, so gradients never mix and AdamW (elementwise) trains each member as if alone.
Dropout on the attention weights is the one per-member loop, on a GPU only: SDPA's fused kernels
draw from the device's default generator, so each member's sequences go through them with its
own generator swapped in (dhwt.models.sdpa).

Layout. Inside, activations are feature-major, (S, d, T) with T = L * B tokens, position-major
(EnsembleLM.position_major): every linear map is one bmm W @ x and LayerNorm reduces over dim 1
with the tokens contiguous. For tiny widths (the EXor model has d = 4, V = 7) this is several
times faster than token-major (S, T, d), whose reductions run over a 4-wide innermost dim.
Position-major, the queries, keys and values of dhwt.models.attention, (S, H, dh, L, B), are
views of the input projection's output and its result is a view of the heads: no copies around
attention (batch-major needed four a step: experiments/benchmarks/README.md). `hidden` returns
an (S, B, L, d) view of that memory; the logits' layout, and the training loss straight from h,
are dhwt.models.output's (one rule on the vocabulary size).

One layer with post-LN computes what torch.nn.TransformerEncoderLayer(batch_first=True,
norm_first=False) computes; pre-LN what norm_first=True computes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from dhwt.models import attention, dropout, init, sdpa
from dhwt.models.base import EnsembleLM, Tied
from dhwt.models.config import GPT2_STD, ModelConfig
from dhwt.models.layers import HALF, layer_norm, linear, ones, stacked, zeros


class Dropout(Protocol):
    """Inverted dropout of a member-major tensor, and the members' generators it draws from."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...

    def generators(self, device: torch.device) -> list[torch.Generator]: ...


def causal_mask(length: int, device: torch.device) -> torch.Tensor:
    """(L, L) bool, True where query i may attend to key j <= i."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def _score_bias(allowed: torch.Tensor | None, heads: int, dtype: torch.dtype,
                device: torch.device) -> torch.Tensor:
    """What the attention scores (N * heads, L, L) start from: 0 where a query may attend to a
    key, -inf elsewhere; allowed (L, L) or (N, 1, L, L) bool, or None (every key: a zero that
    broadcasts)."""
    if allowed is None:
        return torch.zeros(1, 1, 1, dtype=dtype, device=device)
    bias = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(
        ~allowed, float("-inf"))
    if bias.dim() == 2:
        return bias.unsqueeze(0)
    return bias.expand(-1, heads, -1, -1).flatten(0, 1)


Draw = Callable[[tuple[int, int], torch.Generator], torch.Tensor]


def _matrix_draws(config: ModelConfig) -> tuple[Draw, Draw, Draw]:
    """How a layer's matrices are drawn under config.init: the attention in-projection, the
    first feed-forward layer, and the two residual output projections (attention out, second
    feed-forward layer)."""
    if config.init == "gpt2":
        def normal(std: float) -> Draw:
            return lambda shape, g: init.normal(shape, std, g)
        residual = GPT2_STD / math.sqrt(2 * config.n_layers)
        return normal(GPT2_STD), normal(GPT2_STD), normal(residual)
    matrix = init.linear_default if config.init == "torch" else init.xavier_uniform
    return init.xavier_uniform, matrix, matrix


class Block(nn.Module):
    """One encoder layer (self-attention + feed-forward) for S members at once."""

    def __init__(self, config: ModelConfig, generators: Sequence[torch.Generator]):
        super().__init__()
        d, ff, members = config.d_model, config.d_ff, len(generators)
        self.config = config
        in_proj, inner, residual = _matrix_draws(config)
        self.in_proj_weight = stacked(lambda g: in_proj((3 * d, d), g), generators)
        self.in_proj_bias = zeros(members, 3 * d)
        self.out_proj_weight = stacked(lambda g: residual((d, d), g), generators)
        self.out_proj_bias = zeros(members, d)
        self.linear1_weight = stacked(lambda g: inner((ff, d), g), generators)
        if config.init == "gpt2":  # zero biases
            self.linear1_bias = zeros(members, ff)
        else:  # nn.Linear's default bias, U(+-1/sqrt(fan_in))
            self.linear1_bias = stacked(lambda g: init.uniform((ff,), d**-0.5, g), generators)
        self.linear2_weight = stacked(lambda g: residual((d, ff), g), generators)
        if config.init == "gpt2":
            self.linear2_bias = zeros(members, d)
        else:
            self.linear2_bias = stacked(lambda g: init.uniform((d,), ff**-0.5, g), generators)
        affine = config.norm_affine
        self.norm1_weight, self.norm1_bias = ones(members, d, affine), zeros(members, d, affine)
        self.norm2_weight, self.norm2_bias = ones(members, d, affine), zeros(members, d, affine)

    def forward(
        self, x: torch.Tensor, shape: tuple[int, int], allowed: torch.Tensor | None, drop: Dropout
    ) -> torch.Tensor:
        """x (S, d, T) -> (S, d, T) for T = L * B tokens, shape = (B, L); allowed (S*B, 1, L, L)
        bool or None (see Transformer._allowed)."""
        if self.config.norm == "post":
            x = self._norm(x + self._attention(x, shape, allowed, drop), 1)
            return self._norm(x + self._feed_forward(x, drop), 2)
        x = x + self._attention(self._norm(x, 1), shape, allowed, drop)
        return x + self._feed_forward(self._norm(x, 2), drop)

    def _norm(self, x: torch.Tensor, which: int) -> torch.Tensor:
        if which == 1:
            return layer_norm(x, self.norm1_weight, self.norm1_bias, self.config.layer_norm_eps)
        return layer_norm(x, self.norm2_weight, self.norm2_bias, self.config.layer_norm_eps)

    def _attention(
        self, x: torch.Tensor, shape: tuple[int, int], allowed: torch.Tensor | None, drop: Dropout
    ) -> torch.Tensor:
        c = self.config
        (members, _, _), (batch, length) = x.shape, shape
        qkv = linear(x, self.in_proj_weight, self.in_proj_bias)  # (S, 3d, T)
        qkv = qkv.view(members, 3, c.n_heads, c.head_dim, length, batch)
        dropping = c.dropout > 0 and self.training  # attention weights dropped: scores written out
        if attention.fits(length, c.head_dim) and not dropping:
            heads = self._small_attention(qkv, allowed)
        else:
            heads = self._torch_attention(qkv, allowed, drop if dropping else None)
        return drop(linear(heads, self.out_proj_weight, self.out_proj_bias))

    def _torch_attention(
        self, qkv: torch.Tensor, allowed: torch.Tensor | None, drop: Dropout | None
    ) -> torch.Tensor:
        """Attention on the S*B sequences, qkv (S, 3, H, dh, L, B) -> heads (S, d, T). Without
        `drop`: torch's scaled dot product attention. With `drop` (dropout on the attention
        weights, each member's mask from its own generator): on a GPU, SDPA's fused kernels one
        member at a time (dhwt.models.sdpa); elsewhere the scores written out and dropped by
        `drop` (SDPA's CPU kernels take no dropout; `_written_attention`)."""
        c = self.config
        members, _, _, _, length, batch = qkv.shape
        if drop is not None and qkv.device.type != "cuda":
            return self._written_attention(qkv, allowed, drop)
        qkv = qkv.permute(1, 0, 5, 2, 4, 3)
        qkv = qkv.reshape(3, members * batch, c.n_heads, length, c.head_dim).contiguous()
        q, k, v = qkv.unbind(0)  # contiguous whatever S is, so SDPA takes the same path
        if drop is not None:
            generators = drop.generators(qkv.device)
            heads = sdpa.member_dropout_attention(q, k, v, allowed, c.causal, c.dropout,
                                                  generators)
        elif allowed is None:
            heads = F.scaled_dot_product_attention(q, k, v, is_causal=c.causal)
        else:
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        heads = heads.view(members, batch, c.n_heads, length, c.head_dim).permute(0, 2, 4, 3, 1)
        return heads.reshape(members, c.d_model, -1)

    def _written_attention(
        self, qkv: torch.Tensor, allowed: torch.Tensor | None, drop: Dropout
    ) -> torch.Tensor:
        """softmax(q k^T / sqrt(dh)) with dropout, times v, by products of one block per sequence
        and head: qkv (S, 3, H, dh, L, B) -> heads (S, d, T). q, k and v are (dh, L) blocks, so
        the copy into them only swaps L and B (a position-major head is (dh, L, B)); the (L, dh)
        blocks SDPA takes cost a copy that moves dh innermost, 1.6x the time at GPT-2-small's
        shape (experiments/benchmarks/LOG.md). The output comes as (L, dh) blocks, the product
        of the weights as they are, whose gradient then needs no transposed copy."""
        c = self.config
        members, _, heads, head_dim, length, batch = qkv.shape
        q, k, v = _HeadBlocks.apply(qkv)  # (S*B*H, dh, L) each
        if allowed is None and c.causal:
            allowed = causal_mask(length, qkv.device)
        scores = torch.baddbmm(  # the scale and the mask in the product: no passes of their own
            _score_bias(allowed, heads, q.dtype, q.device), q.mT, k, alpha=head_dim**-0.5)
        weights = scores.softmax(dim=-1, dtype=torch.float32 if q.dtype in HALF else None)
        weights = drop(weights.view(members * batch, heads, length, length))
        out = torch.bmm(weights.flatten(0, 1), v.mT)  # (S*B*H, L, dh): sum over keys
        out = out.view(members, batch, heads, length, head_dim).permute(0, 2, 4, 3, 1)
        return out.reshape(members, c.d_model, -1)

    def _small_attention(self, qkv: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        """Attention by dhwt.models.attention (tiny heads, short sequences, no attention dropout):
        qkv (S, 3, H, dh, L, B) -> heads (S, d, T), both views of position-major memory."""
        members, _, _, _, length, batch = qkv.shape
        if qkv.dtype in HALF:  # bf16-mixed: these tiny products gain nothing from bfloat16
            qkv = qkv.float()
        q, k, v = qkv.unbind(1)  # (S, H, dh, L, B) each
        if allowed is not None:  # (S*B, 1, L, L) -> (S, 1, L, L, B)
            allowed = allowed.view(members, batch, 1, length, length).permute(0, 2, 3, 4, 1)
        elif self.config.causal:
            allowed = causal_mask(length, qkv.device).unsqueeze(-1)
        heads = attention.attention(q, k, v, allowed, self.config.head_dim**-0.5)
        return heads.view(members, self.config.d_model, -1)

    def _feed_forward(self, x: torch.Tensor, drop: Dropout) -> torch.Tensor:
        act = F.gelu if self.config.activation == "gelu" else F.relu
        inner = act(linear(x, self.linear1_weight, self.linear1_bias))
        if self.config.ff_dropout:
            inner = drop(inner)
        return drop(linear(inner, self.linear2_weight, self.linear2_bias))


class _HeadBlocks(torch.autograd.Function):
    """qkv (S, 3, H, dh, L, B) -> q, k, v, each (S*B*H, dh, L) and contiguous: one (dh, L) block
    per sequence and head. The backward copies the three gradients straight into qkv's layout,
    where autograd's graph of permute, copy and unbind would first stack them (a pass more)."""

    @staticmethod
    def forward(ctx, qkv):  # type: ignore[override]
        ctx.shape = qkv.shape
        head_dim, length = qkv.shape[3], qkv.shape[4]
        blocks = qkv.permute(1, 0, 5, 2, 3, 4).reshape(3, -1, head_dim, length)  # a view if S = B = 1
        return blocks.unbind(0)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):  # type: ignore[override]
        members, _, heads, head_dim, length, batch = ctx.shape
        out = grads[0].new_empty(ctx.shape)  # an unused block's gradient comes as zeros
        for i, grad in enumerate(grads):
            out[:, i].copy_(grad.reshape(members, batch, heads, head_dim, length)
                            .permute(0, 2, 3, 4, 1))
        return out


class Transformer(EnsembleLM):
    """S transformer language models (masked or causal) trained as one (see EnsembleLM).

    Pads: a real position never attends to a pad; a pad attends to itself as well, so no
    attention row is empty. Dropout draws from each member's own generator.

    Examples:
        >>> import torch
        >>> from dhwt.models import ModelConfig, Transformer
        >>> model = Transformer(ModelConfig(vocab_size=7, max_len=8, causal=True), [1], tied=True)
        >>> x = torch.randint(0, 6, (1, 3, 8))
        >>> y = x.clone()
        >>> y[..., -1] += 1  # another last token: a causal model's earlier outputs stay the same
        >>> torch.allclose(model(x)[..., :-1, :], model(y)[..., :-1, :])
        True
        >>> masked = Transformer(ModelConfig(vocab_size=7, max_len=8), [1], tied=True)
        >>> pads = torch.zeros(1, 3, 8, dtype=torch.bool)
        >>> pads[..., 5:] = True  # the last 3 positions are pads: what they hold is never read
        >>> torch.allclose(masked(x, pads)[..., :5, :], masked(y, pads)[..., :5, :])
        True
        >>> torch.allclose(masked(x)[..., :5, :], masked(y)[..., :5, :])  # unpadded, it is read
        False
    """

    architecture = "transformer"
    position_major = True

    def __init__(self, config: ModelConfig, seeds: Sequence[int], tied: Tied):
        super().__init__()
        main = self._build_embeddings(config, seeds, tied)
        c = config
        if c.positions == "learned":
            self.positions = stacked(lambda g: self._table(c.max_len, g), main)
        elif c.positions == "sinusoidal":
            self.register_buffer(
                "positions", init.sinusoidal_table(c.max_len, c.d_model), persistent=False
            )
        self.blocks = nn.ModuleList(Block(c, main) for _ in range(c.n_layers))
        self._build_output()

    def _features(self, inputs: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
        """The last layer's output, feature-major: (S, d, L * B)."""
        c = self.config
        x = self._embed_features(inputs, padding)  # (S, d, L * B)
        members, batch, length = inputs.shape
        if c.positions == "learned":  # (S, L, d) -> (S, d, L, 1)
            x = (x.view(members, c.d_model, length, batch)
                 + self.positions[:, :length].mT.unsqueeze(3)).view_as(x)
        elif c.positions == "sinusoidal":  # (L, d) -> (d, L, 1)
            x = (x.view(members, c.d_model, length, batch)
                 + self.positions[:length].mT.unsqueeze(2)).view_as(x)
        x = self._dropout(x)
        allowed = None if padding is None else self._allowed(padding)
        drop = _MemberDropout(self)
        for block in self.blocks:
            x = block(x, (batch, length), allowed, drop)
        return x

    def _allowed(self, padding: torch.Tensor) -> torch.Tensor:
        """(S*B, 1, L, L) bool, True where a query may attend to a key: keys that are not pads
        (and, if causal, not in the future), plus each position itself."""
        members, batch, length = padding.shape
        allowed = ~padding.reshape(members * batch, 1, 1, length)
        eye = torch.eye(length, dtype=torch.bool, device=padding.device)
        if self.config.causal:
            allowed = allowed & causal_mask(length, padding.device)
        return allowed | eye

    def _dropout(self, x: torch.Tensor) -> torch.Tensor:
        """Inverted dropout with each member's mask drawn from its own generator.

        x's leading dim is S or S*B (member-major), so x.view(S, -1) puts one member per row.
        The mask is drawn on x's device (see EnsembleLM.dropout_generators).
        """
        p = self.config.dropout
        if p == 0 or not self.training:
            return x
        generators = self.dropout_generators(x.device) or [None] * self.members
        keep = dropout.keep_scales(self.config.dropout_masks, p,
                                   (self.members, x.numel() // self.members), generators,
                                   x.dtype, x.device)
        return x * keep.view(x.shape)  # scaled mask: one pass less, both ways


class _MemberDropout:
    """A Transformer's dropout (`_dropout`) with the generators it draws from, as the blocks
    take it (Dropout)."""

    def __init__(self, model: Transformer) -> None:
        self.model = model

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.model._dropout(x)

    def generators(self, device: torch.device) -> list[torch.Generator]:
        return self.model.dropout_generators(device) or []
