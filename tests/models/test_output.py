"""The output layer (dhwt.models.output): the fused loss against the plain logits path, the
layout rule, and the model's loss path against its logits.

The second implementation everywhere: logits made by einsum in float64, log-softmax, the weighted
sum of -log p(target), gradients by autograd through all of it.
"""

from __future__ import annotations

import pytest
import torch

from dhwt.languages.batch import Batch
from dhwt.models import ModelConfig, build_model, output
from dhwt.training.ensemble import member_loss

MEMBERS = 3


def _reference(h, weight, bias, targets, weights):
    """(S,) loss and its gradients w.r.t. h, weight, bias, all in float64 by autograd."""
    h, weight = (t.detach().double().requires_grad_() for t in (h, weight))
    b = None if bias is None else bias.detach().double().requires_grad_()
    z = torch.einsum("svd,sdt->stv", weight, h)
    if b is not None:
        z = z + b[:, None, :]
    logp = torch.log_softmax(z, dim=2)
    keep = targets != -100
    picked = logp.gather(2, targets.clamp(min=0).unsqueeze(2)).squeeze(2)
    loss = -(weights.double() * keep * picked).sum(1)
    loss.backward(torch.arange(1.0, MEMBERS + 1, dtype=torch.float64))  # distinct per member
    return loss, h.grad, weight.grad, None if b is None else b.grad


