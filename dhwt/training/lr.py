"""Learning-rate schedules in closed form: lr_at(step) for the update that takes step -> step + 1.

A closed form (rather than a stateful torch scheduler) makes resume trivial: the lr of any step
is a function of the step alone. The values match torch's schedulers stepped once per update:
- "constant": lr.
- "cosine": one half-cosine from lr down to lr_min over the steps after warmup
  (CosineAnnealingLR with T_max = steps - warmup_steps).
- "periodic-cosine": CosineAnnealingLR(T_max = period, eta_min = lr_min) stepped every update
  and never stopped, as in the paper: lr_min + (lr - lr_min) * (1 + cos(pi * t / period)) / 2,
  which falls to lr_min at t = period, climbs back to lr at t = 2 * period, and so on.
- warmup_steps W > 0 first: lr * (step + 1) / W for step < W (torch's LinearLR with start_factor
  1/W over W - 1 iterations), then the schedule above with t = step - W.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class LRSchedule:
    """The lr of each update. kind: "constant" | "cosine" | "periodic-cosine"."""

    kind: str
    lr: float
    lr_min: float
    steps: int
    period: int
    warmup_steps: int = 0

    def lr_at(self, step: int) -> float:
        """The lr used by the update from `step` to `step + 1` (step counts from 0)."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        t = step - self.warmup_steps
        if self.kind == "constant":
            return self.lr
        t_max = self.period if self.kind == "periodic-cosine" else self.steps - self.warmup_steps
        if self.kind == "cosine":
            t = min(t, t_max)
        return self.lr_min + (self.lr - self.lr_min) * (1 + math.cos(math.pi * t / t_max)) / 2
