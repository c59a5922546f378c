"""The demand study's analysis, as committed in README.md ("Plan and prediction").

Reads OUT/cells/*.json (run.py) and writes OUT/results.csv (per d, language, draw: each arm's
excess at its best restart and the price), OUT/contrasts.csv (families A, B, C per d: mean over
draws, 95% t-interval, two-sided p, TOST p at the margin, both Holm-adjusted within family),
OUT/certificates.md (certified members and restart agreement, exact intervals), OUT/results.md
(the tables) and OUT/prices.png. Draws complete in both arms of every language a contrast reads
are the ones it uses.

    python experiments/dh_demand/analyse.py runs/dh-demand [--plan-commit a264097]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
from datetime import datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from dhwt.analysis.intervals import clopper_pearson, t_interval  # noqa: E402

MARGIN = 0.005
ALPHA = 0.05
#: Certified member: drift (F's fall over the last 100 L-BFGS iterations) and gradient norm below.
DRIFT, GRAD = 2e-4, 2e-2
#: Two restarts agree when their F differ by less than this.
AGREE = 1e-3
DOSES = (0.0, 0.25, 0.5, 1.0)


def load(out: Path) -> dict[tuple, dict]:
    """{(d, pattern, dose, draw, arm): record} of every finished job."""
    cells = {}
    for path in sorted((out / "cells").glob("*.json")):
        r = json.loads(path.read_text())
        lang = r["language"]
        cells[(r["d"], lang["pattern"], float(lang["dose"]), lang["draw"], r["arm"])] = r
    return cells


def best(record: dict) -> tuple[float, float]:
    """(excess, F) of the arm's restart of lower F."""
    i = int(np.argmin(record["objective"]))
    return record["cross_entropy"][i] - record["bayes"], record["objective"][i]


def prices(cells: dict) -> dict[tuple, float]:
    """{(d, pattern, dose, draw): CE(tied) - CE(untied)} where both arms finished."""
    return {key[:4]: best(r)[0] - best(cells[(*key[:4], "untied")])[0]
            for key, r in cells.items()
            if key[4] == "tied" and (*key[:4], "untied") in cells}


def contrasts(price: dict, d: int) -> dict[str, tuple[str, dict[int, float]]]:
    """{name: (family, {draw: value})} of the declared contrasts at width d."""
    draws = sorted({k[3] for k in price if k[0] == d})

    def per_draw(f):
        """{draw: f(q)} over the draws holding every price f reads through q(pattern, dose)."""
        values = {}
        for draw in draws:
            try:
                values[draw] = f(lambda pattern, dose: price[(d, pattern, dose, draw)])
            except KeyError:  # a language of this draw not finished in both arms
                pass
        return values

    a = {"equal": lambda q: q("equal", 1.0) - q("equal", 0.0),
         "constant": lambda q: q("constant", 0.0) - q("constant", 1.0),
         "ratio": lambda q: q("ratio", 0.0) - q("ratio", 1.0)}
    out = {f"A_{name}": ("A", per_draw(f)) for name, f in a.items()}
    for name in ("constant", "ratio"):
        out[f"B_{name}"] = ("B", per_draw(lambda q, n=name: a["equal"](q) + a[n](q)))
    out["C_slope"] = ("C", per_draw(
        lambda q: float(np.polyfit(DOSES, [q("ratio", x) for x in DOSES], 1)[0])))
    out["C_step"] = ("C", per_draw(lambda q: q("ratio", 0.25) - q("ratio", 0.0)))
    return out


