"""Per-member loss, accuracy and gradient clipping against independent per-member computations,
and S members trained as one computation against S solo runs."""

from __future__ import annotations

import math

import pytest
import torch

from dhwt.config.schedule import TieSchedule
from dhwt.languages import Batch
from dhwt.languages.batch import stack_batches
from dhwt.models import ModelConfig, Transformer
from dhwt.training.ensemble import clip_member_grads, member_accuracy, member_loss
from dhwt.training.tying import apply_switch


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


# ---------------------------------------------------------------------------------------------
# S members trained as one computation equal S solo runs (item 4 of issue 3).
#
# Why they can: every parameter has a member dimension, the ensemble loss is the sum of the
# members' losses (so member i's gradient is its solo gradient), and AdamW is elementwise. What
# is left are float effects: batched matmuls (bmm over S) may block their sums differently from
# the S = 1 call. The tolerance, 1e-5 relative + 1e-6 absolute after 20 steps, leaves that room
# (a few float32 ulps per op, compounded over the run) and is still ~1e4 times smaller than one
# update. On the development machine (CPU, torch 2.13) the runs agree bit for bit.
#
# One exception is checked differently: the key bias. Adding b_k shifts every score of a query
# by the same q . b_k, which softmax ignores, so its exact gradient is zero and its float
# gradient is rounding noise; Adam divides noise by its own scale and moves b_k by up to lr per
# step. One ulp of difference anywhere therefore moves b_k by O(lr), yet it can never change an
# output. So b_k is left out of the parameter comparison and the final logits are compared
# instead.


SEEDS = (42, 43, 44)
STEPS = 20


def _batches(member: int, steps: int) -> list[tuple[torch.Tensor, ...]]:
    """A fixed random batch stream per member: inputs, targets (-100 off target), weights,
    right padding (B = 6, L = 8, V = 7)."""
    g = torch.Generator().manual_seed(1000 + member)
    out = []
    for _ in range(steps):
        inputs = torch.randint(0, 7, (6, 8), generator=g)
        lengths = torch.randint(3, 9, (6, 1), generator=g)
        padding = torch.arange(8) >= lengths
        position = (torch.rand(6, 1, generator=g) * lengths).long()
        at = torch.arange(8) == position
        targets = torch.where(at, torch.randint(0, 7, (6, 8), generator=g), -100)
        out.append((inputs, targets, at.float() / 6, padding))
    return out


def _member_losses(model: Transformer, inputs, targets, weights, padding) -> torch.Tensor:
    """The trainer's loss path: per-member sum(weights * CE) without the logits."""
    return model(inputs, padding, targets=targets, weights=weights)


def _run(config: ModelConfig, seeds, members: list[int], schedule: TieSchedule) -> Transformer:
    """Train `seeds` as one model on the stacked batch streams of `members`."""
    model = Transformer(config, seeds, tied=schedule.initial_tied)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-12, weight_decay=0.1)
    streams = [_batches(m, STEPS) for m in members]
    for step in range(STEPS):
        for event in schedule.events:
            if event.step == step:
                apply_switch(model, optimizer, event)
        stacked = [torch.stack(parts) for parts in zip(*(stream[step] for stream in streams))]
        optimizer.zero_grad()
        loss = _member_losses(model, *stacked)
        if not model.embeddings.tied:
            loss = loss + 0.01 * model.embeddings.gap()
        loss.sum().backward()
        optimizer.step()
    return model


