"""Time one demand cell fitted to its exact population objective (dhwt.training.population)
against the full-batch trainer's time to the same excess, and say how many members are certified.

A cell: the demand language (K, pattern, dose, draw), a 1-layer pre-LN transformer of width d
without a final LayerNorm (the capacity study's model), tied and untied, --seeds members each.
The population fit: Adam then L-BFGS member by member on CE + l2/2 ||θ||², float64; a member is
certified when its gradient norm is below --grad and its objective fell by less than --drift
over the last 100 L-BFGS iterations. The trainer: dhwt's trainer (AdamW, full batch, every
string in training, cosine lr 1e-2 to 1e-3, AdamW's decoupled weight decay --l2: not the same
objective as the L2 term, which at 1e-2 regularises far more), its exact excess recorded every
--every steps; its time to the same excess is the time of the first evaluation at which every
member is within --within nats of the population fit's median excess of its arm (or "not
reached" within --trainer-steps).

    python experiments/benchmarks/bench_population.py --k 16 --d 8 --seeds 20
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from dhwt import (TrainConfig, compute_truth, load_language, load_run, load_task, train_group,
                  write_dataset)
from dhwt.languages.population import population_batch
from dhwt.models import ModelConfig, build_model
from dhwt.training.population import PopulationOptions, fit_population, restart_gaps

sys.path.insert(0, str(Path(__file__).parent))
from bench_knn import cpu_model  # noqa: E402

MODEL = dict(n_layers=1, n_heads=1, norm="pre", final_norm=False, positions="learned")


def population_arm(language, k: int, d: int, seeds: int, tied: bool, options):
    """(seconds, certificate) of one arm fitted to the population objective."""
    batch = population_batch(language, "clm")
    config = ModelConfig(vocab_size=len(language.vocab("clm")), max_len=batch.inputs.shape[1],
                         d_model=d, d_ff=4 * d, causal=True, **MODEL)
    model = build_model(config, list(range(seeds)), tied=tied)
    start = time.perf_counter()
    certificate = fit_population(model, batch, options)
    return time.perf_counter() - start, certificate


def trainer_arms(language, where: Path, d: int, seeds: int, steps: int, every: int, decay: float):
    """(seconds, {arm: [(step, excess (S,))]}) of the tied and untied arms trained as one group."""
    write_dataset(language, where / "data", valid_fraction=0.0, test_fraction=0.0, seed=14)
    task = load_task(where / "data", "clm")
    configs = [(TrainConfig(grammar=None, data=str(where / "data"), objective="clm",
                            valid_fraction=0.0, test_fraction=0.0, seeds=list(range(seeds)),
                            tie_schedule=arm, d_model=d, d_ff=4 * d, weight_decay=decay,
                            steps=steps, eval_every=every, population_every=every,
                            snapshot_every=steps, checkpoint_every=steps, lr=1e-2, lr_min=1e-3,
                            lr_schedule="cosine", batch_size=None, threads=torch.get_num_threads(),
                            **MODEL), where / arm) for arm in ("tied", "untied")]
    start = time.perf_counter()
    train_group(configs, task)
    seconds = time.perf_counter() - start
    bayes = task.truth.bayes_cross_entropy
    curves = {}
    for arm in ("tied", "untied"):
        rows = [r for r in load_run(where / arm).metrics() if r["split"] == "population"]
        by_step: dict[int, list[float]] = {}
        for r in rows:
            by_step.setdefault(int(r["step"]), []).append(float(r["loss"]) - bayes)
        curves[arm] = sorted((s, np.array(v)) for s, v in by_step.items())
    return seconds, curves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--d", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--pattern", default="ratio")
    parser.add_argument("--dose", type=float, default=0.0)
    parser.add_argument("--draw", type=int, default=0)
    parser.add_argument("--l2", type=float, default=1e-2)
    parser.add_argument("--adam-steps", type=int, default=2000)
    parser.add_argument("--lbfgs-steps", type=int, default=2000)
    parser.add_argument("--grad", type=float, default=1e-2, help="certified: gradient norm below")
    parser.add_argument("--drift", type=float, default=1e-4,
                        help="certified: objective fall over the last 100 iterations below")
    parser.add_argument("--trainer-steps", type=int, default=6000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--within", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    language = load_language("demand", {"k": args.k, "pattern": args.pattern, "dose": args.dose,
                                        "draw": args.draw})
    bayes = compute_truth(language, "clm").bayes_cross_entropy
    print(f"{cpu_model()}, {args.threads} threads, torch {torch.__version__}; demand K {args.k} "
          f"{args.pattern} dose {args.dose:g} draw {args.draw}, d {args.d}, {args.seeds} seeds "
          "an arm", flush=True)
    options = PopulationOptions(adam_steps=args.adam_steps, lbfgs_steps=args.lbfgs_steps,
                                l2=args.l2)
    targets, total = {}, 0.0
    for arm in ("tied", "untied"):
        seconds, cert = population_arm(language, args.k, args.d, args.seeds, arm == "tied",
                                       options)
        total += seconds
        excess = cert.cross_entropy - bayes
        targets[arm] = float(np.median(excess))
        certified = int(((cert.grad_norm < args.grad) & (cert.drift < args.drift)).sum())
        best = int((restart_gaps(cert.objective, np.zeros(args.seeds)) < args.drift).sum())
        print(f"population {arm}: {seconds:.1f} s; excess median {np.median(excess):.4f} "
              f"[{excess.min():.4f}, {excess.max():.4f}]; certified {certified} of {args.seeds} "
              f"(grad < {args.grad:g}, drift < {args.drift:g}); grad median "
              f"{np.median(cert.grad_norm):.2e}; within {args.drift:g} of the best restart "
              f"{best} of {args.seeds}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        seconds, curves = trainer_arms(language, Path(folder), args.d, args.seeds,
                                       args.trainer_steps, args.every, args.l2)
    per_step = seconds / args.trainer_steps
    reached = []
    for arm, curve in curves.items():
        step = next((s for s, e in curve if (e <= targets[arm] + args.within).all()), None)
        last = curve[-1][1]
        reached.append(step)
        print(f"trainer {arm}: excess at step {curve[-1][0]} median {np.median(last):.4f} "
              f"[{last.min():.4f}, {last.max():.4f}]; every member within {args.within:g} of "
              f"the population median: " + ("not reached" if step is None else f"step {step}"),
              flush=True)
    print(f"cell (both arms): population {total:.1f} s; trainer {seconds:.1f} s for "
          f"{args.trainer_steps} steps", end="")
    if all(s is not None for s in reached):
        at = max(reached) * per_step
        print(f", to the same excess {at:.1f} s: ratio trainer / population {at / total:.2f}")
    else:
        print("; the trainer did not reach the population fit's excess: no ratio")


if __name__ == "__main__":
    main()
