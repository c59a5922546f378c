"""The small-head attention and the one-hot embeddings against torch's own ops as oracles."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dhwt.models import ModelConfig, Mixer, Transformer, attention, base

S, H, DH, L, B = 2, 2, 3, 5, 4


def _qkv(dtype=torch.float64) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(S, H, DH, L, B, generator=g, dtype=dtype, requires_grad=True)
            for _ in range(3)]


def _to_torch(x: torch.Tensor) -> torch.Tensor:
    """(S, H, dh, L, B) -> SDPA's (S*B, H, L, dh)."""
    return x.permute(0, 4, 1, 3, 2).reshape(S * B, H, L, DH)


def _masks() -> dict[str, tuple[torch.Tensor | None, torch.Tensor | None]]:
    """name -> (ours, broadcastable to (S, H, L, L, B); SDPA's, (S*B, 1, L, L))."""
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    keep = torch.rand(S, B, 1, L, L, generator=torch.Generator().manual_seed(1)) < 0.6
    keep |= torch.eye(L, dtype=torch.bool)  # every query keeps a key
    return {
        "none": (None, None),
        "causal": (causal.unsqueeze(-1), causal),
        "random": (keep.permute(0, 2, 3, 4, 1), keep.reshape(S * B, 1, L, L)),
    }


@pytest.mark.parametrize("mask", ["none", "causal", "random"])
def test_attention_and_its_gradients_match_sdpa(mask):
    ours_mask, torch_mask = _masks()[mask]
    q, k, v = _qkv()
    out = attention.attention(q, k, v, ours_mask, DH**-0.5)
    tq, tk, tv = (_to_torch(x.detach()).requires_grad_() for x in (q, k, v))
    ref = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch_mask)
    torch.testing.assert_close(_to_torch(out), ref)
    upstream = torch.randn(ref.shape, generator=torch.Generator().manual_seed(2),
                           dtype=ref.dtype)
    ref.backward(upstream)
    out.backward(upstream.view(S, B, H, L, DH).permute(0, 2, 4, 3, 1))
    for ours, theirs in ((q, tq), (k, tk), (v, tv)):
        torch.testing.assert_close(_to_torch(ours.grad), theirs.grad)


def test_attention_passes_gradcheck():
    q, k, v = _qkv()
    masked = _masks()["random"][0]
    assert torch.autograd.gradcheck(lambda *x: attention.attention(*x, masked, 0.7), (q, k, v))


def test_fits_draws_the_line_where_measured():
    assert attention.fits(8, 4) and attention.fits(8, 8)
    assert not attention.fits(9, 4) and not attention.fits(8, 16)


def _loss_and_grads(model, inputs, padding):
    targets = torch.where(torch.rand(inputs.shape, generator=torch.Generator().manual_seed(3))
                          < 0.5, inputs, -100)
    weights = torch.full(inputs.shape, 0.1)
    model.zero_grad()
    loss = model(inputs, padding, targets=targets, weights=weights)
    loss.sum().backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


CASES = {
    "exor-mlm": (Transformer, dict(d_model=4, n_heads=1, d_ff=4)),
    "clm-learned-scaled": (Transformer, dict(d_model=8, n_heads=2, d_ff=8, causal=True,
                                             positions="learned", emb_scale=True)),
    "sinusoidal": (Transformer, dict(d_model=8, n_heads=2, d_ff=8, positions="sinusoidal")),
    "mixer": (Mixer, dict(architecture="mixer", d_model=4, d_ff=4)),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("padded", [False, True], ids=["nopad", "pad"])
def test_small_paths_equal_torch_paths_in_a_model(case, padded, monkeypatch):
    """Small attention + one-hot embeddings vs SDPA + lookup (forced by moving the lines):
    the same losses and gradients for every parameter."""
    cls, fields = CASES[case]
    config = ModelConfig(vocab_size=7, max_len=8, **fields)
    model = cls(config, [4, 9], tied=False)
    g = torch.Generator().manual_seed(5)
    inputs = torch.randint(0, 7, (2, 6, 8), generator=g)
    padding = None
    if padded:
        padding = torch.arange(8) >= torch.randint(2, 9, (2, 6, 1), generator=g)
    small = _loss_and_grads(model, inputs, padding)
    monkeypatch.setattr(attention, "MAX_LENGTH", 0)
    monkeypatch.setattr(base, "ONE_HOT_VOCAB", 0)
    torch_paths = _loss_and_grads(model, inputs, padding)
    torch.testing.assert_close(small[0], torch_paths[0])
    assert small[1].keys() == torch_paths[1].keys()
    for name in small[1]:
        torch.testing.assert_close(small[1][name], torch_paths[1][name], msg=name)
