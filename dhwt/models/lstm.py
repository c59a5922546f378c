"""An ensemble-native LSTM language model: bidirectional for masked LM, forward-only for causal LM.

The paper's EXor LSTM is "bi-directional, 2 layers, emb 4, hidden 8, projection back to 4". Read
here as torch.nn.LSTM(input_size=d_model, hidden_size=lstm_hidden, num_layers=lstm_layers,
bidirectional=not causal) followed by one nn.Linear(directions * lstm_hidden -> d_model) on the
top layer's concatenated outputs [forward, backward]: h(r) = W_p [h_fwd; h_bwd] + b_p and
logits = h @ E_out^T (+ bias), so h lives in the embedding space as the tying needs. (torch's own
`proj_size` is a different thing: it shrinks each direction's recurrent state inside every layer,
and a bidirectional LSTM would still output 2 * proj_size features.) Each layer follows torch's
equations, gate order (i, f, g, o):

    i, f, o = sigmoid(.), g = tanh(.) of W_ih x_t + b_ih + W_hh h_{t-1} + b_hh
    c_t = f * c_{t-1} + i * g,  h_t = o * tanh(c_t),  h_{-1} = c_{-1} = 0.

Pads: a padded position leaves both directions' states unchanged, so each direction reads the
real tokens alone, in order; with pads at the end (as dhwt.languages pads) the backward direction
starts at each sequence's last real token, exactly torch's pack_padded_sequence. Outputs at pads
are the carried states: finite, meaningless, and never read by a real position.

Members and directions run as one recurrence: every step is one baddbmm over S * D (member,
direction) pairs, with a Python loop over the L time steps (L is 8 to 16 here). The input
contributions W_ih x_t + b of all steps come first as one bmm; the backward direction reads its
inputs reversed in time, so both directions step through the same loop index.

Init ("torch"): every LSTM weight and bias U(+-1/sqrt(lstm_hidden)), as nn.LSTM, drawn per layer
and direction in nn.LSTM's order (w_ih, w_hh, b_ih, b_hh); the projection as nn.Linear.
"xavier": Xavier-uniform matrices, biases as under "torch".
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from dhwt.models import init
from dhwt.models.base import EnsembleLM, Tied
from dhwt.models.config import ModelConfig
from dhwt.models.layers import linear, stacked


class Recurrence(nn.Module):
    """One LSTM layer, D directions, for S members at once.

    Parameters (nn.LSTM's per direction, member and direction dims first): weight_ih
    (S, D, 4H, input), weight_hh (S, D, 4H, H), bias_ih and bias_hh (S, D, 4H).
    """

    def __init__(self, config: ModelConfig, inputs: int, directions: int,
                 generators: Sequence[torch.Generator]):
        super().__init__()
        hidden = config.lstm_hidden
        bound = hidden**-0.5

        def matrix(shape: tuple[int, int], g: torch.Generator) -> torch.Tensor:
            if config.init == "torch":
                return init.uniform(shape, bound, g)
            return init.xavier_uniform(shape, g)

        def member(g: torch.Generator) -> list[torch.Tensor]:
            """One member's four tensors, each (D, ...), drawn in nn.LSTM's order."""
            drawn = [(matrix((4 * hidden, inputs), g), matrix((4 * hidden, hidden), g),
                      init.uniform((4 * hidden,), bound, g), init.uniform((4 * hidden,), bound, g))
                     for _ in range(directions)]
            return [torch.stack(parts) for parts in zip(*drawn)]

        tensors = [torch.stack(parts) for parts in zip(*(member(g) for g in generators))]
        self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh = map(nn.Parameter, tensors)

    def forward(self, x: torch.Tensor, skip: torch.Tensor | None) -> torch.Tensor:
        """x (S, L, B, input) time-major -> outputs (S, D, L, B, H), each direction in its own
        reading order (the backward direction's time axis is reversed).

        skip: (S * D, L, B, 1) bool in the same per-direction order, True where the state must
        carry over unchanged (pads), or None.
        """
        members, length, batch, width = x.shape
        directions, gates = self.weight_ih.shape[1], self.weight_ih.shape[2]
        hidden = gates // 4
        bias = (self.bias_ih + self.bias_hh).view(members, 1, directions * gates)
        w_ih = self.weight_ih.view(members, directions * gates, width).transpose(1, 2)
        pre = torch.baddbmm(bias, x.view(members, length * batch, width), w_ih)
        pre = pre.view(members, length, batch, directions, gates).permute(0, 3, 1, 2, 4)
        pre = _reading_order(pre).reshape(members * directions, length, batch, gates)
        w_hh = self.weight_hh.view(members * directions, gates, hidden).transpose(1, 2)
        h = x.new_zeros(members * directions, batch, hidden)
        c = torch.zeros_like(h)
        outputs = []
        # unbind and split, never slicing: their backward concatenates the gradients, where a
        # slice's backward zero-fills a whole fresh gradient (most of a step's time at EXor size)
        for t, pre_t in enumerate(pre.unbind(1)):
            z_if, z_g, z_o = torch.baddbmm(pre_t, h, w_hh).split([2 * hidden, hidden, hidden], -1)
            i, f = torch.sigmoid(z_if).split(hidden, -1)
            c_new = torch.addcmul(f * c, i, torch.tanh(z_g))
            h_new = torch.sigmoid(z_o) * torch.tanh(c_new)
            if skip is not None:
                c_new = torch.where(skip[:, t], c, c_new)
                h_new = torch.where(skip[:, t], h, h_new)
            h, c = h_new, c_new
            outputs.append(h)
        return torch.stack(outputs, 1).view(members, directions, length, batch, hidden)


def _reading_order(x: torch.Tensor) -> torch.Tensor:
    """(S, D, L, ...) per direction in time order <-> in reading order (backward reversed)."""
    if x.shape[1] == 1:
        return x.contiguous()
    return torch.stack([x[:, 0], x[:, 1].flip(1)], 1)


class LSTM(EnsembleLM):
    """S LSTM language models (bidirectional for masked LM, forward for causal) trained as one.

    See the module docstring for the exact architecture, pads and init; see EnsembleLM for the
    ensemble contract (forward, hidden, embeddings).

    Examples:
        >>> import torch
        >>> from dhwt.models import LSTM, ModelConfig
        >>> x = torch.randint(0, 6, (1, 3, 8))
        >>> y = x.clone()
        >>> y[..., -1] += 1  # another last token
        >>> for causal in (False, True):  # the first position reads it only when bidirectional
        ...     model = LSTM(ModelConfig(vocab_size=7, max_len=8, architecture="lstm",
        ...                              causal=causal), [1], tied=True)
        ...     print(causal, torch.allclose(model(x)[..., 0, :], model(y)[..., 0, :]))
        False False
        True True
    """

    architecture = "lstm"

    def __init__(self, config: ModelConfig, seeds: Sequence[int], tied: Tied):
        super().__init__()
        main = self._build_embeddings(config, seeds, tied)
        c = config
        self.directions = 1 if c.causal else 2
        width = self.directions * c.lstm_hidden
        self.layers = nn.ModuleList(
            Recurrence(c, c.d_model if layer == 0 else width, self.directions, main)
            for layer in range(c.lstm_layers)
        )
        matrix = init.linear_default if c.init == "torch" else init.xavier_uniform
        self.proj_weight = stacked(lambda g: matrix((c.d_model, width), g), main)
        self.proj_bias = stacked(lambda g: init.uniform((c.d_model,), width**-0.5, g), main)
        self._build_output()

    def _features(self, inputs: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
        """The projected top-layer outputs, feature-major: (S, d, B * L)."""
        members, batch, length = inputs.shape
        x = self._embed(inputs, padding).transpose(1, 2).contiguous()  # (S, L, B, d)
        skip = None
        if padding is not None:
            pads = padding.transpose(1, 2).unsqueeze(1).expand(-1, self.directions, -1, -1)
            skip = _reading_order(pads).reshape(members * self.directions, length, batch, 1)
        for layer in self.layers:
            out = _reading_order(layer(x, skip))  # (S, D, L, B, H), time order
            x = out.permute(0, 2, 3, 1, 4).reshape(members, length, batch, -1)
        top = out.permute(0, 1, 4, 3, 2).reshape(members, -1, batch * length)  # (S, D*H, B*L)
        return linear(top, self.proj_weight, self.proj_bias)
