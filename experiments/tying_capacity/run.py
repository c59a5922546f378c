"""Train the capacity grid: one ensemble (tied and untied runs, --seeds members each) per cell.

A cell is (language, K, d, weight decay, output bias); the languages are languages.py's, read
as a masked (mlm: sem, control) or a causal (clm: sem, cnd, ratio, control) LM; every string is in
training (the question is the fit of the population) and the exact population fit is recorded
every --every steps. A finished cell (its untied run finished) is skipped, an unfinished
one is trained again from the start, so a killed grid continues where it stopped.

    python experiments/tying_capacity/run.py --out runs/tying-capacity
    python experiments/tying_capacity/analyse.py runs/tying-capacity
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

from dhwt import TrainConfig, load_task, train_group, write_dataset
from dhwt.languages.language import language_from_spec
from dhwt.runs.run import is_finished

sys.path.insert(0, str(Path(__file__).parent))
from languages import spec  # noqa: E402

LANGUAGES = ("sem-mlm", "control-mlm", "sem-clm", "cnd-clm", "control-clm")
#: Not in the default plan (added later, run by --languages): the context-dependent ratio.
MORE_LANGUAGES = ("ratio-clm",)
KS = (1, 4, 16)
WIDTHS = (2, 4, 8, 16)
#: (weight decay, output bias): no bias at 0 and 0.1, a bias at 0.1.
SETTINGS = ((0.0, False), (0.1, False), (0.1, True))
#: One pre-LN layer without a final LayerNorm: the hidden states' norm is free, so no
#: LayerNorm caps ||h|| (at d = 2 a post-LN state would take two values only).
MODEL = dict(n_layers=1, n_heads=1, norm="pre", final_norm=False, positions="learned",
             lr=1e-2, lr_min=1e-3, lr_schedule="cosine", batch_size=None, threads=1)


def cell_dir(out: Path, language: str, k: int, d: int, decay: float, bias: bool) -> Path:
    return out / f"{language}-k{k}-d{d}-wd{decay:g}-{'bias' if bias else 'nobias'}"


def train_cell(out: Path, language: str, k: int, d: int, decay: float, bias: bool,
               seeds: int, steps: int, every: int) -> bool:
    """Train the tied and the untied run of one cell as one ensemble; False if already done."""
    where = cell_dir(out, language, k, d, decay, bias)
    if is_finished(where / "untied"):
        return False
    kind, objective = language.split("-")
    write_dataset(language_from_spec(spec(kind, k, tail=objective == "clm"), language),
                  where / "data", valid_fraction=0.0, test_fraction=0.0, seed=14,
                  overwrite=True)
    task = load_task(where / "data", objective)
    train_group(cell_configs(where, objective, d, decay, bias, seeds, steps, every, steps), task,
          overwrite=True)
    return True


def cell_configs(where: Path, objective: str, d: int, decay: float, bias: bool, seeds: int,
                 steps: int, every: int, save_every: int, **model: object
                 ) -> list[tuple[TrainConfig, Path]]:
    """The tied and the untied run of a cell (MODEL, with `model` overriding it): the exact
    population fit every `every` steps, snapshots and checkpoints every `save_every`."""
    model = {**MODEL, **model}
    return [(TrainConfig(grammar=None, data=str(where / "data"), objective=objective,
                         valid_fraction=0.0, test_fraction=0.0, seeds=list(range(seeds)),
                         tie_schedule=schedule, output_bias=bias, d_model=d, d_ff=4 * d,
                         weight_decay=decay, steps=steps, eval_every=every,
                         population_every=every, snapshot_every=save_every,
                         checkpoint_every=save_every, **model),
             where / schedule) for schedule in ("tied", "untied")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--languages", default=",".join(LANGUAGES),
                        help=f"comma list of {', '.join(LANGUAGES + MORE_LANGUAGES)}")
    parser.add_argument("--ks", default=",".join(map(str, KS)))
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    parser.add_argument("--settings", default=",".join(f"{w:g}:{'yes' if b else 'no'}"
                                                       for w, b in SETTINGS),
                        help="weight decay:bias pairs, e.g. 0.1:no,0.1:yes")
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    args = parser.parse_args()
    cells = itertools.product(map(int, args.ks.split(",")), map(int, args.widths.split(",")),
                              [(float(w), b == "yes") for w, b in
                               (s.split(":") for s in args.settings.split(","))],
                              args.languages.split(","))
    for k, d, (decay, bias), language in cells:
        start = time.time()
        if train_cell(args.out, language, k, d, decay, bias, args.seeds, args.steps, args.every):
            print(f"done {language} k={k} d={d} wd={decay:g} bias={bias} "
                  f"in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
