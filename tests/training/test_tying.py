"""Tie schedules (parsing) and the switch (model + optimizer), against hand-derived oracles."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from dhwt.errors import DhwtError
from dhwt.models import ModelConfig, Transformer
from dhwt.config.schedule import TieEvent, TieSchedule
from dhwt.training.tying import apply_switch, tie_penalty

CONFIG = ModelConfig(vocab_size=7, max_len=8)  # the paper's EXor model
SEEDS = (42, 43)
LR, BETAS, EPS, WD = 1e-2, (0.9, 0.999), 1e-8, 0.1


# -- schedule language ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, tied, events",
    [
        ("tied", True, ()),
        ("untied", False, ()),
        ("untie@2000", True, (TieEvent(2000, "untie"),)),
        ("tie@5", False, (TieEvent(5, "tie", "mean"),)),
        ("tie@5:out", False, (TieEvent(5, "tie", "out"),)),
        ("untie@0", True, (TieEvent(0, "untie"),)),
        (
            "untie@2000, tie@8000:in",
            True,
            (TieEvent(2000, "untie"), TieEvent(8000, "tie", "in")),
        ),
        (
            "Untied,TIE@10,untie@20,tie@30:mean",
            False,
            (TieEvent(10, "tie", "mean"), TieEvent(20, "untie"), TieEvent(30, "tie", "mean")),
        ),
        ("tied,untie@9", True, (TieEvent(9, "untie"),)),
    ],
)
def test_parse(text, tied, events):
    schedule = TieSchedule.parse(text, steps=10_000)
    assert schedule == TieSchedule(tied, events)
    assert TieSchedule.parse(str(schedule), steps=10_000) == schedule


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("untie@abc", "step 'abc' in 'untie@abc' is not a whole number"),
        ("untie@-5", "step -5 in 'untie@-5' is negative"),
        ("untie@1.5", "step '1.5'"),
        ("untie@", "step '' in 'untie@'"),
        ("untie@10000", "'untie@10000' is at or beyond the end of the run (10000 steps)"),
        ("untie@20000", "must be in [0, 10000)"),
        ("untie@10,untie@20", "'untie@20' would untie embeddings that are already untied"),
        ("tied,tie@5", "'tie@5' would tie embeddings that are already tied (the schedule starts tied)"),
        ("untied,untie@5", "already untied (the schedule starts untied)"),
        ("untie@8000,tie@2000", "steps must increase: 'tie@2000' comes after 'untie@8000'"),
        ("untie@5,tie@5", "steps must increase"),
        ("tie@5:avg", "unknown merge mode 'avg' in 'tie@5:avg'; allowed: in, out, mean"),
        ("tie@5:", "unknown merge mode ''"),
        ("untie@5:in", "untie takes no merge mode"),
        ("", "tie schedule is empty"),
        ("   ", "tie schedule is empty"),
        ("sometimes", "cannot read 'sometimes'"),
        ("untie@5,,tie@9", "empty item between commas"),
        ("untie@5,tied", "'tied' may only open a tie schedule"),
        ("tied,untied", "'untied' may only open"),
        ("tie5", "cannot read 'tie5'"),
    ],
)
def test_bad_schedules_raise_one_precise_line(text, fragment):
    with pytest.raises(DhwtError) as info:
        TieSchedule.parse(text, steps=10_000)
    message = str(info.value)
    assert fragment in message and "\n" not in message


def test_bad_steps_raise():
    with pytest.raises(DhwtError, match="positive number of steps, got 0"):
        TieSchedule.parse("tied", steps=0)


# -- the switch -----------------------------------------------------------------------------


def _batch(seed: int, members: int = 2, batch: int = 6):
    """Random (S, B, L) inputs with one target position per row, weights summing to 1."""
    g = torch.Generator().manual_seed(seed)
    inputs = torch.randint(0, 7, (members, batch, 8), generator=g)
    position = torch.randint(0, 8, (members, batch, 1), generator=g)
    at = torch.arange(8) == position
    targets = torch.where(at, torch.randint(0, 7, inputs.shape, generator=g), -100)
    return inputs, targets, at.float() / batch


def _loss(model: Transformer, batch) -> torch.Tensor:
    """(S,) per-member sum(weights * CE)."""
    inputs, targets, weights = batch
    logits = model(inputs)
    ce = F.cross_entropy(logits.flatten(0, 2), targets.flatten(), reduction="none", ignore_index=-100)
    return (weights.flatten() * ce).view(weights.shape[0], -1).sum(1)


def _optimizer(model: Transformer) -> torch.optim.AdamW:
    return torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)


def _train(model, optimizer, first: int, count: int) -> None:
    for step in range(first, first + count):
        optimizer.zero_grad()
        _loss(model, _batch(step)).sum().backward()
        optimizer.step()


def _tied_run(steps: int):
    model = Transformer(CONFIG, SEEDS, tied=True)
    optimizer = _optimizer(model)
    _train(model, optimizer, 0, steps)
    return model, optimizer


def _count(config: ModelConfig, members: int, tied: bool) -> int:
    """Parameters counted by hand: per layer in-projection 3d*d + 3d, out-projection d*d + d,
    feed-forward 2*d*ff + ff + d, two LayerNorms 4d; one or two V*d embedding matrices."""
    d, ff, v = config.d_model, config.d_ff, config.vocab_size
    layer = 3 * d * d + 3 * d + d * d + d + 2 * d * ff + ff + d + 4 * d
    return members * (config.n_layers * layer + (1 if tied else 2) * v * d)


def _numel(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_untie_changes_no_loss_and_counts_one_more_matrix():
    model, optimizer = _tied_run(5)
    assert _numel(model) == _count(CONFIG, 2, tied=True) == 2 * (136 + 28)
    with torch.no_grad():
        before = _loss(model, _batch(99))
    apply_switch(model, optimizer, TieEvent(5, "untie"))
    with torch.no_grad():
        after = _loss(model, _batch(99))
    assert torch.equal(before, after)
    assert _numel(model) == _count(CONFIG, 2, tied=False) == 2 * (136 + 56)
    held = [p for group in optimizer.param_groups for p in group["params"]]
    assert [id(p) for p in held] == [id(p) for p in model.parameters()]


def test_after_untie_both_matrices_train_and_diverge():
    model, optimizer = _tied_run(5)
    apply_switch(model, optimizer, TieEvent(5, "untie"))
    emb = model.embeddings
    start = emb.input_weight.detach().clone()
    _train(model, optimizer, 5, 5)
    moved_in = (emb.input_weight - start).abs().amax(dim=(1, 2))
    moved_out = (emb.output_weight - start).abs().amax(dim=(1, 2))
    assert (moved_in > 1e-3).all() and (moved_out > 1e-3).all()
    assert (emb.gap() > 1e-6).all()


def test_untie_carries_adam_state_exactly():
    """Oracle: the first update after the switch is AdamW, written out by hand, applied to each
    matrix with its own path gradient (input lookup / logits) starting from the tied matrix's
    moments and step count. A fresh state (the paper's prototype, had it trained at all) would
    give a visibly different update, so the check is sharp."""
    model, optimizer = _tied_run(5)
    tied = model.embeddings.input_weight
    state = {k: v.clone() for k, v in optimizer.state[tied].items()}
    start = tied.detach().clone()

    probe = copy.deepcopy(model)
    probe.embeddings.untie()
    _loss(probe, _batch(5)).sum().backward()
    g_in, g_out = probe.embeddings.input_weight.grad, probe.embeddings.untied_output.grad
    whole = copy.deepcopy(model)
    _loss(whole, _batch(5)).sum().backward()
    torch.testing.assert_close(g_in + g_out, whole.embeddings.input_weight.grad)

    def adamw(grad, m, v, t):
        (b1, b2), t = BETAS, t + 1
        m, v = b1 * m + (1 - b1) * grad, b2 * v + (1 - b2) * grad * grad
        denom = v.sqrt() / math.sqrt(1 - b2**t) + EPS
        return start * (1 - LR * WD) - LR / (1 - b1**t) * m / denom

    m, v, t = state["exp_avg"], state["exp_avg_sq"], float(state["step"])
    assert t == 5.0
    apply_switch(model, optimizer, TieEvent(5, "untie"))
    _train(model, optimizer, 5, 1)
    emb = model.embeddings
    for param, grad in ((emb.input_weight, g_in), (emb.output_weight, g_out)):
        carried = adamw(grad, m, v, t)
        fresh = adamw(grad, torch.zeros_like(m), torch.zeros_like(v), 0.0)
        torch.testing.assert_close(param.detach(), carried, rtol=1e-6, atol=1e-7)
        assert (carried - fresh).abs().max() > 1e-3
        assert float(optimizer.state[param]["step"]) == 6.0


@pytest.mark.parametrize("merge", ["in", "out", "mean"])
def test_tie_of_equal_matrices_changes_nothing(merge):
    """untie then tie at once: every later step equals a run that never switched, bit for bit."""
    model, optimizer = _tied_run(4)
    apply_switch(model, optimizer, TieEvent(4, "untie"))
    apply_switch(model, optimizer, TieEvent(4, "tie", merge))
    _train(model, optimizer, 4, 3)
    never, never_optimizer = _tied_run(7)
    for (name, ours), theirs in zip(model.state_dict().items(), never.state_dict().values()):
        assert torch.equal(ours, theirs), name
    ours, theirs = optimizer.state_dict(), never_optimizer.state_dict()
    assert ours["param_groups"] == theirs["param_groups"]
    for index, st in theirs["state"].items():
        for key, value in st.items():
            assert torch.equal(ours["state"][index][key], value), (index, key)


@pytest.mark.parametrize("merge", ["in", "out", "mean"])
def test_tie_merges_values_and_optimizer_state(merge):
    model, optimizer = _tied_run(3)
    apply_switch(model, optimizer, TieEvent(3, "untie"))
    _train(model, optimizer, 3, 3)
    emb = model.embeddings
    e_in, e_out = emb.input_weight.detach().clone(), emb.output_weight.detach().clone()
    s_in = {k: v.clone() for k, v in optimizer.state[emb.input_weight].items()}
    s_out = {k: v.clone() for k, v in optimizer.state[emb.output_weight].items()}
    removed = emb.output_weight
    apply_switch(model, optimizer, TieEvent(6, "tie", merge))
    pick = {"in": lambda a, b: a, "out": lambda a, b: b, "mean": lambda a, b: (a + b) / 2}[merge]
    assert emb.tied and torch.equal(emb.input_weight.detach(), pick(e_in, e_out))
    state = optimizer.state[emb.input_weight]
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(state[key], pick(s_in[key], s_out[key]))
    assert float(state["step"]) == 6.0 and removed not in optimizer.state
    assert _numel(model) == _count(CONFIG, 2, tied=True)
    held = [p for group in optimizer.param_groups for p in group["params"]]
    assert [id(p) for p in held] == [id(p) for p in model.parameters()]
    _train(model, optimizer, 6, 1)  # trains on as a tied model


def test_switch_in_the_wrong_state_raises_and_touches_nothing():
    model, optimizer = _tied_run(2)
    before = {k: v.clone() for k, v in optimizer.state[model.embeddings.input_weight].items()}
    with pytest.raises(DhwtError, match="already tied"):
        apply_switch(model, optimizer, TieEvent(2, "tie", "mean"))
    after = optimizer.state[model.embeddings.input_weight]
    assert all(torch.equal(before[k], after[k]) for k in before)
    apply_switch(model, optimizer, TieEvent(2, "untie"))
    with pytest.raises(DhwtError, match="already untied"):
        apply_switch(model, optimizer, TieEvent(3, "untie"))


def test_a_switch_of_some_members_changes_no_prediction_and_only_their_state():
    """Per-member tying (tie variants in one ensemble): untie and tie act on the listed members'
    rows and state rows; the others keep theirs; the output matrix leaves only with the last."""
    model = Transformer(CONFIG, (1, 2, 3), tied=True)
    optimizer = _optimizer(model)
    for step in range(3):
        optimizer.zero_grad()
        _loss(model, _batch(step, members=3)).sum().backward()
        optimizer.step()
    emb = model.embeddings
    probe = _batch(99, members=3)
    with torch.no_grad():
        before = _loss(model, probe)
    apply_switch(model, optimizer, TieEvent(3, "untie"), members=[1])
    assert emb.tied_members == (True, False, True) and emb.mixed and not emb.tied
    with torch.no_grad():
        assert torch.equal(_loss(model, probe), before)
    _train_members(model, optimizer, 3)
    s_in = {k: v.clone() for k, v in optimizer.state[emb.input_weight].items()}
    apply_switch(model, optimizer, TieEvent(4, "untie"), members=[2])
    with torch.no_grad():
        assert torch.equal(emb.output_weight[2], emb.input_weight[2])  # a copy: no change
    s_out = optimizer.state[emb.untied_output]
    for key in ("exp_avg", "exp_avg_sq"):  # member 2's rows copied, member 1's kept its own
        assert torch.equal(s_out[key][2], s_in[key][2])
        assert not torch.equal(s_out[key][1], s_in[key][1])
    assert emb.gap()[0] == 0 and emb.gap()[1] > 0 and emb.gap()[2] == 0
    e_in, e_out = emb.input_weight.detach().clone(), emb.untied_output.detach().clone()
    apply_switch(model, optimizer, TieEvent(4, "tie", "mean"), members=[1])
    assert emb.tied_members == (True, True, False) and emb.untied_output is not None
    assert torch.equal(emb.input_weight[1].detach(), (e_in[1] + e_out[1]) / 2)
    assert torch.equal(emb.input_weight[0].detach(), e_in[0])
    apply_switch(model, optimizer, TieEvent(4, "tie", "in"), members=[2])
    assert emb.tied and emb.untied_output is None
    held = [p for group in optimizer.param_groups for p in group["params"]]
    assert [id(p) for p in held] == [id(p) for p in model.parameters()]
    assert _numel(model) == _count(CONFIG, 3, tied=True)


def _train_members(model, optimizer, step: int) -> None:
    optimizer.zero_grad()
    _loss(model, _batch(step, members=model.members)).sum().backward()
    optimizer.step()


def test_a_mixed_state_round_trips_through_the_state_dict():
    mixed = Transformer(CONFIG, (1, 2, 3), tied=[True, False, True])
    state = mixed.state_dict()
    assert state["embeddings.tied_members"].tolist() == [True, False, True]
    assert "embeddings.tied_members" not in Transformer(CONFIG, (1, 2), tied=False).state_dict()
    fresh = Transformer(CONFIG, (1, 2, 3), tied=True)
    fresh.load_state_dict(state)
    assert fresh.embeddings.tied_members == (True, False, True)
    inputs = _batch(5, members=3)[0]
    with torch.no_grad():
        assert torch.equal(fresh(inputs), mixed(inputs))
    fresh.load_state_dict(Transformer(CONFIG, (4, 5, 6), tied=False).state_dict())
    assert fresh.embeddings.tied_members == (False, False, False) and not fresh.embeddings.mixed


def test_a_switch_of_members_in_the_wrong_state_names_them():
    model = Transformer(CONFIG, (1, 2, 3), tied=[True, False, True])
    optimizer = _optimizer(model)
    with pytest.raises(DhwtError, match=r"cannot untie: members \[1\] are already untied"):
        apply_switch(model, optimizer, TieEvent(0, "untie"), members=[0, 1])
    with pytest.raises(DhwtError, match=r"cannot tie: members \[0, 2\] are already tied"):
        apply_switch(model, optimizer, TieEvent(0, "tie", "mean"))
    assert model.embeddings.tied_members == (True, False, True)
    with pytest.raises(ValueError, match="distinct indices in 0..2"):
        apply_switch(model, optimizer, TieEvent(0, "untie"), members=[3])


def test_checkpoint_after_untie_resumes_identically():
    """State dicts restore the tying state, and a fresh optimizer over `parameters()` lines up
    with the one apply_switch extended (the untied matrix sits right after the input one)."""
    model, optimizer = _tied_run(3)
    apply_switch(model, optimizer, TieEvent(3, "untie"))
    _train(model, optimizer, 3, 2)
    saved_model, saved_optimizer = copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict())
    restored = Transformer(CONFIG, SEEDS, tied=True)
    restored.load_state_dict(saved_model)
    assert not restored.embeddings.tied
    restored_optimizer = _optimizer(restored)
    restored_optimizer.load_state_dict(saved_optimizer)
    _train(model, optimizer, 5, 2)
    _train(restored, restored_optimizer, 5, 2)
    for (name, a), b in zip(model.state_dict().items(), restored.state_dict().values()):
        assert torch.equal(a, b), name
    tied_again = Transformer(CONFIG, SEEDS, tied=False)
    tied_again.load_state_dict(Transformer(CONFIG, SEEDS, tied=True).state_dict())
    assert tied_again.embeddings.tied


def test_tie_penalty_is_strength_times_squared_distance_and_pulls_together():
    model = Transformer(CONFIG, SEEDS, tied=False)
    emb = model.embeddings
    by_hand = torch.tensor(
        [sum((a - b) ** 2 for a, b in zip(emb.input_weight[m].flatten().tolist(),
                                          emb.output_weight[m].flatten().tolist())) for m in range(2)]
    )
    penalty = tie_penalty(model, 0.25)
    torch.testing.assert_close(penalty, 0.25 * by_hand)
    penalty.sum().backward()
    difference = (emb.input_weight - emb.output_weight).detach()
    torch.testing.assert_close(emb.input_weight.grad, 0.5 * difference)
    torch.testing.assert_close(emb.output_weight.grad, -0.5 * difference)
    assert torch.equal(tie_penalty(Transformer(CONFIG, SEEDS, tied=True), 0.25), torch.zeros(2))


def test_schedule_drives_the_state_through_a_run():
    schedule = TieSchedule.parse("untie@2,tie@4:out,untie@5", steps=7)
    model = Transformer(CONFIG, SEEDS, tied=schedule.initial_tied)
    optimizer = _optimizer(model)
    states = []
    for step in range(7):
        for event in schedule.events:
            if event.step == step:
                apply_switch(model, optimizer, event)
        states.append(model.embeddings.tied)
        _train(model, optimizer, step, 1)
    assert states == [True, True, False, False, True, False, False]
