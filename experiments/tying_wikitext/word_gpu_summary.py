"""Read a word-level GPU study (word_gpu.toml, word_gpu_conventions.toml; runs trained on a GPU,
brought back without checkpoints): valid perplexity per run and step, and each run against the
untied run of its learning rate at the full width, paired by seed.

    python experiments/tying_wikitext/word_gpu_summary.py runs/word-gpu
    python experiments/tying_wikitext/word_gpu_summary.py runs/word-conv --name conventions

writes experiments/tying_wikitext/results-word-gpu[-NAME].md (the tables), .csv (every
evaluation of every member: the data the tables come from) and figures/word-gpu[-NAME].png. The
comparison runs to the last step every run reached (a run cut by the device call's budget ends
early; the lr is constant, so a cut run is the same as a shorter one). Per seed the paired
difference of log valid perplexity (a seed pairs the data order; tied and untied members of a
seed share every weight but the output matrix); over seeds the mean with a Student-t interval
(dhwt.analysis.intervals) and the count of seeds where the run is lower. A tied run is also
compared with a narrower untied run of its rate, where there is one (the parameter-matched arm).
"""

from __future__ import annotations

import argparse
import csv
import tomllib
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from dhwt.analysis.intervals import summarise
from dhwt.report.figures import save
from dhwt.runs import load_run
from dhwt.runs.metrics import metric_table

HERE = Path(__file__).parent
SPLITS = ("valid", "train")
EVERY = 500  # steps between the rows of the tables


@dataclass(frozen=True)
class Arm:
    """One run's settings that the comparison needs and its (steps, loss (T, seeds)) per split."""

    name: str
    lr: float
    tie: str
    d_model: int
    splits: dict[str, tuple[np.ndarray, np.ndarray]]

    @property
    def last(self) -> int:
        return int(self.splits["valid"][0][-1])


def read_study(study: Path) -> list[Arm]:
    """Every run of the study, by name."""
    runs = []
    for path in sorted((study / "runs").iterdir()):
        run = load_run(path)
        records = run.metrics()
        runs.append(Arm(path.name, run.config.optim.lr, str(run.config.tying.tie_schedule),
                        run.config.model.d_model,
                        {split: metric_table(records, split, "loss") for split in SPLITS}))
    return runs


def comparisons(runs: list[Arm]) -> list[tuple[Arm, Arm]]:
    """(run, reference) pairs: every run against the widest untied run of its rate, and every
    tied run against each narrower untied run of its rate."""
    pairs = []
    for run in runs:
        untied = [r for r in runs if r.lr == run.lr and r.tie == "untied"]
        reference = max(untied, key=lambda r: r.d_model)
        if run is not reference:
            pairs.append((run, reference))
        if run.tie == "tied":
            pairs += [(run, r) for r in untied if r.d_model < reference.d_model]
    return pairs


def write_csv(runs: list[Arm], path: Path) -> None:
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["run", "lr", "tie", "d_model", "seed_index", "step", "split", "loss"])
        for run in runs:
            for split, (steps, table) in run.splits.items():
                for t, step in enumerate(steps):
                    for member, loss in enumerate(table[t]):
                        out.writerow([run.name, run.lr, run.tie, run.d_model, member, int(step),
                                      split, f"{loss:.6f}"])


def _ppl(row: np.ndarray) -> str:
    return " / ".join(f"{v:.1f}" for v in np.exp(row))


