"""Which effects of the pair does the dose-response grid exclude? Equivalence (TOST) from
results.csv.

    python experiments/tying_price/equivalence.py [--margin 0.001] [results.csv]

Per cell (LayerNorm, language, c > 1, bias): the pair's share of the price, price(c) - price(1),
per seed (price = tied minus untied excess; seeds 0-9 in both cells), its mean and 90% Student-t
interval; the two one-sided tests at level 0.05 (TOST) declare the share equivalent to zero
within +-margin when that interval lies inside (-margin, margin). The margin was not declared
before the grid was run, so the script also gives, per cell, the smallest margin the data
support (the larger end of the 90% interval in absolute value): the effects beyond it are what
the cell excludes. With 80 cells the tests are many: the summary also says how many cells stay
equivalent under Holm's correction over all of them (TOST p: the larger of the two one-sided
t-test p-values). Prints a markdown table and a summary.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

from dhwt.analysis.escape import holm
from dhwt.analysis.intervals import t_interval

HERE = Path(__file__).parent


def shares(rows: list[dict]) -> dict[tuple, np.ndarray]:
    """(frozen, language, c, bias) -> the pair's share per seed, for every c > 1."""
    price: dict[tuple, dict[int, float]] = defaultdict(dict)
    for r in rows:
        key = (r["frozen"], r["language"], int(r["c"]), r["bias"])
        price[key][int(r["seed"])] = float(r["excess_tied"]) - float(r["excess_untied"])
    out = {}
    for (frozen, language, c, bias), by_seed in sorted(price.items()):
        if c == 1:
            continue
        base = price[(frozen, language, 1, bias)]
        seeds = sorted(by_seed.keys() & base.keys())
        out[(frozen, language, c, bias)] = np.array([by_seed[s] - base[s] for s in seeds])
    return out


def tost_p(values: np.ndarray, margin: float) -> float:
    """The p-value of the two one-sided t-tests that the mean lies inside (-margin, margin)."""
    se = values.std(ddof=1) / np.sqrt(len(values))
    df = len(values) - 1
    if se == 0:
        return 0.0 if abs(values.mean()) < margin else 1.0
    lower = stats.t.sf((values.mean() + margin) / se, df)
    upper = stats.t.cdf((values.mean() - margin) / se, df)
    return float(max(lower, upper))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", type=Path, nargs="?", default=HERE / "results.csv")
    parser.add_argument("--margin", type=float, default=0.001,
                        help="equivalence margin in nats (chosen after the run: see the doc)")
    args = parser.parse_args()
    with args.csv.open() as f:
        cells = shares(list(csv.DictReader(f)))
    print(f"| LN | language | c | bias | pair's share, mean | 90% CI | within ±{args.margin} "
          "(TOST 0.05) | effects excluded beyond |")
    print("|---|---|---|---|---|---|---|---|")
    supported, pvalues = [], []
    for (frozen, language, c, bias), values in cells.items():
        low, high = t_interval(values, 0.90)  # TOST at level 0.05 in each direction
        margin = max(abs(low), abs(high))
        supported.append(margin)
        pvalues.append(tost_p(values, args.margin))
        ok = "yes" if -args.margin < low and high < args.margin else "no"
        print(f"| {'fixed' if frozen == 'True' else 'learned'} | {language} | {c} | "
              f"{'yes' if bias == 'True' else 'no'} | {np.mean(values):+.4f} | "
              f"{low:+.4f} to {high:+.4f} | {ok} | ±{margin:.4f} |")
    inside = sum(m < args.margin for m in supported)
    print(f"\n{inside} of {len(supported)} cells equivalent to zero within ±{args.margin} nats "
          f"(TOST, each at level 0.05); the data exclude effects beyond ±{max(supported):.4f} "
          f"nats in every cell (median cell ±{np.median(supported):.4f}). Under Holm's "
          f"correction over the {len(pvalues)} equivalence tests, "
          f"{int((holm(pvalues) <= 0.05).sum())} cells stay equivalent within ±{args.margin}.")


if __name__ == "__main__":
    main()
