"""The ensemble transformer against torch.nn.TransformerEncoderLayer as a second implementation."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from dhwt.errors import DhwtError
from dhwt.models import ModelConfig, Transformer, dropout
from dhwt.models.config import DROPOUT_MASKS
from dhwt.models.init import sinusoidal_table

SEEDS = (3, 11, 42)


def _randomise(model: Transformer, seed: int) -> None:
    """Overwrite every parameter with N(0, 0.5) noise, so zero biases and unit LayerNorm
    weights cannot hide a wiring mistake."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5 + (1.0 if p.dim() == 2 else 0.0))


def _torch_layer(model: Transformer, layer: int, member: int) -> nn.TransformerEncoderLayer:
    """A torch layer holding member `member`'s weights of block `layer`."""
    c = model.config
    ref = nn.TransformerEncoderLayer(
        d_model=c.d_model,
        nhead=c.n_heads,
        dim_feedforward=c.d_ff,
        dropout=0.0,
        activation=c.activation,
        batch_first=True,
        norm_first=c.norm == "pre",
        layer_norm_eps=c.layer_norm_eps,
    )
    b = model.blocks[layer]
    pairs = {
        ref.self_attn.in_proj_weight: b.in_proj_weight,
        ref.self_attn.in_proj_bias: b.in_proj_bias,
        ref.self_attn.out_proj.weight: b.out_proj_weight,
        ref.self_attn.out_proj.bias: b.out_proj_bias,
        ref.linear1.weight: b.linear1_weight,
        ref.linear1.bias: b.linear1_bias,
        ref.linear2.weight: b.linear2_weight,
        ref.linear2.bias: b.linear2_bias,
        ref.norm1.weight: b.norm1_weight,
        ref.norm1.bias: b.norm1_bias,
        ref.norm2.weight: b.norm2_weight,
        ref.norm2.bias: b.norm2_bias,
    }
    with torch.no_grad():
        for theirs, ours in pairs.items():
            theirs.copy_(ours[member])
    return ref.train()  # train mode: the plain (non fast-path) implementation, dropout is 0


def _oracle_hidden(
    model: Transformer, inputs: torch.Tensor, padding: torch.Tensor | None, member: int
) -> torch.Tensor:
    """Member `member`'s hidden states computed with torch's own layers."""
    c = model.config
    length = inputs.shape[-1]
    x = model.embeddings.input_weight[member][inputs[member]]
    if c.emb_scale:
        x = x * math.sqrt(c.d_model)
    if c.positions == "learned":
        x = x + model.positions[member, :length]
    elif c.positions == "sinusoidal":
        x = x + sinusoidal_table(c.max_len, c.d_model)[:length]
    mask = torch.ones(length, length, dtype=torch.bool).triu(1) if c.causal else None
    pad = None if padding is None else padding[member]
    for layer in range(c.n_layers):
        ref = _torch_layer(model, layer, member)
        x = ref(x, src_mask=mask, src_key_padding_mask=pad, is_causal=c.causal)
    if c.final_norm:
        x = nn.functional.layer_norm(
            x, (c.d_model,), model.final_norm_weight[member], model.final_norm_bias[member],
            c.layer_norm_eps,
        )
    return x


