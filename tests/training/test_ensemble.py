"""Per-member loss, accuracy and gradient clipping against independent per-member computations."""

from __future__ import annotations

import math

import torch

from dhwt.languages import Batch
from dhwt.languages.batch import stack_batches
from dhwt.training.ensemble import clip_member_grads, member_accuracy, member_loss


def test_clipping_each_member_equals_torch_clip_grad_norm_on_that_member_alone():
    g = torch.Generator().manual_seed(0)
    shapes = [(3, 5, 4), (3, 7), (3, 2, 2, 2)]
    params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    grads = [torch.randn(s, generator=g) * scale for s, scale in zip(shapes, (1.0, 3.0, 0.1))]
    grads[0][2] *= 1e-3  # member 2 is under the limit: left alone
    for p, grad in zip(params, grads):
        p.grad = grad.clone()
    norms = clip_member_grads(params, max_norm=1.5)
    for member in range(3):
        solo = [torch.nn.Parameter(torch.zeros(s[1:])) for s in shapes]
        for p, grad in zip(solo, grads):
            p.grad = grad[member].clone()
        norm = torch.nn.utils.clip_grad_norm_(solo, 1.5)
        assert math.isclose(float(norms[member]), float(norm), rel_tol=1e-6)
        for p, q in zip(params, solo):
            torch.testing.assert_close(p.grad[member], q.grad, rtol=1e-6, atol=1e-7)


def test_loss_and_accuracy_against_a_loop_over_members_and_positions():
    g = torch.Generator().manual_seed(1)
    members, B, L, V = 2, 3, 4, 5
    batches = []
    for _ in range(members):
        targets = torch.full((B, L), -100)
        weights = torch.zeros(B, L)
        for b in range(B):
            pos = int(torch.randint(L, (1,), generator=g))
            targets[b, pos] = int(torch.randint(V, (1,), generator=g))
            weights[b, pos] = [0.2, 0.3, 0.5][b]
        batches.append(Batch(torch.zeros(B, L, dtype=torch.long), targets, weights))
    batch = stack_batches(batches)
    logits = torch.randn(members, B, L, V, generator=g)
    loss, accuracy = member_loss(logits, batch), member_accuracy(logits, batch)
    for s in range(members):
        want_loss = want_acc = 0.0
        for b in range(B):
            for t in range(L):
                y = int(batch.targets[s, b, t])
                if y == -100:
                    continue
                w = float(batch.weights[s, b, t])
                p = torch.softmax(logits[s, b, t].double(), 0)
                want_loss += -w * math.log(float(p[y]))
                want_acc += w * (int(p.argmax()) == y)
        assert math.isclose(float(loss[s]), want_loss, rel_tol=1e-5)
        assert math.isclose(float(accuracy[s]), want_acc, rel_tol=1e-6)
