"""Read the capacity grid of run.py: the price of tying and each kind's excess over its control.

Per cell and seed (read against K / d): the exact excess (population cross-entropy minus the
Bayes optimum, nats per predicted token) of the tied and the untied member at the last step;
the price (tied - untied, paired by seed: a seed's two members share their initial input
table); the share (price(kind) - price(control of the same objective, K, d, decay and bias),
paired by seed); and the untied input and output distances of the K violating pairs (mean over
the pairs). The decision rule and the margin are the ones README.md declared before the grid ran.

    python experiments/tying_capacity/analyse.py runs/tying-capacity
writes experiments/tying_capacity/results.md, results.csv, figures/price.png and share.png
(`--name 3k`: results-3k.md, results-3k.csv, figures/price-3k.png, share-3k.png); for cells
converge.py trained (stopped.json), also figures/steps-NAME.png: each seed's price by step.
For the sem and ratio kinds it also evaluates T4's bound at each tied member's rows: B(delta)
at the measured pair distances and hidden-state norms (dhwt.theory.t4_tying_conflict).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import re
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from dhwt.analysis.intervals import t_half, t_interval

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
MARGIN = 0.005  # nats, declared in README.md before any cell ran
CONTROL = {"mlm": "control-mlm", "clm": "control-clm"}
#: The convergence window: the last fifth of a run's steps (converge.py's criterion, and the
#: early excess here).
WINDOW = 0.2
CELL = re.compile(r"(?P<language>\w+-\w+)-k(?P<k>\d+)-d(?P<d>\d+)-wd(?P<decay>[\d.]+)-"
                  r"(?P<bias>bias|nobias)$")


def paired(first: dict[int, float], second: dict[int, float]) -> dict[int, float]:
    """first - second, seed by seed; the two must hold the same seeds."""
    if set(first) != set(second):
        raise ValueError(f"seeds differ: {sorted(first)} vs {sorted(second)}")
    return {seed: first[seed] - second[seed] for seed in sorted(first)}


def window_start(steps: list[int]) -> int:
    """The last of the sorted evaluation `steps` at or before (1 - WINDOW) of the last one:
    where the convergence window opens."""
    return max(s for s in steps if s <= (1 - WINDOW) * steps[-1])


def excess_by_seed(run: Path, bayes: float, mean_of: int = 1
                   ) -> tuple[dict[int, float], dict[int, float]]:
    """{seed: excess} at the last population evaluation and where the convergence window opens
    (window_start); with `mean_of` M > 1, each averaged over the M evaluations ending there
    (the second convergence protocol's smoothed excess)."""
    from dhwt import load_run

    rows = [r for r in load_run(run).metrics() if r["split"] == "population"]
    steps = sorted({r["step"] for r in rows})
    seeds = sorted({r["seed"] for r in rows})
    table = {(r["step"], r["seed"]): r["loss"] - bayes for r in rows}

    def at(end: int) -> dict[int, float]:
        chosen = steps[max(end - mean_of + 1, 0):end + 1]
        return {seed: sum(table[step, seed] for step in chosen) / len(chosen) for seed in seeds}

    return at(len(steps) - 1), at(steps.index(window_start(steps)))


def price_curve(cell: Path, bayes: float) -> tuple[np.ndarray, np.ndarray]:
    """(steps, (steps, seeds) price): every seed's tied - untied exact excess at each
    population evaluation."""
    from dhwt import load_run

    found = []
    for run in ("tied", "untied"):
        rows = [r for r in load_run(cell / run).metrics() if r["split"] == "population"]
        steps, seeds = sorted({r["step"] for r in rows}), sorted({r["seed"] for r in rows})
        table = {(r["step"], r["seed"]): r["loss"] - bayes for r in rows}
        found.append(np.array([[table[st, se] for se in seeds] for st in steps]))
    return np.array(steps), found[0] - found[1]


def distances(run: Path, vocab: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    """(members,) the mean over the K pairs of ||e_ka - e_kb||, input and output rows."""
    from dhwt import load_run

    embeddings = load_run(run).model().embeddings
    found = []
    for table in (embeddings.input_weight, embeddings.output_weight):
        table = table.detach().double()
        gaps = [(table[:, vocab.index(f"s{j}a")] - table[:, vocab.index(f"s{j}b")]).norm(dim=-1)
                for j in range(k)]
        found.append(np.mean([g.numpy() for g in gaps], axis=0))
    return found[0], found[1]


@functools.lru_cache
def _truth(language: str, k: int):
    """The exact truth of a language of languages.py with K pairs (cells of the same language
    and K share it)."""
    from dhwt import compute_truth
    from dhwt.languages.language import language_from_spec
    from languages import spec

    kind, objective = language.split("-")
    return compute_truth(language_from_spec(spec(kind, k, tail=objective == "clm"), language),
                         objective)


def closeness(cell: Path, language: str, k: int, bias: bool) -> dict[str, np.ndarray] | None:
    """T4's bound at each tied member's measured rows: delta (mean over the K pairs of
    ||e_ka - e_kb||), the smallest ||h(r)|| over the contexts that predict a pair, and B(delta)
    summed over the pairs (T5's B_b(delta) with an output bias), nats per predicted token; None
    for the kinds whose pairs share one ratio of 1 (control, cnd: B is 0)."""
    import torch

    from dhwt import load_run
    from dhwt.theory.t4_tying_conflict import closeness_price

    if language.split("-")[0] not in ("sem", "ratio"):
        return None
    truth = _truth(language, k)
    model = load_run(cell / "tied").model()
    members = model.members
    inputs = torch.from_numpy(truth.inputs).expand(members, -1, -1)
    padding = (None if truth.padding is None else
               torch.from_numpy(truth.padding).expand(members, -1, -1))
    with torch.no_grad():
        h = model.hidden(inputs, padding)[:, np.arange(len(truth.positions)), truth.positions]
        table = model.embeddings.input_weight.detach().double()
    norm = h.double().norm(dim=-1).numpy()  # (members, contexts)
    vocab = list(truth.vocab)
    delta, bound, reach = np.zeros(members), np.zeros(members), np.full(members, np.inf)
    for j in range(k):
        i1, i2 = vocab.index(f"s{j}a"), vocab.index(f"s{j}b")
        p, q = truth.conditionals[:, i1], truth.conditionals[:, i2]
        both = (p > 0) & (q > 0)
        a, w = np.log(p[both] / q[both]), truth.context_probs[both] * (p[both] + q[both])
        gap = (table[:, i1] - table[:, i2]).norm(dim=-1).numpy()
        for m in range(members):
            bound[m] += max(closeness_price(a, w, gap[m] * norm[m, both], bias=bias), 0.0)
            reach[m] = min(reach[m], norm[m, both].min())
        delta += gap / k
    return {"delta": delta, "h": reach, "bound": bound}


def finished(cell: Path) -> bool:
    """The cell's runs are done: the untied run has finished (dhwt.runs.run.is_finished) and,
    where converge.py trains the cell in segments, the cell has stopped (criterion or cap: its
    stopped.json)."""
    from dhwt.runs.run import is_finished

    segmented = (cell / "segments.jsonl").is_file()
    return is_finished(cell / "untied") and (
        not segmented or (cell / "stopped.json").is_file())


def read_cell(cell: Path, mean_of: int = 1) -> dict[str, object]:
    """A finished cell's prices, movements, distances and bounds; the excess of each member at
    its last evaluation (averaged over the last `mean_of` evaluations, see excess_by_seed)."""
    match = CELL.match(cell.name)
    language, objective = match["language"], match["language"].split("-")[1]
    k = int(match["k"])
    written = cell / "data" / "truth.json"
    if written.is_file():  # a grid copied without its data (gpu.sh's) has the truth computed
        truth = json.loads(written.read_text())["objectives"][objective]
        bayes, vocab = truth["bayes_cross_entropy_nats"], truth["vocab"]
    else:
        bayes, vocab = _truth(language, k).bayes_cross_entropy, list(_truth(language, k).vocab)
    tied, tied_early = excess_by_seed(cell / "tied", bayes, mean_of)
    untied, untied_early = excess_by_seed(cell / "untied", bayes, mean_of)
    seeds = sorted(tied)
    change = np.array([max(abs(tied[s] - tied_early[s]), abs(untied[s] - untied_early[s]))
                       for s in seeds])
    price = paired(tied, untied)
    moved = np.abs(np.array(list(price.values()))
                   - np.array(list(paired(tied_early, untied_early).values())))
    inside, outside = distances(cell / "untied", vocab, k)
    bias = match["bias"] == "bias"
    stopped = cell / "stopped.json"
    return {"language": language, "objective": objective, "k": k, "d": int(match["d"]),
            "decay": float(match["decay"]), "bias": bias, "bayes": bayes,
            "tied": tied, "untied": untied, "price": price, "change": change,
            "price_moved": moved, "input": inside, "output": outside,
            "closeness": closeness(cell, language, k, bias),
            "stopped": json.loads(stopped.read_text()) if stopped.is_file() else None,
            "curve": price_curve(cell, bayes)}


def decide(share: np.ndarray) -> str:
    """'pays', 'equivalent' or 'undecided' by the declared rule (README.md)."""
    low95, _ = t_interval(share, 0.95)
    low90, high90 = t_interval(share, 0.90)
    if low95 > MARGIN:
        return "pays"
    if -MARGIN < low90 and high90 < MARGIN:
        return "equivalent"
    return "undecided"


def predicted(language: str, k: int, d: int, bias: bool) -> str:
    """The prediction README.md committed before the grid ran (the ratio kind's: before its
    cells ran)."""
    kind = language.split("-")[0]
    if kind == "control" or k <= d or (kind == "sem" and bias):
        return "equivalent"
    return "pays"


def p_pays(share: np.ndarray) -> float:
    """One-sided t-test p of share > MARGIN."""
    return float(stats.ttest_1samp(share - MARGIN, 0.0, alternative="greater").pvalue)


def holm(pvalues: list[float], alpha: float = 0.05) -> list[bool]:
    order = np.argsort(pvalues)
    rejected = [False] * len(pvalues)
    for rank, i in enumerate(order):
        if pvalues[i] > alpha / (len(pvalues) - rank):
            break
        rejected[i] = True
    return rejected


def text(values: np.ndarray, digits: int = 4) -> str:
    mean, (low, high) = float(np.mean(values)), t_interval(values, 0.95)
    return f"{mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"


def analyse(cells: list[dict[str, object]]) -> list[dict[str, object]]:
    """Every cell with its share (None for the controls) and its decision."""
    control = {(c["objective"], c["k"], c["d"], c["decay"], c["bias"]): c["price"]
               for c in cells if c["language"].startswith("control")}
    for c in cells:
        key = (c["objective"], c["k"], c["d"], c["decay"], c["bias"])
        c["share"] = (None if c["language"].startswith("control") or key not in control
                      else np.array(list(paired(c["price"], control[key]).values())))
    return cells


def write(cells: list[dict[str, object]], out: Path) -> None:
    tested = [c for c in cells if c["share"] is not None]
    keep = holm([p_pays(c["share"]) for c in tested])
    lines = ["| language | K | d | K/d | decay | bias | untied excess | price (tied - untied) | "
             "share (price - control's) | decision (predicted) | Holm: pays | converged "
             "(< 1e-3 / < 1e-4) | price moved, last 20% (largest) | untied ‖Δ‖ input / output "
             "| tied ‖Δ‖, min ‖h‖, B(‖Δ‖) | stopped (step, by) |",
             "|" + "---|" * 16]
    order = sorted(cells, key=lambda c: (c["language"], c["decay"], c["bias"], c["k"], c["d"]))
    with open(out.with_suffix(".csv"), "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["language", "k", "d", "decay", "bias", "seed", "bayes", "excess_tied",
                         "excess_untied", "price", "share", "untied_input_distance",
                         "untied_output_distance", "price_moved", "tied_distance", "min_h",
                         "bound"])
        for c in order:
            for i, s in enumerate(sorted(c["price"])):
                writer.writerow([c["language"], c["k"], c["d"], c["decay"], c["bias"], s,
                                 f"{c['bayes']:.6f}", f"{c['tied'][s]:.6f}",
                                 f"{c['untied'][s]:.6f}", f"{c['price'][s]:.6f}",
                                 "" if c["share"] is None else f"{c['share'][i]:.6f}",
                                 f"{c['input'][i]:.4f}", f"{c['output'][i]:.4f}",
                                 f"{c['price_moved'][i]:.6f}",
                                 *(["", "", ""] if c["closeness"] is None else
                                   [f"{c['closeness'][key][i]:.6f}"
                                    for key in ("delta", "h", "bound")])])
    for c in order:
        price = np.array(list(c["price"].values()))
        untied = np.array(list(c["untied"].values()))
        share, decision, holm_text = "", "", ""
        if c["share"] is not None:
            share = text(c["share"])
            decision = f"{decide(c['share'])} ({predicted(c['language'], c['k'], c['d'], c['bias'])})"
            holm_text = "yes" if keep[tested.index(c)] else "no"
        n = len(c["change"])
        lines.append(
            f"| {c['language']} | {c['k']} | {c['d']} | {c['k'] / c['d']:g} | {c['decay']:g} | "
            f"{'yes' if c['bias'] else 'no'} | {np.mean(untied):.4f} | {text(price)} | {share} | "
            f"{decision} | {holm_text} | {int(np.sum(c['change'] < 1e-3))}/{n} / "
            f"{int(np.sum(c['change'] < 1e-4))}/{n} | "
            f"{np.max(c['price_moved']):.4f} | "
            f"{np.mean(c['input']):.2f} / {np.mean(c['output']):.2f} | "
            + ("" if c["closeness"] is None else
               f"{np.mean(c['closeness']['delta']):.2f}, {np.mean(c['closeness']['h']):.1f}, "
               f"{np.mean(c['closeness']['bound']):.4f}") + " | "
            + ("" if c["stopped"] is None else
               f"{c['stopped']['step']}, {c['stopped']['stopped']}") + " |")
    out.write_text("\n".join(lines) + "\n", "utf-8")


def summary(cells: list[dict[str, object]]) -> str:
    """How often the prediction held: a table of decisions per language, bias and capacity."""
    counts: dict[tuple, dict[str, int]] = {}
    for c in cells:
        if c["share"] is None:
            continue
        key = (c["language"], "yes" if c["bias"] else "no",
               "K <= d" if c["k"] <= c["d"] else "K > d",
               predicted(c["language"], c["k"], c["d"], c["bias"]))
        found = counts.setdefault(key, {"pays": 0, "equivalent": 0, "undecided": 0})
        found[decide(c["share"])] += 1
    lines = ["| language | bias | capacity | predicted | pays | equivalent | undecided |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {' | '.join(key)} | {f['pays']} | {f['equivalent']} | {f['undecided']} |"
              for key, f in sorted(counts.items())]
    return "\n".join(lines)


def figure(cells: list[dict[str, object]], out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = sorted({(c["decay"], c["bias"]) for c in cells})
    panels = [("mlm", ("sem-mlm", "control-mlm")),
              ("clm", ("sem-clm", "cnd-clm", "ratio-clm", "control-clm"))]
    colours = {"sem": "tab:red", "cnd": "tab:blue", "ratio": "tab:green", "control": "black"}
    fig, axes = plt.subplots(len(settings), len(panels), figsize=(9, 9), sharex=True,
                             squeeze=False)
    for row, (decay, bias) in enumerate(settings):
        for col, (objective, languages) in enumerate(panels):
            ax = axes[row, col]
            for n, language in enumerate(languages):
                chosen = sorted((c for c in cells if c["language"] == language
                                 and c["decay"] == decay and c["bias"] == bias),
                                key=lambda c: c["k"] / c["d"])
                for k, marker in ((1, "o"), (4, "s"), (16, "^"), (64, "D")):
                    points = [c for c in chosen if c["k"] == k]
                    if not points:
                        continue
                    x = np.array([c["k"] / c["d"] for c in points]) * (1 + 0.06 * (n - 1))
                    prices = [np.array(list(c["price"].values())) for c in points]
                    mean = np.array([p.mean() for p in prices])
                    err = np.array([t_half(p) for p in prices])
                    ax.errorbar(x, mean, yerr=err, fmt=marker + "-", ms=4, lw=0.8, capsize=2,
                                color=colours[language.split("-")[0]],
                                label=language if k == 1 else None)
            ax.axvline(1.0, color="grey", lw=0.5, ls=":")
            ax.axhline(0.0, color="grey", lw=0.5)
            ax.set_xscale("log")
            ax.set_title(f"{objective}, decay {decay:g}, {'bias' if bias else 'no bias'}",
                         fontsize=9)
            ax.set_ylabel("price: tied - untied excess (nats)", fontsize=8)
            if row == len(settings) - 1:
                ax.set_xlabel("K / d (o K=1, □ K=4, △ K=16, ◇ K=64)", fontsize=8)
            ax.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)


def share_figure(cells: list[dict[str, object]], out: Path) -> None:
    """Each violating kind's share (price - the control's: an excess over a language of lower
    demand, not identified as a DH effect) against K / d, the margin shaded."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = sorted({(c["decay"], c["bias"]) for c in cells})
    colours = {"sem-mlm": "tab:orange", "sem-clm": "tab:red", "cnd-clm": "tab:blue",
               "ratio-clm": "tab:green"}
    fig, axes = plt.subplots(1, len(settings), figsize=(11, 3.6), sharey=True, squeeze=False)
    for col, (decay, bias) in enumerate(settings):
        ax = axes[0, col]
        ax.axhspan(-MARGIN, MARGIN, color="grey", alpha=0.2, lw=0)
        for n, language in enumerate(colours):
            points = sorted((c for c in cells if c["language"] == language and c["decay"] == decay
                             and c["bias"] == bias and c["share"] is not None
                             and c["d"] > 2), key=lambda c: c["k"] / c["d"])
            if not points:
                continue
            x = np.array([c["k"] / c["d"] for c in points]) * (1 + 0.05 * (n - 1))
            mean = np.array([np.mean(c["share"]) for c in points])
            err = np.array([t_half(c["share"]) for c in points])
            ax.errorbar(x, mean, yerr=err, fmt="o", ms=4, capsize=2, color=colours[language],
                        label=language)
        ax.axvline(1.0, color="grey", lw=0.5, ls=":")
        ax.axhline(0.0, color="grey", lw=0.5)
        ax.set_xscale("log")
        ax.set_title(f"decay {decay:g}, {'bias' if bias else 'no bias'} (d >= 4)", fontsize=9)
        ax.set_xlabel("K / d", fontsize=8)
        ax.legend(fontsize=7)
    axes[0, 0].set_ylabel("share: price - control's price (nats)", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def steps_figure(cells: list[dict[str, object]], out: Path) -> None:
    """Each seed's price against the step, one panel per cell, over the second half of its
    steps; the last 20% (where the criterion is read) shaded."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = sorted(cells, key=lambda c: (c["k"], c["d"], c["bias"], c["language"]))
    columns = min(4, len(order))
    rows = -(-len(order) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3 * columns, 2.6 * rows), squeeze=False)
    for ax, c in zip(axes.ravel(), order):
        steps, price = c["curve"]
        late = steps >= 0.5 * steps[-1]
        ax.plot(steps[late], price[late], lw=0.7, alpha=0.8)
        ax.axvspan(0.8 * steps[-1], steps[-1], color="grey", alpha=0.15, lw=0)
        ax.axhline(0.0, color="grey", lw=0.5)
        how = "" if c["stopped"] is None else f", {c['stopped']['stopped']} at {steps[-1]}"
        ax.set_title(f"{c['language']} K{c['k']} d{c['d']} "
                     f"{'bias' if c['bias'] else 'no bias'}{how}", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes.ravel()[len(order):]:
        ax.axis("off")
    fig.supxlabel("step", fontsize=8)
    fig.supylabel("price of each seed: tied - untied exact excess (nats)", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("grid", type=Path)
    parser.add_argument("--name", default="",
                        help="suffix of what it writes (results-NAME.md, figures/price-NAME.png)")
    parser.add_argument("--mean-of", type=int, default=1,
                        help="each member's excess averaged over its last N evaluations (the "
                             "second convergence protocol's decisions: 5)")
    args = parser.parse_args()
    found = [cell for cell in sorted(args.grid.iterdir()) if CELL.match(cell.name)]
    cells = analyse([read_cell(cell, args.mean_of) for cell in found if finished(cell)])
    if not cells:
        sys.exit(f"nothing to analyse: none of the {len(found)} cells in {args.grid} has "
                 "finished (a report per run; stopped.json where converge.py trains it)")
    suffix = f"-{args.name}" if args.name else ""
    write(cells, HERE / f"results{suffix}.md")
    figure(cells, HERE / "figures" / f"price{suffix}.png")
    share_figure(cells, HERE / "figures" / f"share{suffix}.png")
    if any(c["stopped"] is not None for c in cells):
        steps_figure(cells, HERE / "figures" / f"steps{suffix}.png")
    print(f"{len(cells)} cells\n{summary(cells)}")


if __name__ == "__main__":
    main()
