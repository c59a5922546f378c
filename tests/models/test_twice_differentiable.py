"""twice_differentiable: the same losses, and a Hessian (dhwt.training.newton.hessian) equal to
central differences of the gradients of the hand-written backward passes."""

from __future__ import annotations

import pytest
import torch

from dhwt.models import ModelConfig, build_model
from dhwt.models.layers import twice_differentiable
from dhwt.training.newton import hessian


def tiny(vocab: int, tied: bool):
    """A pre-LN causal transformer on the small-attention path (L 4, head dim 4), float64, and
    a batch; vocab >= 64 takes the fused loss."""
    config = ModelConfig(vocab_size=vocab, max_len=4, d_model=4, d_ff=8, norm="pre",
                         positions="learned", causal=True)
    model = build_model(config, [7], tied=tied).double()
    g = torch.Generator().manual_seed(0)
    inputs = torch.randint(0, vocab, (1, 6, 4), generator=g)
    targets = torch.randint(0, vocab, (1, 6, 4), generator=g)
    weights = torch.rand(1, 6, 4, generator=g, dtype=torch.float64)
    params = [p for p in model.parameters() if p.requires_grad]
    return params, lambda: model(inputs, targets=targets, weights=weights).sum()


@pytest.mark.parametrize("vocab, tied", [(9, True), (70, True), (70, False)])
def test_the_loss_is_the_same(vocab, tied):
    _, loss = tiny(vocab, tied)
    with twice_differentiable():
        twice = loss()
    torch.testing.assert_close(twice, loss(), rtol=1e-13, atol=0)


@pytest.mark.parametrize("vocab, tied", [(9, True), (70, False)])
def test_the_hessian_is_the_gradients_derivative(vocab, tied):
    params, loss = tiny(vocab, tied)
    h = hessian(params, loss)
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    step = 1e-5

    def gradient_at(x):  # the hand-written backward passes, outside twice_differentiable
        with torch.no_grad():
            for p, part in zip(params, x.split([p.numel() for p in params])):
                p.copy_(part.view_as(p))
        grads = torch.autograd.grad(loss(), params, materialize_grads=True)
        return torch.cat([g.reshape(-1) for g in grads])

    columns = [(gradient_at(flat + step * e) - gradient_at(flat - step * e)) / (2 * step)
               for e in torch.eye(len(flat), dtype=flat.dtype)[::7]]
    torch.testing.assert_close(h[::7], torch.stack(columns), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(h, h.T, rtol=1e-10, atol=1e-12)
