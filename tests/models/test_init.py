"""The tied conventions as model settings: GPT-2's init against HF transformers' own
GPT2LMHeadModel (the statistics of each group of weights), fairseq's embedding init against its
formula, and the settings' checks."""

from __future__ import annotations

import math

import pytest
import torch

from dhwt.errors import DhwtError
from dhwt.models import ModelConfig, Transformer

D, LAYERS, FF, VOCAB, LENGTH = 64, 3, 256, 2000, 32
GPT2 = dict(init="gpt2", emb_init="normal", emb_std=0.02, positions="learned", norm="pre",
            final_norm=True, activation="gelu", causal=True)


def _close(std: float, expected: float, n: int, what: str) -> None:
    """A sample standard deviation of n normal draws within 5 standard errors of `expected`."""
    assert abs(std / expected - 1) < 5 / math.sqrt(2 * n), (what, std, expected)


def _dhwt_groups() -> dict[str, list[torch.Tensor]]:
    config = ModelConfig(vocab_size=VOCAB, max_len=LENGTH, d_model=D, n_heads=4, d_ff=FF,
                         n_layers=LAYERS, **GPT2)
    model = Transformer(config, [7], tied=False)
    blocks = model.blocks
    return {
        "token table": [model.embeddings.input_weight[0]],
        "position table": [model.positions[0]],
        "attention in": [b.in_proj_weight[0] for b in blocks],
        "attention out": [b.out_proj_weight[0] for b in blocks],
        "feed-forward in": [b.linear1_weight[0] for b in blocks],
        "feed-forward out": [b.linear2_weight[0] for b in blocks],
        "biases": [t for b in blocks for t in (b.in_proj_bias, b.out_proj_bias, b.linear1_bias,
                                              b.linear2_bias)],
        "norm gains": [t for b in blocks for t in (b.norm1_weight, b.norm2_weight)]
                      + [model.final_norm_weight],
    }


def _hf_groups() -> dict[str, list[torch.Tensor]]:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=D,
                                     n_layer=LAYERS, n_head=4, n_inner=FF)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    blocks = model.transformer.h
    return {
        "token table": [model.transformer.wte.weight],
        "position table": [model.transformer.wpe.weight],
        "attention in": [b.attn.c_attn.weight for b in blocks],
        "attention out": [b.attn.c_proj.weight for b in blocks],
        "feed-forward in": [b.mlp.c_fc.weight for b in blocks],
        "feed-forward out": [b.mlp.c_proj.weight for b in blocks],
        "biases": [t for b in blocks for t in (b.attn.c_attn.bias, b.attn.c_proj.bias,
                                              b.mlp.c_fc.bias, b.mlp.c_proj.bias)],
        "norm gains": [t for b in blocks for t in (b.ln_1.weight, b.ln_2.weight)]
                      + [model.transformer.ln_f.weight],
    }


def test_gpt2_init_draws_what_hf_transformers_draws():
    """Each group's shape (up to HF's Conv1D transpose) and spread equal HF's: N(0, 0.02^2)
    weights, N(0, (0.02 / sqrt(2 n_layers))^2) residual projections, zero biases, unit gains."""
    ours, theirs = _dhwt_groups(), _hf_groups()
    for name in ours:
        a = torch.cat([t.detach().reshape(-1) for t in ours[name]])
        b = torch.cat([t.detach().reshape(-1) for t in theirs[name]])
        assert a.numel() == b.numel(), name
        if name == "biases":
            assert not a.any() and not b.any()
        elif name == "norm gains":
            assert torch.equal(a, torch.ones_like(a)) and torch.equal(b, torch.ones_like(b))
        else:
            _close(a.std().item(), b.std().item(), a.numel(), name)
            assert abs(a.mean().item()) < 5 * b.std().item() / math.sqrt(a.numel()), name
    residual = torch.cat([t.detach().reshape(-1) for t in ours["attention out"]])
    _close(residual.std().item(), 0.02 / math.sqrt(2 * LAYERS), residual.numel(), "formula")


def test_fairseq_embedding_init_is_normal_with_variance_one_over_d():
    config = ModelConfig(vocab_size=VOCAB, max_len=8, d_model=D, emb_init="fairseq")
    table = Transformer(config, [3], tied=True).embeddings.input_weight[0]
    _close(table.std().item(), D**-0.5, table.numel(), "fairseq")
    assert abs(table.mean().item()) < 5 * D**-0.5 / math.sqrt(table.numel())


def test_gpt2_init_is_for_the_transformer_only():
    with pytest.raises(DhwtError, match="^model init 'gpt2' applies to the transformer only, "
                                        "not to architecture 'lstm'$"):
        ModelConfig(vocab_size=7, max_len=8, architecture="lstm", init="gpt2")


def test_the_older_inits_draw_what_they_drew():
    """Adding "gpt2" left "torch" and "xavier" drawing the same weights in the same order: a
    layer's feed-forward biases are still U(+-1/sqrt(fan_in)) draws, not zeros."""
    config = ModelConfig(vocab_size=7, max_len=8, d_model=8, d_ff=16, init="xavier")
    block = Transformer(config, [1], tied=True).blocks[0]
    g = torch.Generator().manual_seed(1)
    torch.empty(7, 8).normal_(generator=g)  # the embeddings come first (stream 0)
    bound = math.sqrt(6 / (8 + 24))
    expected = torch.empty(24, 8).uniform_(-bound, bound, generator=g)
    assert torch.equal(block.in_proj_weight[0], expected)
    assert block.linear1_bias.abs().max() <= 8**-0.5 and block.linear1_bias.any()
