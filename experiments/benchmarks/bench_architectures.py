"""Steps per second of the paper's three EXor models, on the EXor grid size, S = 5 seeds at once.

Models (paper settings, dhwt.models defaults): transformer (1 layer, 1 head, d 4, ff 4, gelu,
post-LN); LSTM (bidirectional, 2 layers, emb 4, hidden 8, projection back to 4); MLP-Mixer
(1 layer, token mixing 4, channel mixing 8, relu, pre-LN). V = 7, full batch of 114 strings x 8
tokens, S = 5 members, tied.

Two timings per architecture:
  model:   one AdamW update (paper settings: lr 5e-4, eps 1e-12, weight decay 0.1) on a fixed
           random EXor-shaped batch: forward, loss, backward, optimizer step;
  trainer: `Trainer._update` on the real EXor task (parity, 7 bits, the paper's 114/12/1 split):
           the same plus drawing each member's variants and masks afresh.
Rounds interleave the architectures so all see the same machine load; the script prints the
median steps/s over rounds, the ratio to the transformer measured in the same run, and the load
average (the machine is shared).

    .venv/bin/python experiments/benchmarks/bench_architectures.py [--steps 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from dhwt import TrainConfig, load_language, load_task, write_dataset
from dhwt.models import ModelConfig, build_model
from dhwt.training.trainer import Trainer

ARCHITECTURES = ("transformer", "lstm", "mixer")
SEEDS = (42, 43, 44, 45, 46)
STRINGS, LENGTH, VOCAB = 114, 8, 7


def model_step(architecture: str) -> Callable[[], None]:
    """One AdamW update of a tied ensemble of SEEDS on a fixed random EXor-shaped batch."""
    config = ModelConfig(vocab_size=VOCAB, max_len=LENGTH, architecture=architecture)
    model = build_model(config, SEEDS, tied=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, eps=1e-12, weight_decay=0.1)
    g = torch.Generator().manual_seed(0)
    members = len(SEEDS)
    inputs = torch.randint(0, VOCAB - 1, (members, STRINGS, LENGTH), generator=g)
    at = torch.arange(LENGTH) == torch.randint(0, LENGTH - 1, (members, STRINGS, 1), generator=g)
    targets = torch.where(at, inputs, -100)
    inputs = torch.where(at, VOCAB - 1, inputs)
    weights = at.float() / STRINGS

    def step() -> None:
        logits = model(inputs)
        ce = F.cross_entropy(logits.permute(0, 3, 1, 2), targets, ignore_index=-100,
                             reduction="none")
        optimizer.zero_grad(set_to_none=True)
        (weights * ce).sum().backward()
        optimizer.step()

    return step


def trainer_step(architecture: str, data: Path, run_dir: Path) -> Callable[[], None]:
    """`Trainer._update` of a tied ensemble of SEEDS on the EXor dataset at `data`."""
    config = TrainConfig(architecture=architecture, seeds=list(SEEDS), steps=10**9)
    trainer = Trainer([(config, run_dir)], load_task(data, "mlm"))
    return trainer._update


def rate(step: Callable[[], None], count: int) -> float:
    """Steps per second over `count` steps."""
    start = time.perf_counter()
    for _ in range(count):
        step()
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps timed per round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (median reported)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (trainer default)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "exor"
        write_dataset(load_language("parity", {"strings": "paper"}), data)
        steps = {}
        for arch in ARCHITECTURES:
            steps[("model", arch)] = model_step(arch)
            steps[("trainer", arch)] = trainer_step(arch, data, Path(tmp) / arch)
        for step in steps.values():
            rate(step, 10)  # warm-up
        rates: dict[tuple[str, str], list[float]] = {key: [] for key in steps}
        for _ in range(args.rounds):
            for key, step in steps.items():
                rates[key].append(rate(step, args.steps))
    print(f"EXor grid: S={len(SEEDS)} tied, {STRINGS}x{LENGTH} full batch, V={VOCAB}, "
          f"threads={torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores; median of {args.rounds} rounds of {args.steps} steps")
    for kind in ("model", "trainer"):
        base = statistics.median(rates[(kind, "transformer")])
        for arch in ARCHITECTURES:
            median = statistics.median(rates[(kind, arch)])
            print(f"{kind:8s} {arch:12s} {median:7.1f} steps/s  ({median / base:.2f}x transformer)")


if __name__ == "__main__":
    main()
