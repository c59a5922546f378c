"""An ensemble-native transformer for masked and causal language modelling.

Every parameter has a leading member dimension S: member s is a whole model, and S members run as
one computation (batched matmuls, attention on (S*B, H, L, dh)), with no Python loop over
members in the forward pass. Member s is drawn from generators derived from seeds[s] alone, so it
equals a solo model built with [seeds[s]]. The loss of an ensemble is the sum of the members'
losses, so gradients never mix and AdamW (elementwise) trains each member as if alone.

One layer with post-LN computes what torch.nn.TransformerEncoderLayer(batch_first=True,
norm_first=False) computes; pre-LN what norm_first=True computes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from dhwt.errors import DhwtError
from dhwt.models import init
from dhwt.models.config import ModelConfig
from dhwt.models.embeddings import TiedEmbeddings

Dropout = Callable[[torch.Tensor], torch.Tensor]
Draw = Callable[[torch.Generator], torch.Tensor]


def _stacked(draw: Draw, generators: Sequence[torch.Generator]) -> nn.Parameter:
    """One Parameter holding draw(g) for every member's generator, stacked on dim 0."""
    return nn.Parameter(torch.stack([draw(g) for g in generators]))


def _ones(members: int, width: int) -> nn.Parameter:
    return nn.Parameter(torch.ones(members, width))


