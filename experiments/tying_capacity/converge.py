"""Train cells of the capacity grid until a stated criterion holds, not for a fixed step.

A cell is run.py's (the tied and the untied run of one language, K, d, decay and bias, trained
as one ensemble so that a seed's members share their initial input table), here on one fixed
cosine from lr 1e-2 to 1e-3 over --cap steps ("periodic-cosine" with lr_period = --cap: its lr
at a step does not depend on how long the run is, so extending a run changes no step it has
taken, unlike "cosine", which is recomputed over the extended length). The cell trains
--segment steps as one ensemble, then is extended --segment steps at a time as the same ensemble
(dhwt.training.runner extends a group's runs together, so on the CPU the cell ends bit for bit as
one uninterrupted run); after each segment from --min-steps on, the criterion (README.md,
"Convergence-driven rerun") is read off the exact population fits of the last 20% of steps (with
--mean-of M, the second protocol's: each seed's price averaged over the last M fits against its
average over the M fits ending at 80% of the steps). The cell stops when it holds or at --cap,
and CELL/stopped.json records which and the movements it read. A killed process continues where
it stopped: stopped cells are skipped, the others resume from their last checkpoint, which on
the CPU ends exactly as an uninterrupted run would; a cell stopped mid-extension continues as
one ensemble (extend), also one that an earlier converge.py, which extended the runs one by one,
left with one run extended.

    python experiments/tying_capacity/converge.py --out runs/tying-capacity-converge
    python experiments/tying_capacity/analyse.py runs/tying-capacity-converge --name converge
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from dhwt import TrainConfig, train_group, train_run
from dhwt.languages import Task, load_task, write_dataset
from dhwt.languages.language import language_from_spec
from dhwt.runs.checkpoints import list_checkpoints
from dhwt.runs.layout import run_paths
from dhwt.runs.run import is_finished

sys.path.insert(0, str(Path(__file__).parent))
from analyse import window_start  # noqa: E402
from languages import spec  # noqa: E402
from run import cell_configs, cell_dir  # noqa: E402

#: The declared order (README.md): d 4 without a bias, d 4 with one, d 8 without.
PLAN = tuple((language, 16, 4, 0.1, False) for language in
             ("control-clm", "cnd-clm", "ratio-clm", "sem-clm")) \
    + tuple((language, 16, 4, 0.1, True) for language in
            ("control-clm", "cnd-clm", "ratio-clm", "sem-clm")) \
    + tuple((language, 16, 8, 0.1, False) for language in ("control-clm", "ratio-clm"))
#: The criterion (nats): every seed's price moves by less than PRICE_TOLERANCE (a fifth of
#: the declared margin 0.005) over the last fifth of the steps trained (analyse.WINDOW); the
#: first criterion (every member's excess within EXCESS_TOLERANCE) is reported beside it.
PRICE_TOLERANCE = 0.001
EXCESS_TOLERANCE = 1e-3
STOPPED = "stopped.json"


def population(run: Path, bayes: float) -> dict[int, dict[int, float]]:
    """{step: {seed: exact excess}} of every population evaluation of a run."""
    from dhwt import load_run

    found: dict[int, dict[int, float]] = {}
    for row in load_run(run).metrics():
        if row["split"] == "population":
            found.setdefault(row["step"], {})[row["seed"]] = row["loss"] - bayes
    return found


def criterion(where: Path, objective: str, mean_of: int = 1) -> dict[str, object]:
    """At the runs' last step N: each seed's price range and each member's excess range over
    the evaluations from where the window opens (analyse.window_start) to N, and whether each is
    within its tolerance; with `mean_of` M > 1 also each seed's shift, |mean price over the
    last M evaluations - mean over the M ending where it opens|, and whether it is
    within PRICE_TOLERANCE (the second protocol's criterion)."""
    bayes = json.loads((where / "data" / "truth.json").read_text()
                       )["objectives"][objective]["bayes_cross_entropy_nats"]
    tied, untied = population(where / "tied", bayes), population(where / "untied", bayes)
    every = sorted(tied)
    last, early = every[-1], window_start(every)
    steps = [s for s in every if s >= early]
    seeds = sorted(tied[last])
    price = np.array([[tied[s][seed] - untied[s][seed] for seed in seeds] for s in every])
    excess = np.array([[run[s][seed] for run in (tied, untied) for seed in seeds]
                       for s in steps])
    price_range = np.ptp(price[every.index(early):], axis=0)
    excess_range = np.ptp(excess, axis=0)
    shifted = {}
    if mean_of > 1:
        at = every.index(early) + 1
        shift = np.abs(price[-mean_of:].mean(axis=0) - price[max(at - mean_of, 0):at].mean(axis=0))
        shifted = {"mean_of": mean_of, "price_shift_max": float(shift.max()),
                   "shift_met": bool((shift < PRICE_TOLERANCE).all()),
                   "seeds_shift_met": int((shift < PRICE_TOLERANCE).sum())}
    return {"step": last, "window": [steps[0], last],
            "price_range_max": float(price_range.max()),
            "excess_range_max": float(excess_range.max()),
            "price_met": bool((price_range < PRICE_TOLERANCE).all()),
            "excess_met": bool((excess_range < EXCESS_TOLERANCE).all()),
            "seeds_price_met": int((price_range < PRICE_TOLERANCE).sum()),
            "members_excess_met": int((excess_range < EXCESS_TOLERANCE).sum()), **shifted}


def configs(where: Path, objective: str, d: int, decay: float, bias: bool, seeds: int,
            device: str, steps: int, segment: int, every: int, cap: int, lr: float = 1e-2,
            lr_min: float = 1e-3) -> list[tuple[TrainConfig, Path]]:
    """A cell's runs to `steps` on the fixed schedule of `cap` steps (a cosine from `lr` to
    `lr_min`), saved every segment."""
    return cell_configs(where, objective, d, decay, bias, seeds, steps, every, segment,
                        lr_schedule="periodic-cosine", lr_period=cap, device=device, lr=lr,
                        lr_min=lr_min)


def trained_steps(run: Path) -> int:
    """The steps a run is configured for (0 if it does not exist yet)."""
    config = run_paths(run).config
    return TrainConfig.from_toml(config).optim.steps if config.is_file() else 0


def converge_cell(out: Path, language: str, k: int, d: int, decay: float, bias: bool,
                  seeds: int, segment: int, min_steps: int, cap: int, every: int,
                  device: str = "cpu", log=print, lr: float = 1e-2, lr_min: float = 1e-3,
                  mean_of: int = 1) -> dict[str, object] | None:
    """Train one cell until the criterion holds (with `mean_of` > 1 the second protocol's) or
    `cap`; its stopped.json, None if it had stopped already."""
    where = cell_dir(out, language, k, d, decay, bias)
    if (where / STOPPED).is_file():
        return None
    kind, objective = language.split("-")
    if not (where / "data" / "truth.json").is_file():
        write_dataset(language_from_spec(spec(kind, k, tail=objective == "clm"), language),
                      where / "data", valid_fraction=0.0, test_fraction=0.0, seed=14,
                      overwrite=True)
    task = load_task(where / "data", objective)
    args = (where, objective, d, decay, bias, seeds, device)
    timing = where / "segments.jsonl"
    schedule = {"lr": lr, "lr_min": lr_min}
    first = configs(*args, segment, segment, every, cap, **schedule)
    resumed = all(list_checkpoints(run_paths(run).checkpoints) for _, run in first)
    if not resumed:
        start = time.time()
        train_group(first, task, overwrite=True)
        _note(timing, segment, time.time() - start)
    steps = max(trained_steps(run) for _, run in first)
    while True:
        start = time.time()
        if resumed:
            extend(configs(*args, steps, segment, every, cap, **schedule), task)
            _note(timing, steps, time.time() - start)
        resumed = True
        found = criterion(where, objective, mean_of) if steps >= min_steps else None
        met = None if found is None else found["shift_met" if mean_of > 1 else "price_met"]
        log(f"{where.name} step {steps}: "
            + ("" if found is None else
               f"price range {found['price_range_max']:.4f}, excess range "
               f"{found['excess_range_max']:.4f}"
               + (f", price shift {found['price_shift_max']:.4f}" if mean_of > 1 else ""))
            + f" ({time.time() - start:.0f} s)")
        if found is not None and (met or steps >= cap):
            found["stopped"] = "criterion" if met else "cap"
            found["seconds"] = round(sum(json.loads(line)["seconds"]
                                         for line in timing.read_text().splitlines()), 1)
            (where / f"{STOPPED}.tmp").write_text(json.dumps(found, indent=1) + "\n")
            (where / f"{STOPPED}.tmp").replace(where / STOPPED)
            return found
        steps = min(steps + segment, cap)


def extend(runs: list[tuple[TrainConfig, Path]], task: Task) -> None:
    """Train a cell's runs to their configs' steps as one ensemble (an extension, or the
    resume of one a process stopped); where one run has finished those steps and the other has
    not (an earlier converge.py extended the runs one by one, and dhwt extends a group only as a
    whole), the other trains on its own."""
    finished = [is_finished(run) and trained_steps(run) == config.optim.steps
                for config, run in runs]
    if any(finished) and not all(finished):
        for (config, run), done in zip(runs, finished):
            if not done:
                train_run(config, task, run, resume=True)
    else:
        train_group(runs, task, resume=True)


def _note(timing: Path, steps: int, seconds: float) -> None:
    with open(timing, "a") as handle:
        handle.write(json.dumps({"steps": steps, "seconds": round(seconds, 1)}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cells", type=int, default=len(PLAN),
                        help="the first N cells of the declared order")
    parser.add_argument("--cell", action="append", default=[], metavar="LANGUAGE:K:D:DECAY:BIAS",
                        help="train this cell instead of the declared order (bias yes or no, "
                             "e.g. cnd-clm:64:4:0.1:no); repeatable")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--segment", type=int, default=1000)
    parser.add_argument("--min-steps", type=int, default=2000)
    parser.add_argument("--cap", type=int, default=6000,
                        help="the most steps, and the length of the cosine")
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--lr", type=float, default=1e-2, help="the cosine's peak")
    parser.add_argument("--lr-min", type=float, default=1e-3, help="the cosine's floor")
    parser.add_argument("--mean-of", type=int, default=1,
                        help="the second protocol's criterion: each seed's price averaged over "
                             "this many evaluations (1: the first protocol's range)")
    args = parser.parse_args()
    cells = [(language, int(k), int(d), float(decay), bias == "yes") for language, k, d, decay, bias
             in (cell.split(":") for cell in args.cell)] or PLAN[:args.cells]
    for language, k, d, decay, bias in cells:
        start = time.time()
        found = converge_cell(args.out, language, k, d, decay, bias, args.seeds, args.segment,
                              args.min_steps, args.cap, args.every, args.device,
                              log=lambda line: print(line, flush=True), lr=args.lr,
                              lr_min=args.lr_min, mean_of=args.mean_of)
        if found is not None:
            print(f"stopped {language} k={k} d={d} wd={decay:g} bias={bias} at step "
                  f"{found['step']} by the {found['stopped']} in {time.time() - start:.0f} s",
                  flush=True)


if __name__ == "__main__":
    main()
