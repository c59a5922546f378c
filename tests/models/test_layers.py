"""dhwt.models.layers.layer_norm (feature-major, its backward written out) against torch's
LayerNorm applied member by member to the token-major transpose, and torch's gradcheck; and
twice_differentiable's losses and Hessian against the hand-written backward passes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dhwt.models import ModelConfig, build_model
from dhwt.models.layers import layer_norm, ones, twice_differentiable, zeros
from dhwt.training.newton import hessian


def _inputs(members=3, width=6, tokens=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(members, width, tokens, generator=g, dtype=torch.float64) * 3 + 1
    w = torch.rand(members, width, generator=g, dtype=torch.float64) + 0.5
    b = torch.randn(members, width, generator=g, dtype=torch.float64)
    return x, w, b


def test_values_and_gradients_equal_torchs_layer_norm_per_member():
    x, w, b = (t.requires_grad_() for t in _inputs())
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ours = layer_norm(x, w, b, 1e-5)
    theirs = torch.stack([F.layer_norm(x[m].T, (x.shape[1],), w[m], b[m], 1e-5).T
                          for m in range(x.shape[0])])
    torch.testing.assert_close(ours, theirs)
    for got, want in zip(torch.autograd.grad(ours, (x, w, b), grad),
                         torch.autograd.grad(theirs, (x, w, b), grad)):
        torch.testing.assert_close(got, want)


def test_gradcheck_and_no_silent_second_derivative():
    x, w, b = (t.requires_grad_() for t in _inputs(members=2, width=4, tokens=3))
    assert torch.autograd.gradcheck(lambda *a: layer_norm(*a, 1e-5), (x, w, b))
    (grad,) = torch.autograd.grad(layer_norm(x, w, b, 1e-5).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError):  # once differentiable: an error, never a wrong Hessian
        grad.sum().backward()


def test_fixed_affine_gets_no_gradient_and_half_inputs_normalise_in_float32():
    x = torch.randn(2, 8, 4, dtype=torch.bfloat16, requires_grad=True)
    w, b = ones(2, 8, learned=False), zeros(2, 8, learned=False)
    y = layer_norm(x, w, b, 1e-5)
    assert y.dtype == torch.float32
    y.sum().backward()
    assert w.grad is None and b.grad is None and x.grad.dtype == torch.bfloat16
    torch.testing.assert_close(y.mean(1), torch.zeros(2, 4), atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------
# twice_differentiable: the same losses, and a Hessian (dhwt.training.newton.hessian) equal to
# central differences of the gradients of the hand-written backward passes.


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
