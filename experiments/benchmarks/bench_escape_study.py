"""The escape-time study's cost: run-steps per second of the EXor trainer at the study's ensemble
sizes, against one run alone measured in the same process.

The study (experiments/exor/escape-*-strings.toml) trains tied / untied / untie@25000 as one
ensemble of 120 members and tied+bias as one of 40, on the paper's EXor (transformer d 4, the
authors' 114 training strings, full batch). For S in --sizes this times `Trainer._update` (draw
each member's variants and masks, forward, backward, AdamW) of a tied ensemble of S seeds and
prints steps/s, run-steps/s (S x steps/s) and the ratio of run-steps/s to S = 1; and the time of
one exact population evaluation of the ensemble (dhwt.analysis.population: 56,896 contexts), in
seconds and in training steps, the price of each record.population_every. The authors' code ran about 116 steps/s for one run on this
kind of machine (shared/REFERENCES.md); that figure was not measured here.

    .venv/bin/python experiments/benchmarks/bench_escape_study.py [--sizes 1,40,120] [--steps 200]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from dhwt import TrainConfig, load_language, load_task, population_fit, write_dataset
from dhwt.training.trainer import Trainer


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,40,120", help="ensemble sizes, comma separated")
    parser.add_argument("--steps", type=int, default=200, help="steps timed per size")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizes = [int(x) for x in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "exor"
        write_dataset(load_language("parity", {"strings": "paper"}), data)
        task = load_task(data, "mlm")
        rows = []
        for size in sizes:
            config = TrainConfig(seeds=list(range(42, 42 + size)), steps=10**9)
            trainer = Trainer([(config, Path(tmp) / f"s{size}")], task)
            for _ in range(10):
                trainer._update()  # warm-up
            start = time.perf_counter()
            for _ in range(args.steps):
                trainer._update()
            rate = args.steps / (time.perf_counter() - start)
            start = time.perf_counter()
            population_fit(trainer.model, task.truth)
            population = time.perf_counter() - start
            rows.append((size, rate, population))
    base = rows[0][1] * rows[0][0]
    print(f"{cpu_model()}, 1 thread, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
          f"cores; {args.steps} steps per size")
    print("| members | steps/s | run-steps/s | vs S = 1 | one population evaluation |")
    print("|---:|---:|---:|---:|---:|")
    for size, rate, population in rows:
        print(f"| {size} | {rate:.1f} | {size * rate:,.0f} | {size * rate / base:.1f}x | "
              f"{population:.2f} s (= {population * rate:.0f} steps) |")


if __name__ == "__main__":
    main()
