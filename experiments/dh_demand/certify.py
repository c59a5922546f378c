"""Refit one job of the plan (run.py) with a Newton polish after its Adam and L-BFGS phases, and
print where L-BFGS ended and where Newton did: the fall past L-BFGS, the gradient norm and the
Hessian's smallest eigenvalue (dhwt.training.newton). A probe of what run.py's fits are, not
part of the plan: one job, the restarts given.

    python experiments/dh_demand/certify.py --d 4 --arm tied --pattern ratio --dose 0 --draw 0
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

from dhwt.training.population import fit_population
from run import OPTIONS, job_arguments, job_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    job_arguments(parser)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--newton-steps", type=int, default=100)
    parser.add_argument("--l2", type=float, default=OPTIONS.l2,
                        help=f"the L2 weight of the objective (the plan's: {OPTIONS.l2:g})")
    args = parser.parse_args()
    torch.set_num_threads(1)
    _, batch, model = job_model(args.d, args.arm, args.pattern, args.dose, args.draw, args.seeds)
    options = dataclasses.replace(OPTIONS, newton_steps=args.newton_steps, l2=args.l2)
    began = time.perf_counter()
    cert = fit_population(model, batch, options)
    print(json.dumps({"job": vars(args), "seconds": round(time.perf_counter() - began),
                      **{k: v.tolist() for k, v in vars(cert).items()}}, indent=1))


if __name__ == "__main__":
    main()
