"""Batched seeds vs one run after another on the EXor grid: the model and optimizer alone.

(The issue's target, >= 5x through the trainer, is measured by bench_trainer_grid.py; this script
shows the model's share of it and fits the cost model below.)

The grid: the paper's EXor model (1 layer, 1 head, d_model 4, d_ff 4, gelu, post-LN, no
positions), V = 7, full batch of 114 strings x 8 tokens, tied and untied x 5 seeds = 10 runs.
Batched, two ways: two ensembles of S = 5 (one tied, one untied), and one ensemble of S = 10 whose
members carry their own tying state (5 tied, 5 untied: `Transformer(..., tied=[...])`, the output
matrix of a tied member is its input one; tests/training/test_ensemble.py checks that such members
equal their solo runs).
Baseline: the same 10 runs one after another with the same code, S = 1 each.

One "grid step" = one AdamW update (paper settings, fused as the trainer's) of all 10
runs: forward, the model's own loss path (as the trainer calls it), backward, optimizer step.
Data comes from fixed random EXor-shaped batches, so this times the model and optimizer only,
not the drawing of variants and masks (a per-member cost of the data pipeline).
Rounds interleave the variants so all see the same machine load; the script prints the medians
over rounds and their ratios, and the load average (the machine is shared).

Why two ensembles of 5 cannot reach 5x: if a step costs O + S * m (O per-step overhead, m the
work per member), the ratio is 10 (O + m) / (2 (O + 5 m)) = 5 (O + m) / (O + 5 m) < 5 for m > 0;
one ensemble of 10 reaches 5x when m <= O / 8. The script prints O and m fitted from the S = 1
and S = 10 timings.

    .venv/bin/python experiments/benchmarks/bench_ensemble.py [--steps 200] [--rounds 7]
        [--threads 1] [--optimizer fused|foreach|for-loop]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch

from dhwt.models import ModelConfig, Transformer

SEEDS = (42, 43, 44, 45, 46)
STRINGS, LENGTH, VOCAB = 114, 8, 7


def exor_batch(members: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """(S, 114, 8) inputs, one masked target position per string, weights summing to 1."""
    inputs = torch.randint(0, VOCAB - 1, (members, STRINGS, LENGTH), generator=generator)
    position = torch.randint(0, LENGTH - 1, (members, STRINGS, 1), generator=generator)
    at = torch.arange(LENGTH) == position
    targets = torch.where(at, inputs, -100)
    inputs = torch.where(at, VOCAB - 1, inputs)
    return inputs, targets, at.float() / STRINGS


#: AdamW's implementations: the trainer's (fused), multi-tensor, and torch's CPU default.
OPTIMIZERS = {"fused": dict(fused=True), "foreach": dict(foreach=True),
              "for-loop": dict(foreach=False)}


def make_step(seeds: tuple[int, ...], tied: bool | list[bool], optimizer: str) -> Callable[[], None]:
    """A closure running one AdamW update of an ensemble of `seeds`."""
    model = Transformer(ModelConfig(vocab_size=VOCAB, max_len=LENGTH), seeds, tied=tied)
    adamw = torch.optim.AdamW(
        model.parameters(), lr=5e-4, betas=(0.9, 0.999), eps=1e-12, weight_decay=0.1,
        **OPTIMIZERS[optimizer],
    )
    inputs, targets, weights = exor_batch(len(seeds), torch.Generator().manual_seed(seeds[0]))

    def step() -> None:
        losses = model(inputs, targets=targets, weights=weights)  # (S,)
        adamw.zero_grad(set_to_none=True)
        losses.sum().backward()  # sum over members: gradients never mix
        adamw.step()

    return step


def seconds(steps: list[Callable[[], None]], count: int) -> float:
    """Wall time of `count` grid steps, each running every closure once."""
    start = time.perf_counter()
    for _ in range(count):
        for step in steps:
            step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="grid steps timed per round")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (median reported)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the trainer's default)")
    parser.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default="fused",
                        help="AdamW's implementation: the trainer's (fused), multi-tensor, or "
                             "torch's CPU default (one tensor at a time)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = {
        "two ensembles": [make_step(SEEDS, tied, args.optimizer) for tied in (True, False)],
        "sequential": [make_step((s,), tied, args.optimizer) for tied in (True, False) for s in SEEDS],
        "one ensemble": [make_step(SEEDS + SEEDS, [True] * 5 + [False] * 5, args.optimizer)],
    }
    for steps in variants.values():
        seconds(steps, 20)  # warm-up
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, steps in variants.items():
            rates[name].append(args.steps / seconds(steps, args.steps))
    b, s, one = (statistics.median(rates[name]) for name in variants)
    overhead_plus_member, ten = 1 / (10 * s), 1 / one  # seconds per S=1 step, per S=10 step
    member = (ten - overhead_plus_member) / 9
    print(
        f"EXor grid, 10 runs (tied+untied x 5 seeds), {STRINGS}x{LENGTH} full batch, "
        f"threads={torch.get_num_threads()} optimizer={args.optimizer}, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(f"sequential (10 runs of S=1):  {s:7.1f} grid steps/s (median of {args.rounds} rounds)")
    print(f"batched, 2 ensembles of S=5:  {b:7.1f} grid steps/s, speed-up {b / s:.2f}x (target 5x)")
    print(f"batched, 1 ensemble of S=10:  {one:7.1f} grid steps/s, speed-up {one / s:.2f}x")
    print(
        f"fit step = O + S*m: O = {1e3 * (overhead_plus_member - member):.3f} ms, "
        f"m = {1e3 * member:.3f} ms; bound for 2 x 5: "
        f"{5 * overhead_plus_member / (overhead_plus_member + 4 * member):.2f}x"
    )


if __name__ == "__main__":
    main()
