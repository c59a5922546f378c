"""Read the dose-response grids of dose.py: the price of tying against the pair's ratio.

Per cell (language, c, bias) and seed: the exact excess loss (population cross-entropy minus the
Bayes optimum) of the tied and the untied member at the end, their paired difference (the
price of tying; tied and untied members of one seed share their initial input table), and the
first recorded step within 0.01 nats of Bayes. Beside them, the predicted price of merged rows:
T4's B(0) = sum_r w_r kl(sigma(a_r) || 1/2) without a bias and T5's
B_b(0) = min_beta sum_r w_r kl(sigma(a_r) || sigma(beta)) with one (a_r the pair's exact
log-ratio, w_r = P(r)(p(s1|r) + p(s2|r))). With --frozen the LayerNorms are fixed, so every
hidden state has norm sqrt(d) and the tied rows' measured distance delta gives the bound
B(delta) exactly; it is checked against the excess.

    python experiments/tying_price/analyse.py runs/tying-price runs/tying-price-frozen
writes experiments/tying_price/results.md, results.csv and figures/price.png.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

from dhwt.analysis.intervals import summarise
from dhwt import load_run
from dhwt.runs.metrics import metric_table
from dhwt.runs.run import is_finished
from dhwt.theory.price import pair_terms
from dhwt.theory.t4_tying_conflict import closeness_price

HERE = Path(__file__).parent
WITHIN = 0.01  # nats of Bayes that count as learned


def first_within(curve: np.ndarray, steps: np.ndarray, bayes: float) -> np.ndarray:
    """(members,) the first step whose excess is below WITHIN, nan if none."""
    below = curve - bayes < WITHIN
    return np.where(below.any(axis=0), steps[np.argmax(below, axis=0)], np.nan)


def read_cell(cell: Path, frozen: bool) -> dict[str, object]:
    """The measurements of one cell directory (tied/ and untied/ runs of dose.py)."""
    language, ratio, bias = cell.name.rsplit("-", 2)
    c, bias = int(ratio[1:]), bias == "bias"
    tied_run = load_run(cell / "tied")
    truth = tied_run.task.truth
    bayes = truth.bayes_cross_entropy
    found = {}
    for arm in ("tied", "untied"):
        steps, curve = metric_table(load_run(cell / arm).metrics(), "population", "loss")
        found[arm] = (curve[-1] - bayes, first_within(curve, steps, bayes))
    a, w = pair_terms(truth)
    row = {"language": language.replace("-", " "), "c": c, "bias": bias, "frozen": frozen,
           "bayes": bayes, "B0": max(closeness_price(a, w, bias=bias), 0.0),
           "excess_tied": found["tied"][0], "excess_untied": found["untied"][0],
           "price": found["tied"][0] - found["untied"][0],
           "steps_tied": found["tied"][1], "steps_untied": found["untied"][1]}
    table = tied_run.model().embeddings.input_weight.detach().double()
    i, j = truth.vocab.index("s1"), truth.vocab.index("s2")
    row["distance"] = (table[:, i] - table[:, j]).norm(dim=-1).numpy()
    if frozen:  # ||h|| = sqrt(d) (var / (var + eps) ~ 1): the bound at the measured distance
        norm = np.sqrt(tied_run.model_config().d_model)
        row["needed"] = float(np.abs(a).max() / norm)
        row["B_delta"] = np.array([closeness_price(a, w, d * norm, bias) for d in row["distance"]])
    return row


def text(values: np.ndarray, digits: int = 4) -> str:
    """One cell that says what it is: 'mean m ± h' (95% t) or, bimodal, 'two groups: n at a to
    b; m at c to d'."""
    summary = summarise(values)
    return ("mean " if summary.kind == "t" else "") + summary.text(digits)


def steps_text(values: np.ndarray) -> str:
    done = values[~np.isnan(values)]
    if not len(done):
        return f"none of {len(values)}"
    late = "" if len(done) == len(values) else f" ({len(values) - len(done)} never)"
    return f"{int(np.median(done))}{late}"