def _right_padding(members: int, batch: int, length: int, seed: int) -> torch.Tensor:
    """(S, B, L) bool: each sequence has a random real length >= 1, pads at its end."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, length + 1, (members, batch, 1), generator=g)
    return torch.arange(length) >= lengths


EXOR = dict(d_model=4, n_layers=1, n_heads=1, d_ff=4, activation="gelu")
WIDER = dict(d_model=8, n_layers=2, n_heads=2, d_ff=16, activation="relu")


@pytest.mark.parametrize("shape", [EXOR, WIDER], ids=["exor", "wider"])
@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("causal", [False, True], ids=["mlm", "clm"])
@pytest.mark.parametrize("padded", [False, True], ids=["nopad", "pad"])
def test_hidden_matches_torch_encoder_layers(shape, norm, causal, padded):
    config = ModelConfig(vocab_size=7, max_len=8, norm=norm, causal=causal, **shape)
    model = Transformer(config, SEEDS, tied=False)
    _randomise(model, seed=5)
    inputs = torch.randint(0, 7, (3, 5, 8), generator=torch.Generator().manual_seed(1))
    padding = _right_padding(3, 5, 8, seed=2) if padded else None
    with torch.no_grad():
        ours = model.hidden(inputs, padding)
        for member in range(3):
            theirs = _oracle_hidden(model, inputs, padding, member)
            real = slice(None) if padding is None else ~padding[member]
            torch.testing.assert_close(ours[member][real], theirs[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "extra",
    [
        dict(positions="learned"),
        dict(positions="sinusoidal", emb_scale=True),
        dict(norm="pre", final_norm=True, output_bias=True),
        dict(positions="sinusoidal", emb_scale=True, norm="pre", final_norm=True,
             output_bias=True, logit_scale="rsqrt_d"),
    ],
    ids=["learned", "sinusoidal-scaled", "pre-final-bias", "t5-tied-head"],
)
def test_positions_scale_final_norm_and_logits(extra):
    config = ModelConfig(vocab_size=9, max_len=6, d_model=8, n_heads=2, d_ff=8, **extra)
    model = Transformer(config, SEEDS, tied=False)
    _randomise(model, seed=9)
    inputs = torch.randint(0, 9, (3, 4, 5), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        logits = model(inputs)
        for member in range(3):
            h = _oracle_hidden(model, inputs, None, member)
            expected = h @ model.embeddings.output_weight[member].T
            if config.logit_scale == "rsqrt_d":
                expected = expected / math.sqrt(config.d_model)
            if config.output_bias:
                expected = expected + model.output_bias[member]
            torch.testing.assert_close(logits[member], expected, rtol=1e-5, atol=1e-5)


def test_sinusoidal_table_is_the_vaswani_formula():
    table = sinusoidal_table(5, 6)
    for pos in range(5):
        for i in range(3):
            angle = pos / 10000 ** (2 * i / 6)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_causal_model_ignores_the_future():
    config = ModelConfig(vocab_size=7, max_len=8, d_model=8, n_heads=2, d_ff=8, causal=True)
    model = Transformer(config, [0], tied=True)
    a = torch.randint(0, 7, (1, 2, 8), generator=torch.Generator().manual_seed(0))
    b = a.clone()
    b[..., 5:] = (b[..., 5:] + 1) % 7
    with torch.no_grad():
        torch.testing.assert_close(model(a)[..., :5, :], model(b)[..., :5, :], rtol=0, atol=0)


def test_member_equals_solo_model_and_tied_shares_init_with_untied():
    config = ModelConfig(vocab_size=11, max_len=6, d_model=8, n_heads=2, d_ff=8, positions="learned")
    ensemble = Transformer(config, SEEDS, tied=False)
    for member, seed in enumerate(SEEDS):
        solo = Transformer(config, [seed], tied=False)
        solo_tied = Transformer(config, [seed], tied=True)
        ours = ensemble.state_dict()
        for name, tensor in solo.state_dict().items():
            assert torch.equal(ours[name][member], tensor[0]), name
        tied_state = solo_tied.state_dict()
        assert set(tied_state) == set(solo.state_dict()) - {"embeddings.untied_output"}
        for name, tensor in tied_state.items():
            assert torch.equal(tensor, solo.state_dict()[name]), name
    out = ensemble.embeddings.output_weight
    assert not torch.equal(out, ensemble.embeddings.input_weight)
    assert len({tuple(out[m].flatten().tolist()) for m in range(3)}) == 3


@pytest.mark.parametrize("masks", DROPOUT_MASKS)
def test_member_equals_solo_under_dropout(masks):
    config = ModelConfig(vocab_size=7, max_len=8, d_model=8, n_heads=2, d_ff=8, dropout=0.3,
                         dropout_masks=masks)
    ensemble = Transformer(config, SEEDS, tied=True).train()
    inputs = torch.randint(0, 7, (3, 4, 8), generator=torch.Generator().manual_seed(0))
    together = ensemble(inputs)
    for member, seed in enumerate(SEEDS):
        solo = Transformer(config, [seed], tied=True).train()
        torch.testing.assert_close(together[member], solo(inputs[member : member + 1])[0])
    ensemble.eval()
    assert not torch.equal(ensemble(inputs), together)  # dropout was really active


@pytest.mark.parametrize("masks", DROPOUT_MASKS)
def test_rng_state_round_trip_repeats_dropout(masks):
    config = ModelConfig(vocab_size=7, max_len=8, dropout=0.5, dropout_masks=masks)
    model = Transformer(config, SEEDS, tied=True).train()
    inputs = torch.randint(0, 7, (3, 4, 8), generator=torch.Generator().manual_seed(0))
    state = model.rng_state()
    first = model(inputs)
    assert not torch.equal(model(inputs), first)
    model.set_rng_state(state)
    assert torch.equal(model(inputs), first)


@pytest.mark.parametrize("ff_dropout", [True, False])
def test_dropout_places(ff_dropout, monkeypatch):
    """Dropout is applied, per layer, to the attention weights, the attention output, the
    feed-forward activation (only with ff_dropout, torch's layer) and the feed-forward output,
    after the embeddings; without ff_dropout those are GPT-2's places."""
    S, B, L, d, ff, heads = 2, 3, 5, 8, 12, 2
    config = ModelConfig(vocab_size=7, max_len=L, d_model=d, n_heads=heads, d_ff=ff,
                         n_layers=2, dropout=0.1, ff_dropout=ff_dropout)
    model = Transformer(config, SEEDS[:S], tied=True).train()
    seen = []  # (members, elements per member) of each mask drawn
    original = dropout.keep_scales
    monkeypatch.setattr(dropout, "keep_scales",
                        lambda how, p, shape, *rest: seen.append(shape) or original(how, p, shape,
                                                                                     *rest))
    model(torch.zeros(S, B, L, dtype=torch.long))
    layer = [(S, B * heads * L * L), (S, d * B * L)] + [(S, ff * B * L)] * ff_dropout + [
        (S, d * B * L)]
    assert seen == [(S, d * B * L)] + layer * 2


def test_ff_dropout_applies_to_the_transformer_only():
    with pytest.raises(DhwtError, match="ff_dropout applies to the transformer only"):
        ModelConfig(vocab_size=7, max_len=8, architecture="lstm", ff_dropout=False)


@pytest.mark.parametrize("init", ["torch", "xavier"])
def test_init_bounds_follow_torch_and_xavier(init):
    d, ff, vocab = 64, 256, 500
    config = ModelConfig(vocab_size=vocab, max_len=4, d_model=d, d_ff=ff, init=init, emb_std=0.5)
    model = Transformer(config, [7], tied=True)
    b = model.blocks[0]

    def bound(fan_in, fan_out):
        return 1 / math.sqrt(fan_in) if init == "torch" else math.sqrt(6 / (fan_in + fan_out))

    expected = {
        "in_proj_weight": math.sqrt(6 / (d + 3 * d)),
        "out_proj_weight": bound(d, d),
        "linear1_weight": bound(d, ff),
        "linear2_weight": bound(ff, d),
        "linear1_bias": 1 / math.sqrt(d),
        "linear2_bias": 1 / math.sqrt(ff),
    }
    for name, limit in expected.items():
        top = getattr(b, name).abs().max().item()
        assert 0.95 * limit < top <= limit, name
    assert b.in_proj_bias.abs().max() == 0 and b.out_proj_bias.abs().max() == 0
    assert model.embeddings.input_weight.std().item() == pytest.approx(0.5, rel=0.05)


@pytest.mark.parametrize(
    "bad",
    [
        dict(vocab_size=0),
        dict(d_model=6, n_heads=4),
        dict(dropout=1.0),
        dict(activation="tanh"),
        dict(norm="sandwich"),
        dict(positions="rotary"),
        dict(emb_init="zeros"),
        dict(init="kaiming"),
        dict(emb_std=0.0),
        dict(causal="yes"),
        dict(n_layers=1.5),
        dict(ff_dropout=0),
        dict(dropout_masks="fast"),
        dict(dropout=0.99999, dropout_masks="packed"),
    ],
)
def test_bad_config_raises_one_line_error(bad):
    fields = dict(vocab_size=7, max_len=8) | bad
    with pytest.raises(DhwtError) as info:
        ModelConfig(**fields)
    assert "\n" not in str(info.value) and str(next(iter(bad))) in str(info.value)


@pytest.mark.parametrize("seeds", [[], [-1], [1.5], [True]])
def test_bad_seeds_raise(seeds):
    with pytest.raises(DhwtError, match="seed"):
        Transformer(ModelConfig(vocab_size=7, max_len=8), seeds, tied=True)


def test_too_long_input_raises():
    model = Transformer(ModelConfig(vocab_size=7, max_len=4), [0], tied=True)
    with pytest.raises(DhwtError, match="max_len 4"):
        model(torch.zeros(1, 2, 5, dtype=torch.long))


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_left_padding_in_causal_mode_stays_finite(dropout):
    """A causal query at a leading pad sees only pads; it must not turn into NaN (which would
    poison the loss through 0 * NaN even where the loss weight is zero). Both attention paths:
    SDPA (dropout 0) and the explicit softmax (dropout > 0)."""
    config = ModelConfig(
        vocab_size=7, max_len=6, d_model=8, n_heads=2, d_ff=8, causal=True, dropout=dropout
    )
    model = Transformer(config, [0, 1], tied=True)
    inputs = torch.randint(0, 7, (2, 3, 6), generator=torch.Generator().manual_seed(0))
    padding = torch.zeros(2, 3, 6, dtype=torch.bool)
    padding[:, :, :2] = True
    logits = model(inputs, padding)
    assert torch.isfinite(logits).all()
    (logits * (~padding).unsqueeze(-1)).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("width", [8, 12], ids=["scale-power-of-2", "scale-inexact"])
@pytest.mark.parametrize("causal", [False, True], ids=["mlm", "clm"])
def test_explicit_attention_path_equals_sdpa_path(causal, width):
    """With dropout > 0 in training the attention softmax is computed by hand (so its dropout
    uses the members' generators); at a vanishing rate it must equal the SDPA path (eval)."""
    config = ModelConfig(
        vocab_size=7, max_len=8, d_model=width, n_heads=2, d_ff=8, causal=causal, dropout=1e-9
    )
    model = Transformer(config, SEEDS, tied=True)
    _randomise(model, seed=3)
    inputs = torch.randint(0, 7, (3, 4, 8), generator=torch.Generator().manual_seed(0))
    padding = _right_padding(3, 4, 8, seed=1)
    for pad in (None, padding):
        real = torch.ones_like(padding) if pad is None else ~pad
        trained, evaluated = model.train()(inputs, pad), model.eval()(inputs, pad)
        torch.testing.assert_close(trained[real], evaluated[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True], ids=["mlm", "clm"])
def test_explicit_attention_path_has_the_sdpa_paths_gradients(causal):
    """The written-out attention (training with dropout, CPU) and SDPA's (eval) give the same
    weight gradients at a vanishing dropout rate, with pads and without."""
    config = ModelConfig(vocab_size=7, max_len=8, d_model=12, n_heads=2, d_ff=8, causal=causal,
                         dropout=1e-9)
    model = Transformer(config, SEEDS, tied=True).double()
    _randomise(model, seed=4)
    inputs = torch.randint(0, 7, (3, 4, 8), generator=torch.Generator().manual_seed(1))
    padding = _right_padding(3, 4, 8, seed=2)
    for pad in (None, padding):
        real = (torch.ones_like(padding) if pad is None else ~pad).unsqueeze(-1)
        grads = []
        for mode in (model.train, model.eval):
            model.zero_grad(set_to_none=True)
            (mode()(inputs, pad) * real).square().sum().backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for trained, evaluated in zip(*grads):  # the 1 / (1 - 1e-9) scales: ~1e-9 relative
            scale = evaluated.abs().max().item()
            torch.testing.assert_close(trained, evaluated, rtol=1e-6, atol=1e-7 * scale)


def test_logits_are_a_view_of_class_major_position_major_memory():
    """The documented layout (EnsembleLM.forward): (S, V, L, B) memory, no copy."""
    model = Transformer(ModelConfig(vocab_size=7, max_len=8), SEEDS, tied=True)
    logits = model(torch.zeros(3, 2, 8, dtype=torch.long))
    assert logits.shape == (3, 2, 8, 7) and logits.permute(0, 3, 2, 1).is_contiguous()


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_fixed_norms_are_not_trained_and_post_ln_hidden_norm_is_sqrt_d(norm):
    config = ModelConfig(vocab_size=7, max_len=5, d_model=8, n_heads=2, n_layers=2, norm=norm,
                         final_norm=norm == "pre", norm_affine=False)
    model = Transformer(config, list(SEEDS), tied=True)
    fixed = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert fixed == {n for n, _ in model.named_parameters() if "norm" in n}
    inputs = torch.randint(0, 7, (len(SEEDS), 4, 5))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model(inputs).square().mean().backward()
    optimizer.step()
    for name in fixed:
        value = dict(model.named_parameters())[name]
        assert torch.equal(value, torch.ones_like(value) if "weight" in name else torch.zeros_like(value))
    # with LayerNorm last and no affine, ||h|| = sqrt(d) up to eps (||x_hat||^2 = d var/(var + eps))
    norms = model.hidden(inputs).norm(dim=-1)
    assert torch.allclose(norms, torch.full_like(norms, math.sqrt(8)), atol=1e-3)