def _problem(vocab: int, tokens: int, bias: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(MEMBERS, 8, tokens, generator=g).requires_grad_()
    weight = torch.randn(MEMBERS, vocab, 8, generator=g).requires_grad_()
    b = (torch.randn(MEMBERS, vocab, generator=g) if bias else None)
    if b is not None:
        b.requires_grad_()
    targets = torch.randint(0, vocab, (MEMBERS, tokens), generator=g)
    targets[:, ::3] = -100  # every third position has no target
    weights = torch.rand(MEMBERS, tokens, generator=g) * (targets != -100)
    return h, weight, b, targets, weights


@pytest.mark.parametrize("rows", [None, 5], ids=["one-chunk", "ragged-chunks-of-5"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("vocab", [7, 70], ids=["feature-major", "token-major"])
def test_output_loss_and_gradients_equal_a_float64_reference(vocab, bias, rows, monkeypatch):
    if rows is not None:  # 23 tokens in chunks of 5: the last chunk is short
        monkeypatch.setattr(output, "CHUNK_BYTES", 4 * vocab * rows)
    h, weight, b, targets, weights = _problem(vocab, 23, bias)
    loss = output.output_loss(h, weight, b, targets, weights)
    loss.backward(torch.arange(1.0, MEMBERS + 1))
    want = _reference(h, weight, b, targets, weights)
    got = (loss, h.grad, weight.grad, None if b is None else b.grad)
    for name, ours, theirs in zip(("loss", "h", "weight", "bias"), got, want):
        if theirs is None:
            assert ours is None
            continue
        torch.testing.assert_close(ours.double(), theirs, rtol=1e-5, atol=1e-6, msg=name)


def test_fused_loss_without_gradients_equals_it_with_them():
    h, weight, b, targets, weights = _problem(70, 23, True)
    with torch.no_grad():
        quiet = output.output_loss(h, weight, b, targets, weights)
    torch.testing.assert_close(quiet, output.output_loss(h, weight, b, targets, weights).detach())


def test_frozen_output_matrix_gets_no_gradient_and_h_the_right_one():
    h, weight, b, targets, weights = _problem(70, 23, True)
    weight.requires_grad_(False)
    output.output_loss(h, weight, b, targets, weights).backward(torch.arange(1.0, MEMBERS + 1))
    _, want_h, _, want_b = _reference(h, weight, b, targets, weights)
    assert weight.grad is None
    torch.testing.assert_close(h.grad.double(), want_h, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b.grad.double(), want_b, rtol=1e-5, atol=1e-6)


def test_layout_rule_and_both_layouts_give_one_loss():
    """Below TOKEN_MAJOR_VOCAB the logits are a view of (S, V, T) memory, from it on contiguous
    (S, T, V); weighted_cross_entropy reads either without a copy and gives the same numbers."""
    assert not output.token_major(output.TOKEN_MAJOR_VOCAB - 1)
    assert output.token_major(output.TOKEN_MAJOR_VOCAB)
    for vocab in (7, 70):
        h, weight, b, targets, weights = _problem(vocab, 23, True)
        z = output.logits(h, weight, b)
        assert z.shape == (MEMBERS, 23, vocab)
        assert z.is_contiguous() == output.token_major(vocab)
        assert z.mT.is_contiguous() != output.token_major(vocab)
        other = z.contiguous() if not z.is_contiguous() else z.mT.contiguous().mT
        torch.testing.assert_close(output.weighted_cross_entropy(z, targets, weights),
                                   output.weighted_cross_entropy(other, targets, weights))


@pytest.mark.parametrize("architecture", ["transformer", "lstm", "mixer"])
@pytest.mark.parametrize("vocab", [7, 70], ids=["feature-major", "token-major"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_model_loss_path_equals_loss_of_its_logits(architecture, vocab, tied):
    """model(..., targets=, weights=) (the trainer's path) against member_loss of model(...),
    losses and every parameter's gradient (tied: the one matrix gets both ends' gradients)."""
    fields = dict(output_bias=True, final_norm=architecture != "lstm")
    if architecture == "transformer":
        fields.update(causal=True, positions="learned", d_model=8, n_heads=2, d_ff=16)
    config = ModelConfig(vocab_size=vocab, max_len=6, architecture=architecture, **fields)
    model = build_model(config, [5, 6, 7], tied=tied)
    g = torch.Generator().manual_seed(1)
    inputs = torch.randint(0, vocab, (MEMBERS, 4, 6), generator=g)
    targets = torch.randint(0, vocab, (MEMBERS, 4, 6), generator=g).masked_fill(
        torch.rand(MEMBERS, 4, 6, generator=g) < 0.3, -100)
    weights = torch.rand(MEMBERS, 4, 6, generator=g) * (targets != -100)
    batch = Batch(inputs, targets, weights)
    grads = []
    for path in ("logits", "loss"):
        model.zero_grad()
        if path == "logits":
            loss = member_loss(model(inputs), batch)
        else:
            loss = model(inputs, targets=targets, weights=weights)
        (loss * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
        grads.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    torch.testing.assert_close(grads[1][0], grads[0][0], rtol=1e-5, atol=1e-6)
    for name, want in grads[0][1].items():
        torch.testing.assert_close(grads[1][1][name], want, rtol=1e-4, atol=1e-5, msg=name)


def test_loss_needs_both_targets_and_weights():
    model = build_model(ModelConfig(vocab_size=7, max_len=6), [1], tied=True)
    with pytest.raises(ValueError, match="both targets and weights"):
        model(torch.zeros(1, 2, 6, dtype=torch.long), targets=torch.zeros(1, 2, 6, dtype=torch.long))


@pytest.mark.parametrize("equal", [True, False], ids=["same-count", "counts-differ"])
@pytest.mark.parametrize("vocab", [7, 70], ids=["feature-major", "token-major"])
def test_sparse_targets_give_the_reference_loss_and_gradients(vocab, equal):
    """One target in 8 tokens (masked LM): logits only for those columns when every member has
    as many (else the dense path); either way the float64 reference's numbers."""
    h, weight, b, targets, weights = _problem(vocab, 24, True, seed=1)
    g = torch.Generator().manual_seed(2)
    at = torch.rand(MEMBERS, 3, 8, generator=g).argsort(2)[..., :1]  # one position per 8
    keep = torch.zeros(MEMBERS, 3, 8, dtype=torch.bool).scatter_(2, at, True).view(MEMBERS, -1)
    if not equal:
        keep[0, (~keep[0]).nonzero()[0, 0]] = True  # member 0 has one target more
    targets = torch.where(keep, torch.randint(0, vocab, keep.shape, generator=g), -100)
    weights = torch.rand(keep.shape, generator=g) * keep
    picked, _, _ = output.targeted(h, targets, weights)
    assert picked.shape == ((MEMBERS, 8, 3) if equal else h.shape)
    loss = output.output_loss(h, weight, b, targets, weights)
    loss.backward(torch.arange(1.0, MEMBERS + 1))
    want = _reference(h, weight, b, targets, weights)
    for name, ours, theirs in zip(("loss", "h", "weight", "bias"),
                                  (loss, h.grad, weight.grad, b.grad), want):
        torch.testing.assert_close(ours.double(), theirs, rtol=1e-5, atol=1e-6, msg=name)