def write_results(rows: list[dict[str, object]], out: Path) -> None:
    lines = ["| LN | language | c | bias | rows merged: B(0), B_b(0) with bias | price (tied - untied) | pair's share: price(c) - price(1) | tied excess | steps to 0.01, tied / untied | tied ‖e_s1 - e_s2‖ | check |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    base = {(r["frozen"], r["language"], r["bias"]): r["price"] for r in rows if r["c"] == 1}
    with open(out.with_suffix(".csv"), "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["frozen", "language", "c", "bias", "seed", "bayes", "B0", "excess_tied",
                         "excess_untied", "steps_tied", "steps_untied", "distance"])
        for r in rows:
            for s in range(len(r["price"])):
                writer.writerow([r["frozen"], r["language"], r["c"], r["bias"], s,
                                 f"{r['bayes']:.6f}", f"{r['B0']:.6f}",
                                 f"{r['excess_tied'][s]:.6f}", f"{r['excess_untied'][s]:.6f}",
                                 r["steps_tied"][s], r["steps_untied"][s],
                                 f"{r['distance'][s]:.4f}"])
    for r in rows:
        share = r["price"] - base[(r["frozen"], r["language"], r["bias"])]
        check = ""
        if r["frozen"]:
            ok = bool(np.all(r["excess_tied"] >= r["B_delta"] - 1e-9))
            check = (f"excess >= B(δ) at the measured δ in {int(np.sum(r['excess_tied'] >= r['B_delta'] - 1e-9))}"
                     f"/{len(r['B_delta'])}; B(δ) = 0 from δ = {r['needed']:.2f}" + ("" if ok else " **FAIL**"))
        lines.append(
            f"| {'fixed' if r['frozen'] else 'learned'} | {r['language']} | {r['c']} | "
            f"{'yes' if r['bias'] else 'no'} | {r['B0']:.4f} | {text(r['price'])} | "
            f"{text(share)} | {text(r['excess_tied'])} | "
            f"{steps_text(r['steps_tied'])} / {steps_text(r['steps_untied'])} | "
            f"{text(r['distance'], 2)} | {check} |")
    out.write_text("\n".join(lines) + "\n", "utf-8")


def figure(rows: list[dict[str, object]], out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    languages = sorted({r["language"] for r in rows})
    variants = sorted({r["frozen"] for r in rows})
    fig, axes = plt.subplots(len(variants), len(languages), figsize=(3.6 * len(languages),
                             3.2 * len(variants)), sharex=True, sharey=True, squeeze=False)
    for row_axes, frozen in zip(axes, variants):
        for ax, language in zip(row_axes, languages):
            for bias, colour in ((False, "tab:blue"), (True, "tab:orange")):
                cells = sorted((r for r in rows if r["language"] == language
                                and r["frozen"] == frozen and r["bias"] == bias),
                               key=lambda r: r["c"])
                cs = np.array([r["c"] for r in cells])
                means = [summarise(r["price"]) for r in cells]
                ax.errorbar(cs * (1.06 if bias else 1), [m.centre for m in means],
                            yerr=[[m.centre - m.low for m in means], [m.high - m.centre for m in means]],
                            color=colour, marker="o", ms=3, capsize=2,
                            label=f"measured, {'with' if bias else 'no'} bias")
                ax.plot(cs, [r["B0"] for r in cells], color=colour, ls="--", lw=1,
                        label=f"{'B_b(0)' if bias else 'B(0)'}: rows merged")
            ax.set_xscale("log")
            ax.set_yscale("symlog", linthresh=1e-3)
            ax.axhline(0, color="grey", lw=0.5)
            ax.set_title(f"{language}, LN {'fixed' if frozen else 'learned'}", fontsize=9)
            ax.grid(alpha=0.3, which="major")
    for ax in axes[-1]:
        ax.set_xlabel("ratio c (pair s1 : s2 = 1 : c)")
    for ax in axes[:, 0]:
        ax.set_ylabel("tied - untied excess (nats)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle("Price of tying at step 3000: 10 seeds a point, paired by seed "
                 "(mean ± 95% t, or median and range where bimodal)", fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("grid", type=Path, help="dose.py --out of the learned-LN grid")
    parser.add_argument("frozen", type=Path, nargs="?", help="dose.py --out of the --frozen-norm grid")
    args = parser.parse_args()
    grids = [(args.grid, False)] + ([(args.frozen, True)] if args.frozen else [])
    rows = [read_cell(cell, frozen) for grid, frozen in grids
            for cell in sorted(grid.glob("*-c*-*")) if is_finished(cell / "untied")]
    rows.sort(key=lambda r: (r["frozen"], r["language"], r["bias"], r["c"]))
    write_results(rows, HERE / "results.md")
    figure(rows, HERE / "figures" / "price.png")
    print((HERE / "results.md").read_text("utf-8"))


if __name__ == "__main__":
    main()
