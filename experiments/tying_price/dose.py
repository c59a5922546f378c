"""The price of tying against the skew of one pair: train the grid, one ensemble per cell.

A cell is (language, c, output bias); its ensemble holds the tied and the untied run, --seeds
members each, trained on every string of the language (no held-out split: the question is the
fit of the population) with the exact population fit recorded every --every steps. The language
is pair-ratio.toml: s1 : s2 at 1 : c after `a`, and after `b`

  constant  1 : c as well: the ratio is the same in every context (T5: a bias absorbs it);
  conflict  1 : 1: the ratio depends on the context (sem, not cnd, in a causal LM only);

each read as a masked (mlm) and a causal (clm) LM.

Run (the analysis is analyse.py; the time a grid takes is in README.md):
    python experiments/tying_price/dose.py --out runs/tying-price
    python experiments/tying_price/dose.py --out runs/tying-price-frozen --frozen-norm
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from dhwt import TrainConfig, load_language, load_task, train_group, write_dataset
from dhwt.runs.run import is_finished

HERE = Path(__file__).parent
GRAMMAR = str(HERE / "pair-ratio.toml")
RATIOS = (1, 2, 4, 9, 24, 99)
LANGUAGES = ("constant-mlm", "constant-clm", "conflict-mlm", "conflict-clm")


def overrides(language: str, c: float) -> dict[str, float]:
    """The spec overrides that put s1 : s2 at 1 : c after `a` and, for `constant`, after `b`."""
    after_b = c if language.startswith("constant") else 1
    return {"states.A.0.p": 1 / (1 + c), "states.A.1.p": c / (1 + c),
            "states.B.0.p": 1 / (1 + after_b), "states.B.1.p": after_b / (1 + after_b)}
#: A transformer that learns 4-bit EXor reliably (dhwt.theory.exor.TRAINING), weight decay 0.1.
MODEL = dict(d_model=16, d_ff=16, n_layers=2, n_heads=4, lr=1e-2, lr_min=1e-3,
             lr_schedule="cosine", batch_size=None, weight_decay=0.1, threads=1)


def cell_dir(out: Path, language: str, c: int, bias: bool) -> Path:
    return out / f"{language}-c{c}-{'bias' if bias else 'nobias'}"


def train_cell(out: Path, language: str, c: int, bias: bool, seeds: int, steps: int,
               every: int, frozen_norm: bool) -> None:
    """Train the tied and the untied run of one cell as one ensemble (skipped when done)."""
    where = cell_dir(out, language, c, bias)
    if is_finished(where / "untied"):
        return
    write_dataset(load_language(GRAMMAR, overrides(language, c)), where / "data",
                  valid_fraction=0.0, test_fraction=0.0, seed=14)
    objective = language.split("-")[1]
    task = load_task(where / "data", objective)
    runs = [(TrainConfig(grammar=None, data=str(where / "data"), objective=objective,
                         valid_fraction=0.0, test_fraction=0.0, seeds=list(range(seeds)),
                         tie_schedule=schedule, output_bias=bias, norm_affine=not frozen_norm,
                         steps=steps, eval_every=every, population_every=every,
                         snapshot_every=steps, checkpoint_every=steps, **MODEL),
             where / schedule) for schedule in ("tied", "untied")]
    train_group(runs, task)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--languages", default=",".join(LANGUAGES))
    parser.add_argument("--ratios", default=",".join(map(str, RATIOS)))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--frozen-norm", action="store_true",
                        help="LayerNorm gain and bias fixed at 1 and 0 (||h|| = sqrt(d))")
    args = parser.parse_args()
    cells = itertools.product(args.languages.split(","), map(int, args.ratios.split(",")),
                              (False, True))
    for language, c, bias in cells:
        train_cell(args.out, language, c, bias, args.seeds, args.steps, args.every,
                   args.frozen_norm)
        print(f"done {language} c={c} bias={bias}", flush=True)


if __name__ == "__main__":
    main()
