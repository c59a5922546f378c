"""The input side's factorial (issue 32 item 2): train every cell as an ordinary `dhwt train` run.

    python experiments/input_side/factorial.py OUT [--jobs N] [--only SUBSTRING ...]

Cells: language {exor4 (4-bit EXor, masked LM), four (synthetic/four-cases.toml, causal LM)} x
optimizer {adamw, sgd0.3} x weight decay level {0, 0.1, 0.3, 0.67} x init {random, symmetric},
of which the 20 in CELLS (AdamW from a random init at every level; SGD and the symmetric inits
at levels 0 and 0.67); each cell is one untied run of 5 seeds (42-46, one ensemble) with the
main job's model (2 layers, d_model 32, d_ff 64, 4 heads, post-LN, no positions, N(0, 1)
embeddings, full batch), 3,000 steps, cosine lr (AdamW 3e-3 -> 3e-4 as the main job; plain SGD
0.3 -> 0.03, its weight decay scaled to the same decay per step, see README.md). "symmetric"
starts the twin input rows equal (symmetric_init). Run directories:
OUT/runs/LANGUAGE/OPTIMIZER-wdLEVEL-INIT, datasets OUT/data-LANGUAGE, configs OUT/configs.

Resumable: a finished run is skipped, an unfinished one continues with `--resume`, so the same
command after a kill goes on where it stopped. `--jobs N` trains N runs at a time (one thread
each). Analysis: analyse.py.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # dhwt from this checkout, as the runs use
LANGUAGES = {
    "exor4": dict(grammar="parity", set=["n_bits=4"], objective="mlm",
                  twins=[["0a", "0b"], ["1a", "1b"]]),
    "four": dict(grammar=str(ROOT / "synthetic" / "four-cases.toml"), set=[], objective="clm",
                 twins=[["a1", "a2"], ["b1", "b2"]]),
}
#: name -> (optimizer, peak lr); every schedule falls to a tenth of its peak.
OPTIMIZERS = {"adamw": ("adamw", 3e-3), "sgd0.3": ("sgd", 0.3)}
#: The lr at which a weight decay level is AdamW's weight_decay; other lrs get level * this / lr,
#: so that every optimizer shrinks a row without gradient by the same factor each step.
DECAY_LR = 3e-3
WEIGHT_DECAYS = (0.0, 0.1, 0.3, 0.67)
INITS = ("random", "symmetric")
STEPS = 3000
BASE = dict(tie_schedule="untied", seeds="42-46", d_model=32, d_ff=64, n_layers=2, n_heads=4,
            steps=STEPS, lr_schedule="cosine", eval_every=250, population_every=250,
            snapshot_every=250, checkpoint_every=500, threads=1)


def cells() -> list[tuple[str, str, float, str]]:
    """(language, optimizer, weight decay level, init) of the cells trained, the most telling
    first (AdamW from a random init), so that a run cut short still answers the question."""
    ends = (WEIGHT_DECAYS[0], WEIGHT_DECAYS[-1])
    chosen = [("adamw", wd, "random") for wd in WEIGHT_DECAYS]
    chosen += [("sgd0.3", wd, "random") for wd in ends]
    chosen += [(opt, wd, "symmetric") for opt in OPTIMIZERS for wd in ends]
    return [(lang, *cell) for cell in chosen for lang in LANGUAGES]


def cell_name(optimizer: str, wd: float, init: str) -> str:
    return f"{optimizer}-wd{wd:g}-{init}"


def toml_value(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return repr(value)


def dhwt(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "dhwt", *args], env=env, capture_output=True,
                          text=True)


def finished(run: Path, steps: int) -> bool:
    """True when the run trained all `steps` (its report, written last, is on disk)."""
    from dhwt.runs.run import is_finished, load_run

    return is_finished(run) and load_run(run).config.optim.steps == steps


def train_cell(out: Path, steps: int, language: str, optimizer: str, wd: float,
               init: str) -> str:
    spec = LANGUAGES[language]
    run = out / "runs" / language / cell_name(optimizer, wd, init)
    if finished(run, steps):
        return f"{run}: done already"
    kind, lr = OPTIMIZERS[optimizer]
    settings = {**BASE, "steps": steps, "optimizer": kind, "lr": lr, "lr_min": lr / 10,
                "weight_decay": wd * DECAY_LR / lr,
                "objective": spec["objective"], "data": str(out / f"data-{language}")}
    if init == "symmetric":
        settings["symmetric_init"] = spec["twins"]
    config = out / "configs" / language / f"{cell_name(optimizer, wd, init)}.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in settings.items()))
    run.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    done = dhwt("train", "--config", str(config), "--out", str(run),
                *(["--resume"] if run.exists() else []))
    if done.returncode:
        return f"{run}: FAILED: {done.stderr.strip().splitlines()[-1:]}"
    return f"{run}: trained in {time.perf_counter() - start:.0f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=STEPS, help="fewer for a smoke test")
    parser.add_argument("--only", nargs="*", default=[],
                        help="train only cells whose LANGUAGE/CELL name contains one of these")
    args = parser.parse_args()
    out = args.out.resolve()
    for language, spec in LANGUAGES.items():
        data = out / f"data-{language}"
        if not (data / "truth.json").is_file():
            made = dhwt("synth", "--grammar", spec["grammar"], *[a for s in spec["set"]
                        for a in ("--set", s)], "--out", str(data), "--valid-fraction", "0",
                        "--test-fraction", "0")
            if made.returncode:
                sys.exit(made.stderr)
    chosen = [c for c in cells() if not args.only or any(
        s in f"{c[0]}/{cell_name(*c[1:])}" for s in args.only)]
    with ThreadPoolExecutor(args.jobs) as pool:
        for line in pool.map(lambda c: train_cell(out, args.steps, *c), chosen):
            print(line, flush=True)


if __name__ == "__main__":
    main()