def holm(p: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values.

    Examples:
        >>> [round(x, 3) for x in holm([0.01, 0.04, 0.03])]
        [0.03, 0.06, 0.06]
    """
    order = np.argsort(p)
    adjusted, running = np.empty(len(p)), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


def test(values: list[float]) -> dict[str, float]:
    """Mean, 95% t-interval, two-sided p against 0 and TOST p against ±MARGIN."""
    x = np.asarray(values)
    n, mean = len(x), float(x.mean())
    if n < 2:
        return {"n": n, "mean": mean, "lo": np.nan, "hi": np.nan, "p": np.nan, "p_tost": np.nan}
    low, high = t_interval(x)
    below = stats.ttest_1samp(x, MARGIN, alternative="less").pvalue
    above = stats.ttest_1samp(x, -MARGIN, alternative="greater").pvalue
    return {"n": n, "mean": mean, "lo": low, "hi": high,
            "p": float(stats.ttest_1samp(x, 0.0).pvalue), "p_tost": float(max(below, above))}


def analyse(cells: dict) -> list[dict]:
    """The contrasts' rows, Holm-adjusted within each family at each d."""
    price, rows = prices(cells), []
    for d in sorted({k[0] for k in cells}):
        family_rows: dict[str, list[dict]] = {}
        for name, (family, values) in contrasts(price, d).items():
            if not values:
                continue
            row = {"d": d, "family": family, "contrast": name, **test(list(values.values())),
                   "positive": sum(v > 0 for v in values.values()),
                   "values": " ".join(f"{v:+.4f}" for v in values.values())}
            family_rows.setdefault(family, []).append(row)
        for group in family_rows.values():
            for key in ("p", "p_tost"):
                for row, adjusted in zip(group, holm([r[key] for r in group])):
                    row[f"{key}_holm"] = adjusted
            rows.extend(group)
    return rows


def certificates(cells: dict) -> list[str]:
    """The certificate's lines: certified members and restart agreement, per d and arm."""
    lines = ["| d | arm | certified members (drift < 2e-4, grad < 2e-2) | restarts within 1e-3 "
             "in F | median grad | median drift |", "|---|---|---|---|---|---|"]
    for d in sorted({k[0] for k in cells}):
        for arm in ("tied", "untied"):
            rs = [r for k, r in cells.items() if k[0] == d and k[4] == arm]
            grad = np.concatenate([r["grad_norm"] for r in rs])
            drift = np.concatenate([r["drift"] for r in rs])
            ok = int(((grad < GRAD) & (drift < DRIFT)).sum())
            agree = sum(abs(r["objective"][0] - r["objective"][1]) < AGREE for r in rs)
            lo, hi = clopper_pearson(ok, len(grad))
            alo, ahi = clopper_pearson(agree, len(rs))
            lines.append(f"| {d} | {arm} | {ok}/{len(grad)} [{lo:.2f}, {hi:.2f}] | "
                         f"{agree}/{len(rs)} [{alo:.2f}, {ahi:.2f}] | {np.median(grad):.1e} | "
                         f"{np.median(drift):.1e} |")
    return lines


def preregistered(cells: dict, plan: str) -> str:
    """A line saying whether every job started after the plan's commit and ran from a clean
    tree."""
    when = subprocess.run(["git", "show", "-s", "--format=%cI", plan], capture_output=True,
                          text=True, cwd=Path(__file__).parent).stdout.strip()
    committed = datetime.fromisoformat(when)
    starts = [datetime.fromisoformat(r["start_utc"]) for r in cells.values()]
    commits = sorted({r["commit"][:7] for r in cells.values()})
    dirty = sum(r["dirty"] for r in cells.values())
    return (f"Plan committed {committed.isoformat()} ({plan}); {len(cells)} jobs started "
            f"{min(starts).isoformat()} to {max(starts).isoformat()}, "
            f"{sum(s > committed for s in starts)} of them after the plan; run from commit(s) "
            f"{', '.join(commits)}, {dirty} from a modified tree.")


def figure(cells: dict, path: Path) -> None:
    """Each language's price per draw (points) and mean (bar), one panel per d."""
    price = prices(cells)
    widths = sorted({k[0] for k in price})
    languages = [("equal", 0.0), ("equal", 1.0), ("constant", 0.0), ("constant", 1.0),
                 ("ratio", 0.0), ("ratio", 0.25), ("ratio", 0.5), ("ratio", 1.0)]
    violating = {("equal", 1.0), ("constant", 0.0), ("ratio", 0.0)}
    fig, axes = plt.subplots(1, len(widths), figsize=(5.5 * len(widths), 3.6), squeeze=False)
    for ax, d in zip(axes[0], widths):
        for i, lang in enumerate(languages):
            values = [v for k, v in price.items() if k[0] == d and k[1:3] == lang]
            if not values:
                continue
            color = "tab:red" if lang in violating else "tab:blue"
            ax.bar(i, np.mean(values), color=color, alpha=0.35)
            ax.plot([i] * len(values), values, "o", color=color, ms=3)
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xticks(range(len(languages)),
                      [f"{p}\nλ {dose:g}" for p, dose in languages], fontsize=7)
        ax.set_title(f"K 16, d {d}: red violates the DH, blue holds it", fontsize=9)
        ax.set_ylabel("price: CE tied - CE untied (nats)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--plan-commit", default="a264097")
    args = parser.parse_args()
    cells = load(args.out)
    price = prices(cells)
    with open(args.out / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["d", "pattern", "dose", "draw", "excess_tied", "excess_untied", "price"])
        for key in sorted(price):
            w.writerow([*key, f"{best(cells[(*key, 'tied')])[0]:.6f}",
                        f"{best(cells[(*key, 'untied')])[0]:.6f}", f"{price[key]:.6f}"])
    rows = analyse(cells)
    fields = ["d", "family", "contrast", "n", "mean", "lo", "hi", "p", "p_holm", "p_tost",
              "p_tost_holm", "positive", "values"]
    with open(args.out / "contrasts.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        w.writerows(rows)
    lines = [preregistered(cells, args.plan_commit), "",
             "| d | contrast | draws | mean [95% t] | p (Holm) | TOST ±0.005 p (Holm) | "
             "positive draws | per draw |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['d']} | {r['contrast']} | {r['n']} | {r['mean']:+.4f} "
                     f"[{r['lo']:+.4f}, {r['hi']:+.4f}] | {r['p']:.3f} ({r['p_holm']:.3f}) | "
                     f"{r['p_tost']:.3f} ({r['p_tost_holm']:.3f}) | {r['positive']}/{r['n']} | "
                     f"{r['values']} |")
    demand = ["", "| d | language | draws | untied excess (demand) | price tied - untied |",
              "|---|---|---|---|---|"]
    for d in sorted({k[0] for k in price}):
        for lang in sorted({k[1:3] for k in price if k[0] == d}):
            keys = [k for k in price if k[0] == d and k[1:3] == lang]
            ex = [best(cells[(*k, "untied")])[0] for k in keys]
            pr = [price[k] for k in keys]
            demand.append(f"| {d} | {lang[0]} λ {lang[1]:g} | {len(keys)} | {np.mean(ex):.4f} "
                          f"[{min(ex):.4f}, {max(ex):.4f}] | {np.mean(pr):+.4f} "
                          f"[{min(pr):+.4f}, {max(pr):+.4f}] |")
    text = "\n".join(lines + demand + [""] + certificates(cells)) + "\n"
    (args.out / "results.md").write_text(text)
    figure(cells, args.out / "prices.png")
    print(text)


if __name__ == "__main__":
    main()