@pytest.mark.parametrize("schedule", ["tied", "untied", "untie@7,tie@14:mean"])
@pytest.mark.parametrize(
    "config",
    [
        ModelConfig(vocab_size=7, max_len=8),
        pytest.param(ModelConfig(vocab_size=7, max_len=8, d_model=8, n_heads=2, d_ff=16,
                                 n_layers=2, norm="pre", final_norm=True, positions="learned",
                                 causal=True), marks=pytest.mark.long),
        pytest.param(ModelConfig(vocab_size=70, max_len=8, d_model=8, n_heads=2, d_ff=16,
                                 causal=True, output_bias=True),  # token-major logits: the
                     marks=pytest.mark.long),                   # fused loss (models.output)
    ],
    ids=["exor", "causal-2layer", "causal-wide-vocab"],
)
def test_ensemble_training_equals_solo_runs(config, schedule):
    plan = TieSchedule.parse(schedule, STEPS)
    together = _run(config, SEEDS, [0, 1, 2], plan)
    first = [_batches(m, 1)[0] for m in range(3)]
    inputs, padding = torch.stack([b[0] for b in first]), torch.stack([b[3] for b in first])
    d = config.d_model
    for member, seed in enumerate(SEEDS):
        solo = _run(config, [seed], [member], plan)
        start = Transformer(config, [seed], tied=plan.initial_tied)
        for (name, ours), theirs, initial in zip(
            together.state_dict().items(), solo.state_dict().values(), start.state_dict().values()
        ):
            ours, theirs = ours[member], theirs[0]
            if name.endswith("in_proj_bias"):  # without the key bias b_k (see the docstring)
                ours, theirs = torch.cat([ours[:d], ours[2 * d :]]), torch.cat([theirs[:d], theirs[2 * d :]])
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6, msg=name)
            if name == "embeddings.input_weight":
                assert (theirs - initial[0]).abs().max() > 1e-2  # it did train
        with torch.no_grad():
            alone = solo(inputs[member : member + 1], padding[member : member + 1])[0]
            torch.testing.assert_close(together(inputs, padding)[member], alone, rtol=1e-5, atol=1e-5)


PLANS = ("tied", "untied", "untie@7,tie@14:mean", "untie@5,tie@9:out,untie@12", "tie@3:in")


def _run_variants(config: ModelConfig, plans: list[TieSchedule], seeds) -> Transformer:
    """Every (plan, seed) pair as one ensemble with per-member tying, plan-major; member (p, j)
    reads stream j and switches when plan p says (apply_switch with its members)."""
    pairs = [(p, j) for p in range(len(plans)) for j in range(len(seeds))]
    model = Transformer(config, [seeds[j] for _, j in pairs],
                        tied=[plans[p].initial_tied for p, _ in pairs])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-12, weight_decay=0.1)
    streams = [_batches(j, STEPS) for _, j in pairs]
    for step in range(STEPS):
        for p, plan in enumerate(plans):
            for event in plan.events:
                if event.step == step:
                    switching = [k for k, (q, _) in enumerate(pairs) if q == p]
                    apply_switch(model, optimizer, event, members=switching)
        stacked = [torch.stack(parts) for parts in zip(*(stream[step] for stream in streams))]
        optimizer.zero_grad()
        loss = _member_losses(model, *stacked) + 0.01 * model.embeddings.gap()  # 0 when tied
        loss.sum().backward()
        optimizer.step()
    return model


@pytest.mark.parametrize(
    "config",
    [ModelConfig(vocab_size=7, max_len=8),
     pytest.param(ModelConfig(vocab_size=70, max_len=8, d_model=8, n_heads=2, d_ff=16,
                              causal=True), marks=pytest.mark.long)],
    ids=["exor", "causal-wide-vocab"],
)
def test_tie_variants_in_one_ensemble_equal_their_solo_runs(config):
    """Tied, untied and switching schedules as members of one ensemble (per-member tying state)
    end where each schedule's solo run of the same seed ends."""
    plans = [TieSchedule.parse(text, STEPS) for text in PLANS]
    seeds = SEEDS[:2]
    together = _run_variants(config, plans, seeds)
    d = config.d_model
    for p, plan in enumerate(plans):
        for j, seed in enumerate(seeds):
            k = p * len(seeds) + j
            solo = _run(config, [seed], [j], plan)
            assert together.embeddings.tied_members[k] == solo.embeddings.tied
            ours_out = together.embeddings.output_weight[k]
            torch.testing.assert_close(ours_out, solo.embeddings.output_weight[0], rtol=1e-5,
                                       atol=1e-6, msg=f"{PLANS[p]} seed {seed}: output matrix")
            ours_state = together.state_dict()
            for name, theirs in solo.state_dict().items():
                if name == "embeddings.untied_output":
                    continue  # compared as the output matrix above
                ours, theirs = ours_state[name][k], theirs[0]
                if name.endswith("in_proj_bias"):  # without b_k (see the module docstring)
                    ours, theirs = (torch.cat([x[:d], x[2 * d:]]) for x in (ours, theirs))
                torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6,
                                           msg=f"{PLANS[p]} seed {seed}: {name}")
