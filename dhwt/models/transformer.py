"""An ensemble-native transformer for masked and causal language modelling.

Every parameter has a leading member dimension S: member s is a whole model, and S members run as
one computation (batched matmuls, attention on (S*B, H, L, dh)), with no Python loop over
members in the forward pass. Member s is drawn from generators derived from seeds[s] alone, so it
equals a solo model built with [seeds[s]]. The loss of an ensemble is the sum of the members'
losses, so gradients never mix and AdamW (elementwise) trains each member as if alone.

Layout. Inside, activations are feature-major, (S, d, T) with T = B * L tokens: every linear map
is one bmm W @ x, LayerNorm reduces over dim 1 with the tokens contiguous, and the logits come out
as (S, V, T). For tiny widths (the EXor model has d = 4, V = 7) this is several times faster than
token-major (S, T, d), whose reductions run over a 4-wide innermost dim. `forward` and `hidden`
return (S, B, L, ·) views of that memory; the fast loss is
`F.cross_entropy(logits.permute(0, 3, 1, 2), targets)`, class dim 1, no copy.

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
    """Per-member W @ x + b: x (S, i, T), weight (S, o, i), bias (S, o) -> (S, o, T)."""
    return torch.baddbmm(bias.unsqueeze(2), weight, x)


def _layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """LayerNorm over the features of x (S, d, T) (biased variance, as torch), per-member affine."""
    centred = x - x.mean(dim=1, keepdim=True)
    scale = torch.rsqrt(centred.pow(2).mean(dim=1, keepdim=True) + eps)
    return torch.addcmul(bias.unsqueeze(2), centred * scale, weight.unsqueeze(2))


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

    def forward(
        self, x: torch.Tensor, shape: tuple[int, int], allowed: torch.Tensor | None, drop: Dropout
    ) -> torch.Tensor:
        """x (S, d, T) -> (S, d, T) for T = B * L tokens, shape = (B, L); allowed (S*B, 1, L, L)
        bool or None (see Transformer._allowed)."""
        if self.config.norm == "post":
            x = self._norm(x + self._attention(x, shape, allowed, drop), 1)
            return self._norm(x + self._feed_forward(x, drop), 2)
        x = x + self._attention(self._norm(x, 1), shape, allowed, drop)
        return x + self._feed_forward(self._norm(x, 2), drop)

    def _norm(self, x: torch.Tensor, which: int) -> torch.Tensor:
        if which == 1:
            return _layer_norm(x, self.norm1_weight, self.norm1_bias, self.config.layer_norm_eps)
        return _layer_norm(x, self.norm2_weight, self.norm2_bias, self.config.layer_norm_eps)

    def _attention(
        self, x: torch.Tensor, shape: tuple[int, int], allowed: torch.Tensor | None, drop: Dropout
    ) -> torch.Tensor:
        c = self.config
        (members, d, _), (batch, length) = x.shape, shape
        qkv = _linear(x, self.in_proj_weight, self.in_proj_bias)  # (S, 3d, T)
        qkv = qkv.view(members, 3, c.n_heads, c.head_dim, batch, length).permute(1, 0, 4, 2, 5, 3)
        qkv = qkv.reshape(3, members * batch, c.n_heads, length, c.head_dim).contiguous()
        q, k, v = qkv.unbind(0)  # contiguous whatever S is, so SDPA takes the same path
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
        heads = heads.view(members, batch, c.n_heads, length, c.head_dim).permute(0, 2, 4, 1, 3)
        heads = heads.reshape(members, d, -1)
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
        def table(rows: int, generator: torch.Generator) -> torch.Tensor:
            return init.embedding_table(rows, c.d_model, c.emb_init, c.emb_std, generator)

        input_weight = torch.stack([table(c.vocab_size, g) for g in main])
        output_weight = None if tied else torch.stack(
            [table(c.vocab_size, init.member_generator(s, init.OUTPUT)) for s in self.seeds]
        )
        self.embeddings = TiedEmbeddings(input_weight, output_weight)
        if c.positions == "learned":
            self.positions = _stacked(lambda g: table(c.max_len, g), main)
        elif c.positions == "sinusoidal":
            self.register_buffer(
                "positions", init.sinusoidal_table(c.max_len, c.d_model), persistent=False
            )
        self.blocks = nn.ModuleList(Block(c, main) for _ in range(c.n_layers))
        if c.final_norm:
            self.final_norm_weight = _ones(members, c.d_model)
            self.final_norm_bias = _zeros(members, c.d_model)
        if c.output_bias:
            self.output_bias = _zeros(members, c.vocab_size)
        self.generators = [init.member_generator(s, init.DROPOUT) for s in self.seeds]
        offsets = torch.arange(members).view(members, 1, 1) * c.vocab_size
        self.register_buffer("_row_offsets", offsets, persistent=False)

    @property
    def members(self) -> int:
        """S, the number of members."""
        return len(self.seeds)

    def forward(self, inputs: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (S, B, L, V) for inputs (S, B, L) long; padding (S, B, L) bool, True at pads.

        A view of (S, V, B, L) memory: `logits.permute(0, 3, 1, 2)` is contiguous.
        """
        h = self._features(inputs, padding)
        members, batch, length = inputs.shape
        out = self.embeddings.output_weight
        if self.config.output_bias:
            logits = torch.baddbmm(self.output_bias.unsqueeze(2), out, h)
        else:
            logits = torch.bmm(out, h)
        return logits.view(members, -1, batch, length).permute(0, 2, 3, 1)

    def hidden(self, inputs: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        """The final hidden states h (S, B, L, d) that feed the logits (a view of (S, d, B, L)).

        Outputs at padded positions are finite but meaningless (a padded query also attends to
        itself so no attention row is empty); outputs at real positions never see pads.
        """
        h = self._features(inputs, padding)
        members, batch, length = inputs.shape
        return h.view(members, -1, batch, length).permute(0, 2, 3, 1)

    def _features(self, inputs: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
        """The final hidden states, feature-major: (S, d, B * L)."""
        c = self.config
        if inputs.dim() != 3 or inputs.shape[0] != self.members:
            raise ValueError(
                f"inputs must be (S={self.members}, B, L), got shape {tuple(inputs.shape)}"
            )
        members, batch, length = inputs.shape
        if length > c.max_len:
            raise DhwtError(f"sequence length {length} exceeds the model's max_len {c.max_len}")
        if padding is not None and padding.shape != inputs.shape:
            raise ValueError(
                f"padding shape {tuple(padding.shape)} differs from inputs {tuple(inputs.shape)}"
            )
        table = self.embeddings.input_weight.reshape(-1, c.d_model)
        x = F.embedding(inputs + self._row_offsets, table)  # (S, B, L, d)
        if c.emb_scale:
            x = x * math.sqrt(c.d_model)
        if c.positions == "learned":
            x = x + self.positions[:, None, :length]
        elif c.positions == "sinusoidal":
            x = x + self.positions[:length]
        x = self._dropout(x.view(members, batch * length, c.d_model).transpose(1, 2).contiguous())
        allowed = None if padding is None else self._allowed(padding)
        for block in self.blocks:
            x = block(x, (batch, length), allowed, self._dropout)
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
