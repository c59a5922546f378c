"""The closed-form lr schedules against torch's own schedulers stepped once per update."""

from __future__ import annotations

import pytest
import torch

from dhwt.training.lr import LRSchedule


def _torch_lrs(make_scheduler, lr: float, n: int) -> list[float]:
    """The lr each of n updates uses when torch's scheduler is stepped after every update."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched = make_scheduler(opt)
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_periodic_cosine_matches_cosine_annealing_over_two_periods():
    """The paper's schedule: T_max 100 stepped 450 times covers more than two full periods."""
    sched = LRSchedule("periodic-cosine", lr=5e-4, lr_min=1e-5, steps=450, period=100)
    ref = _torch_lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 100, 1e-5), 5e-4, 450)
    ours = [sched.lr_at(s) for s in range(450)]
    assert ours == pytest.approx(ref, rel=1e-9, abs=1e-15)
    assert ours[100] == pytest.approx(1e-5) and ours[200] == pytest.approx(5e-4)  # periodic


def test_cosine_decays_once_to_lr_min():
    sched = LRSchedule("cosine", lr=1e-3, lr_min=1e-4, steps=300, period=7)
    ref = _torch_lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 300, 1e-4), 1e-3, 300)
    assert [sched.lr_at(s) for s in range(300)] == pytest.approx(ref, rel=1e-9)
    assert sched.lr_at(300) == pytest.approx(1e-4)


def test_constant():
    assert {LRSchedule("constant", 0.01, 0.0, 50, 10).lr_at(s) for s in range(50)} == {0.01}


@pytest.mark.parametrize("kind", ["constant", "cosine", "periodic-cosine"])
def test_linear_warmup_then_schedule_matches_sequential_lr(kind):
    warm, steps, lr, lr_min, period = 10, 250, 2e-3, 1e-5, 60
    t_max = period if kind == "periodic-cosine" else steps - warm

    def make(opt):
        warmup = torch.optim.lr_scheduler.LinearLR(opt, 1 / warm, 1.0, total_iters=warm - 1)
        after = (torch.optim.lr_scheduler.ConstantLR(opt, 1.0, total_iters=0) if kind == "constant"
                 else torch.optim.lr_scheduler.CosineAnnealingLR(opt, t_max, lr_min))
        return torch.optim.lr_scheduler.SequentialLR(opt, [warmup, after], milestones=[warm])

    ref = _torch_lrs(make, lr, steps)
    sched = LRSchedule(kind, lr=lr, lr_min=lr_min, steps=steps, period=period, warmup_steps=warm)
    assert [sched.lr_at(s) for s in range(steps)] == pytest.approx(ref, rel=1e-9)
    assert sched.lr_at(0) == pytest.approx(lr / warm) and sched.lr_at(warm) == pytest.approx(lr)
