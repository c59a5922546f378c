"""dhwt.models.layers.layer_norm (feature-major, its backward written out) against torch's
LayerNorm applied member by member to the token-major transpose, and torch's gradcheck."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dhwt.models.layers import layer_norm, ones, zeros


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