def report(runs: list[Arm], title: str) -> str:
    common = min(run.last for run in runs)
    lines = [f"# {title}\n",
             f"Valid perplexity (whole valid split) per seed every {EVERY} steps to step "
             f"{common}, the last step every run reached; run - reference in log perplexity, "
             "paired by seed.\n",
             "| run | against | step | run | reference | difference (mean, 95% t) "
             "| seeds lower |", "|---|---|---:|---|---|---|---:|"]
    for run, reference in comparisons(runs):
        steps, mine = run.splits["valid"]
        their_steps, theirs = reference.splits["valid"]
        for t, step in enumerate(steps):
            if step == 0 or step > common or (step % EVERY and step != common):
                continue
            other = theirs[list(their_steps).index(step)]
            diff = mine[t] - other
            lines.append(f"| {run.name} | {reference.name} | {int(step)} | {_ppl(mine[t])} | "
                         f"{_ppl(other)} | {summarise(diff, bimodal=False).text(4)} | "
                         f"{int((diff < 0).sum())} of {len(diff)} |")
    lines += ["", f"Train minus valid loss at step {common} (nats per seed; the fixed train "
              "windows; more negative: the model fits its training windows further below "
              "valid):", "", "| run | train - valid |", "|---|---|"]
    for run in runs:
        (vs, valid), (ts, train) = run.splits["valid"], run.splits["train"]
        gap = train[list(ts).index(common)] - valid[list(vs).index(common)]
        lines.append(f"| {run.name} | {' / '.join(f'{g:+.3f}' for g in gap)} |")
    return "\n".join(lines) + "\n"


def _kind(run: Arm) -> str:
    """The run's arm without its learning rate ("tied-lr1e-3" -> "tied"): one colour each."""
    return run.name.split("-lr")[0]


def figure(runs: list[Arm], path: Path, title: str) -> None:
    """Per rate: valid perplexity of each member (top), and each run - its reference per seed
    (bottom; the first comparison of each run)."""
    rates = sorted({run.lr for run in runs})
    kinds = list(dict.fromkeys(_kind(run) for run in runs))
    colours = dict(zip(kinds, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    fig, axes = plt.subplots(2, len(rates), figsize=(4.5 * len(rates), 6), sharex=True,
                             sharey="row", squeeze=False)
    shown = set()
    for column, lr in enumerate(rates):
        top, bottom = axes[0, column], axes[1, column]
        for run in (r for r in runs if r.lr == lr):
            steps, table = run.splits["valid"]
            keep = steps > 0
            for seed in range(table.shape[1]):
                top.plot(steps[keep], np.exp(table[keep, seed]), color=colours[_kind(run)], lw=1,
                         label=_kind(run) if seed == 0 else None)
        for run, reference in comparisons([r for r in runs if r.lr == lr]):
            if run.name in shown:
                continue
            shown.add(run.name)
            steps, mine = run.splits["valid"]
            their_steps, theirs = reference.splits["valid"]
            at = [list(their_steps).index(s) for s in steps if s in their_steps]
            keep = [i for i, s in enumerate(steps) if s in their_steps and s > 0]
            diff = mine[keep] - theirs[[at[i] for i in keep]]
            for seed in range(diff.shape[1]):
                bottom.plot(steps[keep], diff[:, seed], color=colours[_kind(run)], lw=1,
                            alpha=0.8)
        bottom.axhline(0, color="grey", lw=0.8)
        top.set(title=f"lr {lr:g}", yscale="log")
        top.legend(fontsize=7)
        bottom.set(xlabel="step")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("valid perplexity")
    axes[1, 0].set_ylabel("run - untied, log ppl\n(per seed; < 0: run better)")
    fig.suptitle(title)
    fig.tight_layout()
    save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("--name", default="", help="suffix of the files written")
    args = parser.parse_args()
    runs = read_study(args.study)
    suffix = f"-{args.name}" if args.name else ""
    title = ("WikiText-2 word level, d 256, 2 layers, seeds 1-3 (H100, bf16-mixed): "
             + tomllib.loads((args.study / "study.toml").read_text())["study"]["name"])
    write_csv(runs, HERE / f"results-word-gpu{suffix}.csv")
    text = report(runs, title)
    (HERE / f"results-word-gpu{suffix}.md").write_text(text)
    figure(runs, HERE / "figures" / f"word-gpu{suffix}.png", title)
    print(text)


if __name__ == "__main__":
    main()
