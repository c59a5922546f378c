"""Where Newton moves one job's fit (a probe, not part of the plan): each parameter's norm where
Adam and L-BFGS end and after --newton-steps of trust-region Newton (dhwt.training.newton), and
how far it moved, so that one sees which directions the polish keeps lowering F along.

    python experiments/dh_demand/newton_path.py --d 4 --newton-steps 300
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from dhwt.training.population import fit_population
from run import OPTIONS, job_arguments, job_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    job_arguments(parser)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--newton-steps", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    _, batch, model = job_model(args.d, args.arm, args.pattern, args.dose, args.draw, [args.seed])
    began = time.perf_counter()
    lbfgs = fit_population(model, batch, OPTIONS)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    print(f"{vars(args)}\nL-BFGS's end ({time.perf_counter() - began:.0f} s): F "
          f"{lbfgs.objective[0]:.6f}, gradient norm {lbfgs.grad_norm[0]:.3g}")
    began = time.perf_counter()
    newton = fit_population(model, batch, dataclasses.replace(
        OPTIONS, adam_steps=0, lbfgs_steps=0, newton_steps=args.newton_steps))
    print(f"Newton's end ({time.perf_counter() - began:.0f} s, {newton.newton_iterations[0]} "
          f"iterations): F {newton.objective[0]:.6f}, gradient norm {newton.grad_norm[0]:.3g}, "
          f"smallest Hessian eigenvalue {newton.min_eigenvalue[0]:.3g}")
    print(f"{'parameter':32s} {'norm before':>12s} {'norm after':>12s} {'moved':>9s}")
    for name, p in model.named_parameters():
        print(f"{name:32s} {before[name].norm():12.4f} {p.detach().norm():12.4f} "
              f"{(p.detach() - before[name]).norm():9.4f}")


if __name__ == "__main__":
    main()