def _zeros(members: int, width: int) -> nn.Parameter:
    return nn.Parameter(torch.zeros(members, width))


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Per-member x @ W^T + b: x (S, ..., i), weight (S, o, i), bias (S, o) -> (S, ..., o)."""
    flat = x.reshape(x.shape[0], -1, x.shape[-1])
    out = torch.baddbmm(bias.unsqueeze(1), flat, weight.transpose(1, 2))
    return out.view(*x.shape[:-1], weight.shape[1])


def _layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """LayerNorm over the last dim with per-member affine weights: x (S, B, L, d), weight (S, d)."""
    normed = F.layer_norm(x, x.shape[-1:], eps=eps)
    return torch.addcmul(bias[:, None, None, :], normed, weight[:, None, None, :])


class Block(nn.Module):
    """One encoder layer (self-attention + feed-forward) for S members at once."""

    def __init__(self, config: ModelConfig, generators: Sequence[torch.Generator]):
        super().__init__()
        d, ff, members = config.d_model, config.d_ff, len(generators)
        matrix = init.linear_default if config.init == "torch" else init.xavier_uniform
        self.config = config
        self.in_proj_weight = _stacked(lambda g: init.xavier_uniform((3 * d, d), g), generators)
        self.in_proj_bias = _zeros(members, 3 * d)
        self.out_proj_weight = _stacked(lambda g: matrix((d, d), g), generators)
        self.out_proj_bias = _zeros(members, d)
        self.linear1_weight = _stacked(lambda g: matrix((ff, d), g), generators)
        self.linear1_bias = _stacked(lambda g: init.uniform((ff,), d**-0.5, g), generators)
        self.linear2_weight = _stacked(lambda g: matrix((d, ff), g), generators)
        self.linear2_bias = _stacked(lambda g: init.uniform((d,), ff**-0.5, g), generators)
        self.norm1_weight, self.norm1_bias = _ones(members, d), _zeros(members, d)
        self.norm2_weight, self.norm2_bias = _ones(members, d), _zeros(members, d)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None, drop: Dropout) -> torch.Tensor:
        """x (S, B, L, d) -> (S, B, L, d); allowed (S*B, 1, L, L) bool or None (see Transformer)."""
        c = self.config
        if c.norm == "post":
            x = self._norm(x + self._attention(x, allowed, drop), 1)
            return self._norm(x + self._feed_forward(x, drop), 2)
        x = x + self._attention(self._norm(x, 1), allowed, drop)
        return x + self._feed_forward(self._norm(x, 2), drop)

    def _norm(self, x: torch.Tensor, which: int) -> torch.Tensor:
        weight, bias = (
            (self.norm1_weight, self.norm1_bias) if which == 1 else (self.norm2_weight, self.norm2_bias)
        )
        return _layer_norm(x, weight, bias, self.config.layer_norm_eps)

    def _attention(self, x: torch.Tensor, allowed: torch.Tensor | None, drop: Dropout) -> torch.Tensor:
        c = self.config
        members, batch, length, d = x.shape
        qkv = _linear(x, self.in_proj_weight, self.in_proj_bias)
        qkv = qkv.view(members * batch, length, 3, c.n_heads, c.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        if c.dropout > 0 and self.training:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(c.head_dim)
            if allowed is None and c.causal:
                allowed = torch.ones(length, length, dtype=torch.bool).tril()
            if allowed is not None:
                scores = scores.masked_fill(~allowed, float("-inf"))
            heads = drop(scores.softmax(dim=-1)) @ v
        elif allowed is None:
            heads = F.scaled_dot_product_attention(q, k, v, is_causal=c.causal)
        else:
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        heads = heads.transpose(1, 2).reshape(members, batch, length, d)
        return drop(_linear(heads, self.out_proj_weight, self.out_proj_bias))

    def _feed_forward(self, x: torch.Tensor, drop: Dropout) -> torch.Tensor:
        act = F.gelu if self.config.activation == "gelu" else F.relu
        inner = drop(act(_linear(x, self.linear1_weight, self.linear1_bias)))
        return drop(_linear(inner, self.linear2_weight, self.linear2_bias))


class Transformer(nn.Module):
    """S transformer language models (masked or causal) trained as one.

    inputs (S, B, L) long -> logits (S, B, L, V) = h @ E_out^T (+ bias), where h = hidden(...).
    `embeddings` holds the tying state; `tied` only chooses the starting state.
    Dropout draws from one generator per member (stream DROPOUT of its seed), never the global
    RNG; checkpoint it with `rng_state()` / `set_rng_state()`.
    """

    def __init__(self, config: ModelConfig, seeds: Sequence[int], tied: bool):
        super().__init__()
        self.config = config
        self.seeds = init.check_seeds(seeds)
        c, members = config, len(self.seeds)
        main = [init.member_generator(s, init.MAIN) for s in self.seeds]
        table = lambda g: init.embedding_table(c.vocab_size, c.d_model, c.emb_init, c.emb_std, g)  # noqa: E731
        input_weight = torch.stack([table(g) for g in main])
        output_weight = (
            None
            if tied
            else torch.stack([table(init.member_generator(s, init.OUTPUT)) for s in self.seeds])
        )
        self.embeddings = TiedEmbeddings(input_weight, output_weight)
        if c.positions == "learned":
            self.positions = _stacked(
                lambda g: init.embedding_table(c.max_len, c.d_model, c.emb_init, c.emb_std, g), main
            )
        elif c.positions == "sinusoidal":
            self.register_buffer(
                "positions", init.sinusoidal_table(c.max_len, c.d_model), persistent=False
            )
        self.blocks = nn.ModuleList(Block(c, main) for _ in range(c.n_layers))
        if c.final_norm:
            self.final_norm_weight, self.final_norm_bias = _ones(members, c.d_model), _zeros(members, c.d_model)
        if c.output_bias:
            self.output_bias = _zeros(members, c.vocab_size)
        self.generators = [init.member_generator(s, init.DROPOUT) for s in self.seeds]
        self.register_buffer(
            "_row_offsets", torch.arange(members).view(members, 1, 1) * c.vocab_size, persistent=False
        )

    @property
    def members(self) -> int:
        """S, the number of members."""
        return len(self.seeds)

    def forward(self, inputs: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (S, B, L, V) for inputs (S, B, L) long; padding (S, B, L) bool, True at pads."""
        h = self.hidden(inputs, padding)
        members, batch, length, d = h.shape
        flat = h.reshape(members, batch * length, d)
        out_t = self.embeddings.output_weight.transpose(1, 2)
        if self.config.output_bias:
            logits = torch.baddbmm(self.output_bias.unsqueeze(1), flat, out_t)
        else:
            logits = torch.bmm(flat, out_t)
        return logits.view(members, batch, length, -1)

    def hidden(self, inputs: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        """The final hidden states h (S, B, L, d) that feed the logits.

        Outputs at padded positions are finite but meaningless (a padded query also attends to
        itself so no attention row is empty); outputs at real positions never see pads.
        """
        c = self.config
        if inputs.dim() != 3 or inputs.shape[0] != self.members:
            raise ValueError(
                f"inputs must be (S={self.members}, B, L), got shape {tuple(inputs.shape)}"
            )
        members, _, length = inputs.shape
        if length > c.max_len:
            raise DhwtError(f"sequence length {length} exceeds the model's max_len {c.max_len}")
        if padding is not None and padding.shape != inputs.shape:
            raise ValueError(f"padding shape {tuple(padding.shape)} differs from inputs shape {tuple(inputs.shape)}")
        table = self.embeddings.input_weight
        x = F.embedding(inputs + self._row_offsets, table.reshape(-1, c.d_model))
        if c.emb_scale:
            x = x * math.sqrt(c.d_model)
        if c.positions == "learned":
            x = x + self.positions[:, None, :length]
        elif c.positions == "sinusoidal":
            x = x + self.positions[:length]
        x = self._dropout(x)
        allowed = None if padding is None else self._allowed(padding)
        for block in self.blocks:
            x = block(x, allowed, self._dropout)
        if c.final_norm:
            x = _layer_norm(x, self.final_norm_weight, self.final_norm_bias, c.layer_norm_eps)
        return x

    def _allowed(self, padding: torch.Tensor) -> torch.Tensor:
        """(S*B, 1, L, L) bool, True where a query may attend to a key: keys that are not pads
        (and, if causal, not in the future), plus each position itself."""
        members, batch, length = padding.shape
        allowed = ~padding.reshape(members * batch, 1, 1, length)
        eye = torch.eye(length, dtype=torch.bool)
        if self.config.causal:
            allowed = allowed & torch.ones(length, length, dtype=torch.bool).tril()
        return allowed | eye

    def _dropout(self, x: torch.Tensor) -> torch.Tensor:
        """Inverted dropout with each member's mask drawn from its own generator.

        x's leading dim is S or S*B (member-major), so x.view(S, -1) puts one member per row.
        """
        p = self.config.dropout
        if p == 0 or not self.training:
            return x
        keep = torch.empty(self.members, x.numel() // self.members, dtype=x.dtype)
        for row, generator in zip(keep, self.generators):
            row.bernoulli_(1.0 - p, generator=generator)
        return x * keep.view(x.shape) / (1.0 - p)

    def rng_state(self) -> torch.Tensor:
        """(S, n) uint8: the dropout generators' states, for checkpoints."""
        return torch.stack([g.get_state() for g in self.generators])

    def set_rng_state(self, state: torch.Tensor) -> None:
        """Restore the dropout generators from `rng_state()`."""
        for generator, row in zip(self.generators, state):
            generator.set_state(row.clone())
