"""An ensemble-native MLP-Mixer for masked language modelling (Tolstikhin et al. 2021, as an LM).

The paper's EXor mixer: 1 mixer layer, embedding 4, token-mixing width 4, channel-mixing width 8,
relu, pre-LN. One layer, on x (L, d) per string:

    x = x + W2 relu(W1 LN1(x) + b1) + b2      token mixing: an MLP across the L positions,
                                              applied to each feature (W1 (token_mixing, L))
    x = x + relu(LN2(x) V1^T + c1) V2^T + c2  channel mixing: an MLP across the d features,
                                              applied to each position (V1 (channel_mixing, d))

then an optional final LayerNorm (final_norm), and logits = h @ E_out^T (+ bias). There are no
positional encodings: the token-mixing weights tell positions apart, which also fixes the
sequence length to max_len. Token mixing reads every position, so the mixer has no causal form.

Pads: the input vector at a padded position is zero, so real positions never depend on what the
pad token's embedding holds (they still see where the pads are: the string's length).

Layout: feature-major (S, d, B, L) throughout, so token mixing is one bmm over (S, d * B, L) and
channel mixing one bmm over (S, d, B * L); no transposes. Init ("torch"): nn.Linear's defaults
for every matrix and bias, LayerNorm weights 1 and biases 0; "xavier": Xavier-uniform matrices.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from dhwt.errors import DhwtError
from dhwt.models import init
from dhwt.models.base import EnsembleLM, Tied
from dhwt.models.config import ModelConfig
from dhwt.models.layers import layer_norm, linear, ones, stacked, zeros


class MixerLayer(nn.Module):
    """One pre-LN mixer layer (token mixing, then channel mixing) for S members at once."""

    def __init__(self, config: ModelConfig, generators: Sequence[torch.Generator]):
        super().__init__()
        c, members = config, len(generators)
        length, d, tokens, channels = c.max_len, c.d_model, c.token_mixing, c.channel_mixing
        matrix = init.linear_default if c.init == "torch" else init.xavier_uniform
        self.eps = c.layer_norm_eps
        affine = c.norm_affine
        self.norm1_weight, self.norm1_bias = ones(members, d, affine), zeros(members, d, affine)
        self.token1_weight = stacked(lambda g: matrix((tokens, length), g), generators)
        self.token1_bias = stacked(lambda g: init.uniform((tokens,), length**-0.5, g), generators)
        self.token2_weight = stacked(lambda g: matrix((length, tokens), g), generators)
        self.token2_bias = stacked(lambda g: init.uniform((length,), tokens**-0.5, g), generators)
        self.norm2_weight, self.norm2_bias = ones(members, d, affine), zeros(members, d, affine)
        self.channel1_weight = stacked(lambda g: matrix((channels, d), g), generators)
        self.channel1_bias = stacked(lambda g: init.uniform((channels,), d**-0.5, g), generators)
        self.channel2_weight = stacked(lambda g: matrix((d, channels), g), generators)
        self.channel2_bias = stacked(lambda g: init.uniform((d,), channels**-0.5, g), generators)

    def forward(self, x: torch.Tensor, batch: int) -> torch.Tensor:
        """x (S, d, B * L) -> (S, d, B * L), tokens batch-major."""
        members, d, tokens = x.shape
        u = layer_norm(x, self.norm1_weight, self.norm1_bias, self.eps).view(members, d * batch, -1)
        v = F.relu(torch.baddbmm(self.token1_bias.unsqueeze(1), u, self.token1_weight.mT))
        v = torch.baddbmm(self.token2_bias.unsqueeze(1), v, self.token2_weight.mT)
        x = x + v.view(members, d, tokens)
        y = layer_norm(x, self.norm2_weight, self.norm2_bias, self.eps)
        y = F.relu(linear(y, self.channel1_weight, self.channel1_bias))
        return x + linear(y, self.channel2_weight, self.channel2_bias)


class Mixer(EnsembleLM):
    """S MLP-Mixer masked language models trained as one (see the module docstring and
    EnsembleLM). Inputs must have exactly max_len positions.

    Examples:
        >>> import torch
        >>> from dhwt.models import Mixer, ModelConfig
        >>> model = Mixer(ModelConfig(vocab_size=7, max_len=8, architecture="mixer"), [1, 2],
        ...               tied=True)
        >>> model(torch.randint(0, 7, (2, 3, 8))).shape
        torch.Size([2, 3, 8, 7])
        >>> model(torch.randint(0, 7, (2, 3, 5)))
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: the mixer reads sequences of exactly max_len = 8 tokens (its token
        mixing spans the positions), got length 5
    """

    architecture = "mixer"

    def __init__(self, config: ModelConfig, seeds: Sequence[int], tied: Tied):
        super().__init__()
        main = self._build_embeddings(config, seeds, tied)
        self.layers = nn.ModuleList(MixerLayer(config, main) for _ in range(config.mixer_layers))
        self._build_output()

    def _features(self, inputs: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
        """The last layer's output, feature-major: (S, d, B * L)."""
        c = self.config
        x = self._embed_features(inputs, padding)  # (S, d, B * L)
        members, batch, length = inputs.shape
        if length != c.max_len:
            raise DhwtError(f"the mixer reads sequences of exactly max_len = {c.max_len} tokens "
                            f"(its token mixing spans the positions), got length {length}")
        if padding is not None:
            x = x.masked_fill(padding.view(members, 1, -1), 0.0)
        for layer in self.layers:
            x = layer(x, batch)
        return x
