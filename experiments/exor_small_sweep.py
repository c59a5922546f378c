"""How the main job's settings were chosen: which settings make the predicted split visible.

    python experiments/exor_small_sweep.py OUT_DIR [NAME ...]    # default: every setting

For each setting (overrides of BASE, the main job before issue 19), tied and untied are trained
as one ensemble on 4-bit parity (masked LM), and at the last step it prints how many seeds fit
the language (exact cross-entropy within 0.05 nats of the Bayes optimum) and, over those seeds,
the mean normalised distance (distance / mean distance between symbols of different classes)
of 0a-0b and 1a-1b in the tied matrix and in the untied input and output matrices. One line of
JSON per setting is appended to OUT_DIR/sweep.jsonl. Results: experiments/README.md.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

import dhwt
from dhwt import (TrainConfig, load_language, load_task, pair_closeness, population_fit,
                  train_group, write_dataset)

PAIRS = [("0a", "0b"), ("1a", "1b")]
BASELINE = [("0a", "1a"), ("0a", "1b"), ("0b", "1a"), ("0b", "1b")]
BASE = dict(d_model=16, d_ff=16, n_layers=2, n_heads=4, steps=4000, lr=3e-3,
            lr_schedule="cosine", lr_min=3e-4, weight_decay=0.1, seeds=[42, 43, 44, 45, 46],
            eval_every=500, snapshot_every=500, checkpoint_every=500, threads=1)
D32 = dict(d_model=32, d_ff=64)
TEN = dict(seeds=list(range(47, 57)))
SETTINGS = {
    "base": {},
    "wd0.3": dict(weight_decay=0.3),
    "wd1": dict(weight_decay=1.0),
    "wd0.3-10k": dict(weight_decay=0.3, steps=10_000),
    "wd1-10k": dict(weight_decay=1.0, steps=10_000),
    "lr1e-2": dict(lr=1e-2, lr_min=1e-3),
    "10k": dict(steps=10_000),
    "d32": D32,
    "d32-wd0.3": dict(D32, weight_decay=0.3),
    "d32-lr1e-2": dict(D32, lr=1e-2, lr_min=1e-3),
    "d32-10k": dict(D32, steps=10_000),
    "d32-lr6e-3-8k": dict(D32, lr=6e-3, lr_min=6e-4, steps=8000),
    "d32-wd0.15-10k": dict(D32, weight_decay=0.15, steps=10_000),
    "d32-wd0.2-10k": dict(D32, weight_decay=0.2, steps=10_000),  # the main job's choice
    "d32-wd0.2-10k-seeds47-56": dict(D32, weight_decay=0.2, steps=10_000, **TEN),
    "d32-wd0.2-10k-warmup500-seeds47-56": dict(D32, weight_decay=0.2, steps=10_000,
                                               warmup_steps=500, **TEN),
    "d32-wd0.3-10k": dict(D32, weight_decay=0.3, steps=10_000),
    "d32-wd0.2-lr6e-3-6k": dict(D32, weight_decay=0.2, lr=6e-3, lr_min=6e-4, steps=6000),
    "d48-wd0.2-10k-seeds47-56": dict(d_model=48, d_ff=96, weight_decay=0.2, steps=10_000,
                                     **TEN),
}


def measure(run_dir: Path, task) -> dict[str, object]:
    """Seeds at the optimum and their mean normalised pair distances, per matrix."""
    run = dhwt.load_run(run_dir)
    cross_entropy, _ = population_fit(run.model(), task.truth)
    fit = cross_entropy - task.truth.bayes_cross_entropy < 0.05
    snapshot = [run.embeddings()]
    sides = ("input",) if snapshot[0].tied else ("input", "output")
    found: dict[str, object] = {"at_optimum": f"{int(fit.sum())} of {len(fit)}"}
    for side in sides:
        distance = pair_closeness(snapshot, side, PAIRS, BASELINE).normalised[-1]  # (S, P)
        found["tied" if len(sides) == 1 else side] = (
            np.round(distance[fit].mean(axis=0), 2).tolist() if fit.any() else None)
    return found


def main(out: Path, names: list[str]) -> None:
    data = out / "data"
    if not data.exists():
        write_dataset(load_language("parity", {"n_bits": 4}), data, valid_fraction=0.0,
                      test_fraction=0.0)
    task = load_task(data, "mlm")
    for name in names:
        settings = {**BASE, **SETTINGS[name]}
        start = time.perf_counter()
        runs = [(TrainConfig(data=str(data), tie_schedule=schedule, **settings),
                 out / name / schedule) for schedule in ("tied", "untied")]
        train_group(runs, task)
        line = {"setting": name, "overrides": SETTINGS[name],
                "seconds": round(time.perf_counter() - start, 1),
                **{schedule: measure(out / name / schedule, task)
                   for schedule in ("tied", "untied")}}
        print(json.dumps(line), flush=True)
        with open(out / "sweep.jsonl", "a") as fh:
            fh.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    chosen = sys.argv[2:] or list(SETTINGS)
    unknown = [n for n in chosen if n not in SETTINGS]
    if unknown:
        sys.exit(f"unknown setting(s) {unknown}; known: {', '.join(SETTINGS)}")
    main(Path(sys.argv[1]), chosen)
