"""Fit the demand study's cells to their exact population objectives (README.md: the plan).

A job is (d, arm, pattern, dose, draw): the K 16 demand language of that pattern, dose and draw
(dhwt.languages.demand) read as a causal LM, a 1-layer pre-LN transformer of width d without a
final LayerNorm (the capacity study's model), tied or untied, with RESTARTS members (seeds 0 and
1) fitted by dhwt.training.population (Adam in float32, then L-BFGS in float64 member by member).
Each job writes OUT/cells/NAME.json when it ends: the certificate of every member, the
language's Bayes cross-entropy, its start and end time (UTC) and the commit it ran from. A job
whose file exists is skipped, so a killed study continues; jobs run in the plan's order, and
--worker i of --workers n takes every n-th, so two processes share one study.

    python experiments/dh_demand/run.py --out runs/dh-demand --worker 0 --workers 2 &
    python experiments/dh_demand/run.py --out runs/dh-demand --worker 1 --workers 2
    python experiments/dh_demand/analyse.py runs/dh-demand
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from dhwt.directories import atomic_path
from dhwt import compute_truth, load_language
from dhwt.languages.population import population_batch
from dhwt.models import ModelConfig, build_model
from dhwt.training.population import PopulationOptions, fit_population

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from bench_knn import cpu_model  # noqa: E402

K = 16
#: The languages: (pattern, dose). The factorial (three patterns x doses 0 and 1), then the
#: dose family's inner points (ratio at 0.25 and 0.5).
LANGUAGES = tuple((p, dose) for dose in (0.0, 1.0) for p in ("equal", "constant", "ratio")) + (
    ("ratio", 0.25), ("ratio", 0.5))
DRAWS = (0, 1, 2, 3, 4)
#: Widths in the order they run: K/d 4 first (the primary cells), then K/d 2.
WIDTHS = (4, 8)
ARMS = ("tied", "untied")
RESTARTS = (0, 1)
MODEL = dict(n_layers=1, n_heads=1, norm="pre", final_norm=False, positions="learned",
             causal=True)
OPTIONS = PopulationOptions(adam_steps=1000, lr=1e-2, lbfgs_steps=2000, history=50, l2=1e-4,
                            tolerance=1e-6, window=100)


def jobs() -> list[tuple[int, str, str, float, int]]:
    """Every job of the plan, in the order they run."""
    return [(d, arm, pattern, dose, draw) for d in WIDTHS for draw in DRAWS
            for pattern, dose in LANGUAGES for arm in ARMS]


def job_name(d: int, arm: str, pattern: str, dose: float, draw: int) -> str:
    return f"k{K}-d{d}-{pattern}-dose{dose:g}-draw{draw}-{arm}"


def commit() -> tuple[str, bool]:
    """(HEAD's hash, whether the work tree differs from it)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True,
                              cwd=Path(__file__).parent).stdout.strip()
    return git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))


def job_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags naming one job (its d, arm, pattern, dose and draw), for the probes of a job
    (certify.py, newton_path.py); defaults: the d 4 tied ratio job at dose 0, draw 0."""
    parser.add_argument("--d", type=int, default=4)
    parser.add_argument("--arm", choices=ARMS, default="tied")
    parser.add_argument("--pattern", choices=("equal", "constant", "ratio"), default="ratio")
    parser.add_argument("--dose", type=float, default=0.0)
    parser.add_argument("--draw", type=int, default=0)


def job_model(d: int, arm: str, pattern: str, dose: float, draw: int, seeds: list[int]):
    """(language, its population batch, the unfitted model of `seeds`) of one job."""
    language = load_language("demand", {"k": K, "pattern": pattern, "dose": dose, "draw": draw})
    batch = population_batch(language, "clm")
    config = ModelConfig(vocab_size=len(language.vocab("clm")), max_len=batch.inputs.shape[1],
                         d_model=d, d_ff=4 * d, **MODEL)
    return language, batch, build_model(config, seeds, tied=arm == "tied")


def fit_job(d: int, arm: str, pattern: str, dose: float, draw: int) -> dict:
    """The record of one fitted job."""
    spec = {"k": K, "pattern": pattern, "dose": dose, "draw": draw}
    language, batch, model = job_model(d, arm, pattern, dose, draw, list(RESTARTS))
    head, dirty = commit()
    start = datetime.now(timezone.utc)
    certificate = fit_population(model, batch, OPTIONS)
    end = datetime.now(timezone.utc)
    return {"language": spec, "d": d, "arm": arm, "seeds": list(RESTARTS),
            "bayes": compute_truth(language, "clm").bayes_cross_entropy,
            "objective": certificate.objective.tolist(),
            "cross_entropy": certificate.cross_entropy.tolist(),
            "grad_norm": certificate.grad_norm.tolist(), "drift": certificate.drift.tolist(),
            "iterations": certificate.iterations,
            "options": {k: str(v) for k, v in vars(OPTIONS).items()},
            "start_utc": start.isoformat(timespec="seconds"),
            "end_utc": end.isoformat(timespec="seconds"), "commit": head, "dirty": dirty,
            "cpu": cpu_model(), "threads": torch.get_num_threads(),
            "torch": torch.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--worker", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cells = args.out / "cells"
    cells.mkdir(parents=True, exist_ok=True)
    plan = jobs()[args.worker::args.workers]
    for i, job in enumerate(plan):
        path = cells / f"{job_name(*job)}.json"
        if path.exists():
            continue
        began = time.perf_counter()
        record = fit_job(*job)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(record, indent=1) + "\n")
        print(f"[{i + 1}/{len(plan)}] {path.stem}: {time.perf_counter() - began:.0f} s, excess "
              + ", ".join(f"{c - record['bayes']:.4f}" for c in record["cross_entropy"]),
              file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
