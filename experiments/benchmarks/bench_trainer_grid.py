"""The EXor grid through the trainer: batched runs vs the same runs one after another (issue 3,
item 4; target >= 5x wall clock).

The grid: the paper's EXor study (experiments/exor/parity.toml: parity of 7 bits, the 114/12
split, transformer d 4, AdamW at the paper's settings, full batch, evaluation and snapshot every
500 steps, checkpoints every 5000) with tied and untied x seeds 42-46 = 10 runs, each written to
its own run directory with metrics, snapshots, checkpoints, figure and report. Three ways:

  sequential:     10 calls of `train`, one seed each (S = 1);
  two ensembles:  `train` of seeds 42-46 tied, then untied (S = 5 each);
  one group:      `train` of both runs together: one ensemble of S = 10 whose members carry their
                  own tying state (tests/training/test_group.py checks each run directory equals
                  the run trained alone).

Each way is timed end to end (run directories, data drawing, evaluation, reports) at `--steps`
and at a quarter of it; the difference gives the time per step of a long run (what a 150k-step
grid costs) apart from the fixed cost per run (directories, figures, reports). Rounds interleave
the ways so all see the same machine load; the script prints medians over rounds, ratios against
sequential measured in the same round, and the load average (the machine is shared).

    .venv/bin/python experiments/benchmarks/bench_trainer_grid.py [--steps 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dhwt import TrainConfig, load_language, load_task, train_group, train_run, write_dataset
from dhwt.languages.task import Task

SEEDS = [42, 43, 44, 45, 46]
SCHEDULES = ("tied", "untied")
#: experiments/exor/parity.toml's [train], but for the number of steps.
PAPER = dict(objective="mlm", lr=5e-4, weight_decay=0.1, eps=1e-12, lr_schedule="periodic-cosine",
             lr_period=10_000, lr_min=1e-5, eval_every=500, snapshot_every=500,
             checkpoint_every=5000)


def ways(task: Task, steps: int) -> dict[str, Callable[[Path], None]]:
    """Each way of training the grid into a fresh directory."""
    def config(schedule: str, seeds: list[int]) -> TrainConfig:
        return TrainConfig(tie_schedule=schedule, seeds=seeds, steps=steps, **PAPER)

    def sequential(root: Path) -> None:
        for schedule in SCHEDULES:
            for seed in SEEDS:
                train_run(config(schedule, [seed]), task, root / f"{schedule}-{seed}")

    def two_ensembles(root: Path) -> None:
        for schedule in SCHEDULES:
            train_run(config(schedule, SEEDS), task, root / schedule)

    def one_group(root: Path) -> None:
        train_group([(config(schedule, SEEDS), root / schedule) for schedule in SCHEDULES], task)

    return {"sequential": sequential, "two ensembles": two_ensembles, "one group": one_group}


def seconds(way: Callable[[Path], None]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        way(Path(tmp))
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps per run (long timing)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (median reported)")
    args = parser.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")
    short_steps = args.steps // 4
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "parity"
        write_dataset(load_language("parity"), data, valid_fraction=0.1, test_fraction=0.0,
                      seed=14)
        task = load_task(data, "mlm")
        long, short = ways(task, args.steps), ways(task, short_steps)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in long}
        for _ in range(args.rounds):
            for name in long:
                times[name].append((seconds(long[name]), seconds(short[name])))
    print(f"EXor grid through the trainer: 10 runs (tied+untied x 5 seeds), {args.steps} and "
          f"{short_steps} steps, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    base = times["sequential"]
    per_step = {name: [(t - s) / (args.steps - short_steps) for t, s in rounds]
                for name, rounds in times.items()}
    for name, rounds in times.items():
        total = statistics.median(t for t, _ in rounds)
        step = statistics.median(per_step[name])
        fixed = statistics.median(t - args.steps * p for (t, _), p in zip(rounds, per_step[name]))
        whole = statistics.median(b[0] / r[0] for b, r in zip(base, rounds))
        marginal = statistics.median(b / p for b, p in zip(per_step["sequential"], per_step[name]))
        print(f"{name:14s} {total:7.1f} s at {args.steps} steps ({whole:4.2f}x);  per grid step "
              f"{1e3 * step:6.2f} ms ({marginal:4.2f}x, target 5x), fixed {fixed:5.1f} s")


if __name__ == "__main__":
    main()
