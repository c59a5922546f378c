"""The ensemble LSTM against torch.nn.LSTM + nn.Linear per member (a second implementation)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from dhwt.errors import DhwtError
from dhwt.models import LSTM, ModelConfig

SEEDS = (3, 11, 42)
S, B, L, V = 3, 5, 8, 7


def _config(**overrides) -> ModelConfig:
    return ModelConfig(vocab_size=V, max_len=L, architecture="lstm", **overrides)


def _randomise(model: LSTM, seed: int) -> None:
    """Overwrite every parameter with N(0, 0.5) noise (saturation-free but far from init)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)


def _right_padding(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(S, B) lengths in [1, L] with one full-length string per member, and the pad mask."""
    lengths = torch.randint(1, L + 1, (S, B), generator=torch.Generator().manual_seed(seed))
    lengths[:, 0] = L
    return lengths, torch.arange(L) >= lengths.unsqueeze(-1)


def _torch_member(model: LSTM, member: int) -> tuple[nn.LSTM, nn.Linear]:
    """torch modules holding member `member`'s weights (copies, with their own gradients)."""
    c = model.config
    directions = model.directions
    ref = nn.LSTM(c.d_model, c.lstm_hidden, c.lstm_layers, batch_first=True,
                  bidirectional=directions == 2).double()
    proj = nn.Linear(directions * c.lstm_hidden, c.d_model).double()
    with torch.no_grad():
        for layer, ours in enumerate(model.layers):
            for d in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if d else "")
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(ref, name + suffix).copy_(getattr(ours, name)[member, d])
        proj.weight.copy_(model.proj_weight[member])
        proj.bias.copy_(model.proj_bias[member])
    return ref, proj


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_logits_and_gradients_match_torch_lstm(causal, padded, tied):
    """Forward and every gradient (embeddings both ends, each LSTM weight, the projection) equal
    torch's; with padding torch reads packed sequences (pack_padded_sequence), so its backward
    direction starts at each string's last real token. Loss: a fixed random weighting of the
    logits at real positions."""
    model = LSTM(_config(causal=causal, output_bias=True), SEEDS, tied=tied).double()
    _randomise(model, seed=1)
    g = torch.Generator().manual_seed(2)
    inputs = torch.randint(0, V, (S, B, L), generator=g)
    lengths, padding = _right_padding(seed=3) if padded else (torch.full((S, B), L), None)
    real = torch.arange(L) < lengths.unsqueeze(-1)
    weights = torch.randn(S, B, L, V, generator=g, dtype=torch.float64) * real.unsqueeze(-1)
    logits = model(inputs, padding)
    (logits * weights).sum().backward()
    emb = model.embeddings
    for m in range(S):
        ref, proj = _torch_member(model, m)
        e_in = emb.input_weight[m].detach().clone().requires_grad_()
        e_out = e_in if tied else emb.output_weight[m].detach().clone().requires_grad_()
        bias = model.output_bias[m].detach().clone().requires_grad_()
        x = e_in[inputs[m]]
        if padded:
            x = nn.utils.rnn.pack_padded_sequence(x, lengths[m], batch_first=True,
                                                  enforce_sorted=False)
        out, _ = ref(x)
        if padded:
            out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=L)
        expected = proj(out) @ e_out.T + bias
        (expected * weights[m]).sum().backward()
        torch.testing.assert_close(logits[m][real[m]], expected[real[m]], rtol=1e-12, atol=1e-12)
        pairs = [(emb.input_weight, e_in), (model.output_bias, bias),
                 (model.proj_weight, proj.weight), (model.proj_bias, proj.bias)]
        if not tied:
            pairs.append((emb.output_weight, e_out))
        for layer, ours in enumerate(model.layers):
            for d in range(model.directions):
                suffix = f"_l{layer}" + ("_reverse" if d else "")
                pairs += [(getattr(ours, n), getattr(ref, n + suffix), d)
                          for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        for ours, theirs, *direction in pairs:
            grad = ours.grad[m][direction[0]] if direction else ours.grad[m]
            torch.testing.assert_close(grad, theirs.grad, rtol=1e-10, atol=1e-12)


def test_pads_anywhere_are_skipped():
    """A pad leaves the state unchanged, wherever it stands: a string with pads inside gives, at
    its real tokens, the hidden states of the same tokens packed to the front (which the test
    above checks against torch)."""
    model = LSTM(_config(), SEEDS, tied=True).double()
    _randomise(model, seed=4)
    g = torch.Generator().manual_seed(5)
    inputs = torch.randint(0, V, (S, B, L), generator=g)
    padding = torch.rand(S, B, L, generator=g) < 0.4
    padding[:, :, 0] = False  # at least one real token per string
    packed, packed_padding = inputs.clone(), torch.ones_like(padding)
    for m in range(S):
        for b in range(B):
            tokens = inputs[m, b][~padding[m, b]]
            packed[m, b, : len(tokens)] = tokens
            packed_padding[m, b, : len(tokens)] = False
    h, h_packed = model.hidden(inputs, padding), model.hidden(packed, packed_padding)
    torch.testing.assert_close(h[~padding], h_packed[~packed_padding], rtol=0, atol=1e-13)


def test_causal_lstm_ignores_the_future():
    model = LSTM(_config(causal=True), SEEDS, tied=True)
    inputs = torch.randint(0, V, (S, B, L), generator=torch.Generator().manual_seed(6))
    changed = inputs.clone()
    changed[:, :, 5:] = (changed[:, :, 5:] + 1) % V
    torch.testing.assert_close(model(inputs)[:, :, :5], model(changed)[:, :, :5], rtol=0, atol=0)
    assert not torch.equal(model(inputs)[:, :, 5:], model(changed)[:, :, 5:])


@pytest.mark.parametrize("init", ["torch", "xavier"])
def test_init_bounds_follow_torch_and_xavier(init):
    """torch: nn.LSTM's U(+-1/sqrt(H)) everywhere, projection as nn.Linear; xavier: matrices
    U(+-sqrt(6 / (fan_in + fan_out)))."""
    hidden, d = 64, 32
    model = LSTM(_config(d_model=d, lstm_hidden=hidden, init=init), [7], tied=True)

    def check(tensor, bound):
        assert tensor.abs().max() <= bound
        assert tensor.abs().max() > 0.95 * bound  # the bound is the scale, not just a cap

    for layer, ours in enumerate(model.layers):
        width = d if layer == 0 else 2 * hidden
        for name, fan_in in (("weight_ih", width), ("weight_hh", hidden)):
            xavier = math.sqrt(6 / (fan_in + 4 * hidden))
            check(getattr(ours, name), hidden**-0.5 if init == "torch" else xavier)
        check(ours.bias_ih, hidden**-0.5)
        check(ours.bias_hh, hidden**-0.5)
    xavier = math.sqrt(6 / (2 * hidden + d))
    check(model.proj_weight, (2 * hidden) ** -0.5 if init == "torch" else xavier)
    check(model.proj_bias, (2 * hidden) ** -0.5)


def test_shapes_and_too_long_input():
    model = LSTM(_config(lstm_layers=3), SEEDS, tied=True)
    assert model.directions == 2 and len(model.layers) == 3
    assert model.layers[1].weight_ih.shape == (S, 2, 32, 16)
    assert model.hidden(torch.zeros(S, B, L, dtype=torch.long)).shape == (S, B, L, 4)
    with pytest.raises(DhwtError, match="exceeds the model's max_len 8"):
        model(torch.zeros(S, B, L + 1, dtype=torch.long))
