"""The ensemble MLP-Mixer against a plain per-member, token-major reference written here."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from dhwt.errors import DhwtError
from dhwt.models import Mixer, ModelConfig

SEEDS = (3, 11, 42)
S, B, L, V = 3, 5, 8, 7


def _config(**overrides) -> ModelConfig:
    return ModelConfig(vocab_size=V, max_len=L, architecture="mixer", **overrides)


def _randomise(model: Mixer, seed: int) -> None:
    """Overwrite every parameter with N(0, 0.5) noise, so zero biases and unit LayerNorm weights
    cannot hide a wiring mistake."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)


def _reference(model: Mixer, inputs: torch.Tensor, padding: torch.Tensor | None,
               member: int) -> torch.Tensor:
    """Member `member`'s logits (B, L, V), one string-by-string formula at a time: x is (B, L, d);
    token mixing acts on x^T (B, d, L), channel mixing on x."""
    c, m = model.config, member
    eps = c.layer_norm_eps
    emb = model.embeddings
    x = emb.input_weight[m][inputs[m]] * (math.sqrt(c.d_model) if c.emb_scale else 1.0)
    if padding is not None:
        x = torch.where(padding[m].unsqueeze(-1), torch.zeros_like(x), x)
    for layer in model.layers:
        u = F.layer_norm(x, (c.d_model,), layer.norm1_weight[m], layer.norm1_bias[m], eps)
        mixed = F.linear(F.relu(F.linear(u.transpose(1, 2), layer.token1_weight[m],
                                          layer.token1_bias[m])),
                         layer.token2_weight[m], layer.token2_bias[m])
        x = x + mixed.transpose(1, 2)
        y = F.layer_norm(x, (c.d_model,), layer.norm2_weight[m], layer.norm2_bias[m], eps)
        x = x + F.linear(F.relu(F.linear(y, layer.channel1_weight[m], layer.channel1_bias[m])),
                         layer.channel2_weight[m], layer.channel2_bias[m])
    if c.final_norm:
        x = F.layer_norm(x, (c.d_model,), model.final_norm_weight[m], model.final_norm_bias[m],
                         eps)
    return F.linear(x, emb.output_weight[m], model.output_bias[m] if c.output_bias else None)


def _right_padding(seed: int) -> torch.Tensor:
    lengths = torch.randint(1, L + 1, (S, B, 1), generator=torch.Generator().manual_seed(seed))
    return torch.arange(L) >= lengths


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize(
    "extra",
    [{}, {"mixer_layers": 2, "final_norm": True, "output_bias": True, "d_model": 6,
          "token_mixing": 3, "channel_mixing": 5, "emb_scale": True}],
    ids=["paper", "2layer-extras"],
)
def test_logits_and_gradients_match_reference(extra, padded, tied):
    model = Mixer(_config(**extra), SEEDS, tied=tied).double()
    _randomise(model, seed=1)
    g = torch.Generator().manual_seed(2)
    inputs = torch.randint(0, V, (S, B, L), generator=g)
    padding = _right_padding(seed=3) if padded else None
    weights = torch.randn(S, B, L, V, generator=g, dtype=torch.float64)
    logits = model(inputs, padding)
    (logits * weights).sum().backward()
    ours = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    expected = torch.stack([_reference(model, inputs, padding, m) for m in range(S)])
    (expected * weights).sum().backward()
    torch.testing.assert_close(logits, expected, rtol=1e-12, atol=1e-12)
    for name, p in model.named_parameters():
        torch.testing.assert_close(ours[name], p.grad, rtol=1e-10, atol=1e-12, msg=name)


def test_pads_never_reach_real_positions():
    """Whatever token a pad holds, real positions see a zero vector there."""
    model = Mixer(_config(), SEEDS, tied=True)
    _randomise(model, seed=4)
    g = torch.Generator().manual_seed(5)
    inputs = torch.randint(0, V, (S, B, L), generator=g)
    padding = _right_padding(seed=6)
    other = torch.where(padding, torch.randint(0, V, (S, B, L), generator=g), inputs)
    assert not torch.equal(other, inputs)
    real = ~padding
    torch.testing.assert_close(model(other, padding)[real], model(inputs, padding)[real],
                               rtol=0, atol=0)


def test_every_position_mixes_with_every_other():
    """Token mixing reaches across the string: changing the last token moves the first
    position's output (a masked LM, not a causal one)."""
    model = Mixer(_config(), SEEDS, tied=True)
    inputs = torch.randint(0, V, (S, B, L), generator=torch.Generator().manual_seed(7))
    changed = inputs.clone()
    changed[:, :, -1] = (changed[:, :, -1] + 1) % V
    assert (model(inputs)[:, :, 0] != model(changed)[:, :, 0]).any(-1).all()


@pytest.mark.parametrize("init", ["torch", "xavier"])
def test_init_bounds_follow_torch_and_xavier(init):
    """torch: nn.Linear's U(+-1/sqrt(fan_in)) for matrices and biases; xavier: matrices
    U(+-sqrt(6 / (fan_in + fan_out))); LayerNorm weights 1, biases 0."""
    length, d, tokens, channels = 64, 48, 80, 96
    config = ModelConfig(vocab_size=V, max_len=length, architecture="mixer", d_model=d,
                         token_mixing=tokens, channel_mixing=channels, init=init)
    layer = Mixer(config, [7], tied=True).layers[0]

    def check(tensor, bound):
        assert tensor.abs().max() <= bound
        assert tensor.abs().max() > 0.95 * bound

    for name, fan_out, fan_in in (("token1", tokens, length), ("token2", length, tokens),
                                  ("channel1", channels, d), ("channel2", d, channels)):
        matrix = getattr(layer, name + "_weight")
        assert matrix.shape == (1, fan_out, fan_in)
        check(matrix, fan_in**-0.5 if init == "torch" else math.sqrt(6 / (fan_in + fan_out)))
        check(getattr(layer, name + "_bias"), fan_in**-0.5)
    assert torch.equal(layer.norm1_weight, torch.ones(1, d))
    assert torch.equal(layer.norm2_bias, torch.zeros(1, d))


def test_length_must_be_max_len_and_no_causal_form():
    model = Mixer(_config(), SEEDS, tied=True)
    with pytest.raises(DhwtError, match="exactly max_len = 8 tokens .* got length 6"):
        model(torch.zeros(S, B, 6, dtype=torch.long))
    with pytest.raises(DhwtError, match="exceeds the model's max_len 8"):
        model(torch.zeros(S, B, 9, dtype=torch.long))
    with pytest.raises(DhwtError, match="masked LM only"):
        _config(causal=True)
