"""Read word_gpu.toml's study (runs trained on a GPU, brought back without checkpoints): valid
perplexity of tied and untied per learning rate and step, and tied - untied paired by seed.

    python experiments/tying_wikitext/word_gpu_summary.py runs/word-gpu

writes experiments/tying_wikitext/results-word-gpu.md (the tables), results-word-gpu.csv (every
evaluation of every member: the data the tables come from) and figures/word-gpu.png. The
comparison is at the last step every run reached (a run cut by the device call's budget ends
early; the lr is constant, so a cut run is the same as a shorter one). Per seed the paired
difference of log valid perplexity (a seed pairs the data order; a seed's tied and untied
members share every weight but the output matrix); over seeds the mean with a Student-t
interval (dhwt.analysis.intervals) and the count of seeds where tied is lower.
"""

from __future__ import annotations

import argparse
import csv
import tomllib
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from dhwt.analysis.intervals import summarise
from dhwt.report.figures import save
from dhwt.runs.metrics import metric_table, read_metrics

HERE = Path(__file__).parent
SPLITS = ("valid", "train")


def read_study(study: Path) -> dict[tuple[float, str], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """{(lr, tie): {split: (steps, loss (T, seeds))}} of every run of the study."""
    arms = {}
    for run in sorted((study / "runs").iterdir()):
        config = tomllib.loads((run / "config.toml").read_text())
        records = read_metrics(run / "metrics.jsonl")
        key = (config["optim"]["lr"], config["tying"]["tie_schedule"])
        arms[key] = {split: metric_table(records, split, "loss") for split in SPLITS}
    return arms


def write_csv(arms, path: Path) -> None:
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["lr", "tie", "seed_index", "step", "split", "loss"])
        for (lr, tie), splits in sorted(arms.items()):
            for split, (steps, table) in splits.items():
                for t, step in enumerate(steps):
                    for member, loss in enumerate(table[t]):
                        out.writerow([lr, tie, member, int(step), split, f"{loss:.6f}"])


def report(arms) -> str:
    rates = sorted({lr for lr, _ in arms})
    common = min(int(splits["valid"][0][-1]) for splits in arms.values())
    lines = [f"# Word level on a GPU: tied against untied (word_gpu.toml)\n",
             f"Valid perplexity (whole valid split) per seed, at every 500 steps to step "
             f"{common}, the last step every run reached.\n",
             "| lr | step | untied | tied | tied - untied, log ppl (mean, 95% t, 2 df) "
             "| seeds tied lower |", "|---|---:|---|---|---|---:|"]
    for lr in rates:
        steps, untied = arms[(lr, "untied")]["valid"]
        _, tied = arms[(lr, "tied")]["valid"]
        for t, step in enumerate(steps):
            if step % 500 or step == 0 or step > common:
                continue
            diff = tied[t] - untied[t]
            ppl = lambda row: " / ".join(f"{v:.1f}" for v in np.exp(row))  # noqa: E731
            lines.append(f"| {lr:g} | {int(step)} | {ppl(untied[t])} | {ppl(tied[t])} | "
                         f"{summarise(diff, bimodal=False).text(4)} | "
                         f"{int((diff < 0).sum())} of {len(diff)} |")
    lines += ["", "Train minus valid loss at the last common step (nats; the 2,000 fixed train "
              "windows; negative: the model fits train better than valid):", "",
              "| lr | untied | tied |", "|---|---|---|"]
    for lr in rates:
        gaps = []
        for tie in ("untied", "tied"):
            (vs, valid), (ts, train) = arms[(lr, tie)]["valid"], arms[(lr, tie)]["train"]
            last = list(vs).index(common), list(ts).index(common)
            gaps.append(" / ".join(f"{g:+.3f}" for g in train[last[1]] - valid[last[0]]))
        lines.append(f"| {lr:g} | {gaps[0]} | {gaps[1]} |")
    return "\n".join(lines) + "\n"


def figure(arms, path: Path) -> None:
    """Per rate: valid perplexity of each member (top), and tied - untied per seed (bottom)."""
    rates = sorted({lr for lr, _ in arms})
    fig, axes = plt.subplots(2, len(rates), figsize=(4 * len(rates), 6), sharex=True,
                             sharey="row", squeeze=False)
    for column, lr in enumerate(rates):
        top, bottom = axes[0, column], axes[1, column]
        for tie, colour in (("untied", "tab:blue"), ("tied", "tab:red")):
            steps, table = arms[(lr, tie)]["valid"]
            keep = steps > 0
            for seed in range(table.shape[1]):
                top.plot(steps[keep], np.exp(table[keep, seed]), color=colour, lw=1,
                         label=tie if seed == 0 else None)
        steps, untied = arms[(lr, "untied")]["valid"]
        _, tied = arms[(lr, "tied")]["valid"]
        keep = steps > 0
        for seed in range(tied.shape[1]):
            bottom.plot(steps[keep], tied[keep, seed] - untied[keep, seed], color="k", lw=1,
                        alpha=0.6)
        bottom.axhline(0, color="grey", lw=0.8)
        top.set(title=f"lr {lr:g}", yscale="log")
        bottom.set(xlabel="step")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("valid perplexity")
    axes[1, 0].set_ylabel("tied - untied, log ppl\n(per seed; < 0: tied better)")
    axes[0, 0].legend()
    fig.suptitle("WikiText-2 word level, GPT-2 convention, d 256, 2 layers, seeds 1-3 "
                 "(H100, bf16-mixed)")
    fig.tight_layout()
    save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path)
    args = parser.parse_args()
    arms = read_study(args.study)
    write_csv(arms, HERE / "results-word-gpu.csv")
    text = report(arms)
    (HERE / "results-word-gpu.md").write_text(text)
    figure(arms, HERE / "figures" / "word-gpu.png")
    print(text)


if __name__ == "__main__":
    main()
