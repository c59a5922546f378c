"""Read WikiText-2 tying studies by run: valid perplexity per run and step, and each run against
an untied run paired by seed. Written for the word-level GPU studies (word_gpu.toml,
word_gpu_conventions.toml; runs brought back without checkpoints), also reads the bpe:2048 CPU
studies of section 8 (conventions.toml with gpt2_convention.toml's runs):

    python experiments/tying_wikitext/word_gpu_summary.py runs/word-gpu
    python experiments/tying_wikitext/word_gpu_summary.py runs/word-conv --name conventions
    python experiments/tying_wikitext/word_gpu_summary.py runs/tw-gpt2 runs/tw-conv \
        runs/tw-conv-untie --stem conventions --every 400 --margin 0.02 --figure differences \
        --title "WikiText-2 bpe:2048, d 64, 2 layers (CPU)"
    python experiments/tying_wikitext/word_gpu_summary.py runs/ptb-proxy --stem ptb-proxy \
        --every 100 --margin 0.02 --title "PTB-like WikiText-2 words, d 128, 2 layers (CPU)"
    python experiments/tying_wikitext/word_gpu_summary.py runs/ptb-proxy runs/ptb-proxy-conv \
        --stem ptb-proxy-conv --every 100 --margin 0.02 --against tied \
        --title "PTB-like WikiText-2 words, d 128, 2 layers (CPU)"

writes results-STEM[-NAME].md (the tables), .csv (every evaluation of every member: the data the
tables come from) and figures/STEM[-NAME].png (STEM "word-gpu" unless named) in
experiments/tying_wikitext (or --out). Runs of one name in several studies are one run, their
members joined by seed (e.g. seeds 1-2 of one study and seed 3 of another), at the steps all of
them evaluated. A comparison runs to the last step both of its runs reached (a run cut by a
budget ends early; the lr is constant, so a cut run is the same as a shorter one). Each run is
compared with the widest untied run of its rate (of any rate where its rate has none), and a
tied run also with each narrower untied run (the parameter-matched arm); with `--against RUN`
every other run of RUN's tie schedule also with RUN (fairseq's and T5's tied arms against
GPT-2's, section 9). Per seed the paired difference of log valid perplexity (a seed pairs the
data order; tied and untied members of a seed share every weight but the output matrix), at the
steps of the table and at each run's best evaluation (per seed the lowest valid loss to the last
step both reached: in the overfitting regime an arm's minimum comes before the end); over seeds
the mean with a Student-t interval (dhwt.analysis.intervals), the count of seeds where the run
is lower, and with `--margin M` the verdict of the declared rule: above or below 0 where the 95%
interval excludes 0, "within ±M" where the 90% interval lies inside (-M, M) (two one-sided tests
at 5%), else undecided. A table of each arm's learning rates (runs named ARM-lrRATE) at the
seeds every rate has.
"""

from __future__ import annotations

import argparse
import csv
import sys
import textwrap
import tomllib
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import ScalarFormatter
import numpy as np

from dhwt.analysis.intervals import summarise, t_half, t_interval
from dhwt.report.figures import save
from dhwt import load_run
from dhwt.runs.metrics import metric_table

HERE = Path(__file__).parent
SPLITS = ("valid", "train")
EVERY = 500  # steps between the rows of the tables
WORD_TITLE = "WikiText-2 word level, d 256, 2 layers, seeds 1-3 (H100, bf16-mixed)"


@dataclass(frozen=True)
class Arm:
    """One run's settings that the comparison needs, its seeds and its (steps, loss (T, seeds))
    per split, members in the order of `seeds`."""

    name: str
    lr: float
    tie: str
    d_model: int
    seeds: tuple[int, ...]
    splits: dict[str, tuple[np.ndarray, np.ndarray]]

    @property
    def last(self) -> int:
        """The last step every member evaluated (-1 for none)."""
        steps = self.splits["valid"][0]
        return int(steps[-1]) if len(steps) else -1


def _complete(steps: np.ndarray, table: np.ndarray,
              members: int) -> tuple[np.ndarray, np.ndarray]:
    """The steps at which each of the run's `members` has a value."""
    if table.shape[1] < members:
        return steps[:0], np.empty((0, members))
    keep = ~np.isnan(table).any(axis=1)
    return steps[keep], table[keep]


def _join(first: Arm, second: Arm) -> Arm:
    """One run from two studies' runs of one name: their members by seed, at common steps."""
    if (first.lr, first.tie, first.d_model) != (second.lr, second.tie, second.d_model):
        raise SystemExit(f"error: the runs named {first.name} differ in lr, tie schedule or d")
    if set(first.seeds) & set(second.seeds):
        raise SystemExit(f"error: the runs named {first.name} share a seed")
    seeds = first.seeds + second.seeds
    order = np.argsort(seeds)
    splits = {}
    for split in SPLITS:
        (a_steps, a), (b_steps, b) = first.splits[split], second.splits[split]
        steps = np.intersect1d(a_steps, b_steps)
        table = np.concatenate([a[np.isin(a_steps, steps)], b[np.isin(b_steps, steps)]], axis=1)
        splits[split] = steps, table[:, order]
    return Arm(first.name, first.lr, first.tie, first.d_model,
               tuple(np.array(seeds)[order].tolist()), splits)


def read_study(*studies: Path) -> list[Arm]:
    """Every run of the studies, by name (runs of one name joined by seed); a run with no
    evaluation after step 0 (one just started) is left out, and said so on stderr."""
    runs: dict[str, Arm] = {}
    for study in studies:
        for path in sorted((study / "runs").iterdir()):
            run = load_run(path)
            records, seeds = run.metrics(), tuple(run.config.members.seeds)
            arm = Arm(path.name, run.config.optim.lr, str(run.config.tying.tie_schedule),
                      run.config.model.d_model, seeds,
                      {split: _complete(*metric_table(records, split, "loss"), len(seeds))
                       for split in SPLITS})
            if arm.last <= 0:
                print(f"left out {path}: no evaluation after step 0 in every member",
                      file=sys.stderr)
                continue
            runs[arm.name] = _join(runs[arm.name], arm) if arm.name in runs else arm
    return list(runs.values())


def comparisons(runs: list[Arm], against: tuple[str, ...] = ()) -> list[tuple[Arm, Arm]]:
    """(run, reference) pairs: every run against the widest untied run of its rate (of any rate
    where its rate has none), and every tied run against each narrower untied run of that
    reference's rate; then for each name in `against` every other run of that run's tie schedule
    against it, where not compared already (e.g. each tied convention against GPT-2's tied
    arm)."""
    pairs = []
    for run in runs:
        untied = ([r for r in runs if r.lr == run.lr and r.tie == "untied"]
                  or [r for r in runs if r.tie == "untied"])
        reference = max(untied, key=lambda r: r.d_model)
        untied = [r for r in untied if r.lr == reference.lr]
        if run is not reference:
            pairs.append((run, reference))
        if run.tie == "tied":
            pairs += [(run, r) for r in untied if r.d_model < reference.d_model]
    named = {run.name: run for run in runs}
    for name in against:
        if name not in named:
            raise SystemExit(f"error: --against {name}: no run of that name in the studies")
        reference = named[name]
        pairs += [(run, reference) for run in runs
                  if run is not reference and run.tie == reference.tie
                  and not any(r is run and ref is reference for r, ref in pairs)]
    return pairs


def at(run: Arm, step: int, seeds: list[int], split: str = "valid") -> np.ndarray:
    """(len(seeds),) the run's loss of `split` at `step`, by seed."""
    steps, table = run.splits[split]
    return table[list(steps).index(step), [run.seeds.index(s) for s in seeds]]


def paired(run: Arm, reference: Arm, step: int) -> tuple[list[int], np.ndarray]:
    """The seeds both runs have, and run - reference valid loss at `step` for each."""
    seeds = [s for s in run.seeds if s in reference.seeds]
    return seeds, at(run, step, seeds) - at(reference, step, seeds)


def best(run: Arm, seeds: list[int], last: int) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, the run's lowest valid loss over its evaluations after step 0 up to `last`,
    and the step where it fell."""
    steps, table = run.splits["valid"]
    keep = (steps > 0) & (steps <= last)
    losses = table[keep][:, [run.seeds.index(s) for s in seeds]]
    return losses.min(axis=0), steps[keep][losses.argmin(axis=0)]


def verdict(diff: np.ndarray, margin: float) -> str:
    """The declared rule on paired differences: the sign where the 95% t interval excludes 0,
    'within ±margin' where the 90% one lies inside (-margin, margin) (TOST at 5%), else
    'undecided'; '' with fewer than 3 seeds."""
    n = len(diff)
    if n < 3:
        return ""
    mean, wide, narrow = diff.mean(), t_half(diff, 0.95), t_half(diff, 0.90)
    if mean - wide > 0:
        return "above 0"
    if mean + wide < 0:
        return "below 0"
    if -margin < mean - narrow and mean + narrow < margin:
        return f"within ±{margin:g}"
    return "undecided"


def write_csv(runs: list[Arm], path: Path) -> None:
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["run", "lr", "tie", "d_model", "seed", "step", "split", "loss"])
        for run in runs:
            for split, (steps, table) in run.splits.items():
                for t, step in enumerate(steps):
                    for member, loss in enumerate(table[t]):
                        out.writerow([run.name, run.lr, run.tie, run.d_model, run.seeds[member],
                                      int(step), split, f"{loss:.6f}"])


def _ppl(row: np.ndarray) -> str:
    return " / ".join(f"{v:.1f}" for v in np.exp(row))


def _kind(run: Arm) -> str:
    """The run's arm without its learning rate ("tied-lr1e-3" -> "tied"): one colour each."""
    return run.name.split("-lr")[0]


def best_table(runs: list[Arm], margin: float | None,
               against: tuple[str, ...] = ()) -> list[str]:
    """Each comparison at each run's best evaluation (per seed, the lowest valid loss to the
    last step both runs reached), and each run's lowest valid loss against its last: the
    overfitting regime shows as a minimum before the last step and a rise after it."""
    lines = ["Each run at its best evaluation: per seed the lowest valid loss over the "
             "evaluations to the last step both runs reached (the step of each run's minimum "
             "per seed in brackets); run - reference in log perplexity, paired by seed:", "",
             *_header("to step", margin)]
    for run, reference in comparisons(runs, against):
        last = min(run.last, reference.last)
        seeds = [s for s in run.seeds if s in reference.seeds]
        (mine, where), (theirs, there) = best(run, seeds, last), best(reference, seeds, last)
        lines.append(f"| {run.name} | {reference.name} | {last} | {', '.join(map(str, seeds))} "
                     f"| {_ppl(mine)} ({' / '.join(map(str, where))}) | {_ppl(theirs)} "
                     f"({' / '.join(map(str, there))}) | {_difference(mine - theirs, margin)}")
    lines += ["", "Each run's lowest valid perplexity against its last (per seed): the step of "
              "the minimum, and last - lowest in nats (> 0: valid loss turned up):", "",
              "| run | seeds | last step | step of the minimum | lowest | last | last - lowest |",
              "|---|---|---:|---|---|---|---|"]
    for run in runs:
        seeds = list(run.seeds)
        low, where = best(run, seeds, run.last)
        final = at(run, run.last, seeds)
        lines.append(f"| {run.name} | {', '.join(map(str, seeds))} | {run.last} | "
                     f"{' / '.join(map(str, where))} | {_ppl(low)} | {_ppl(final)} | "
                     f"{' / '.join(f'{g:+.3f}' for g in final - low)} |")
    return lines + [""]


def _header(step: str, margin: float | None) -> list[str]:
    """The two header lines of a table of paired differences (`step`: its step column)."""
    return [f"| run | against | {step} | seeds | run | reference | difference (mean, 95% t) "
            "| 90% t | seeds lower |" + (" verdict |" if margin is not None else ""),
            "|---|---|---:|---|---|---|---|---|---:|" + ("---|" if margin is not None else "")]


def _difference(diff: np.ndarray, margin: float | None) -> str:
    """A row's cells for the paired differences `diff` (one per seed): mean and 95% t, the 90% t
    interval (3 seeds or more), the seeds below 0, and the verdict against `margin`."""
    n = len(diff)
    ninety = "" if n < 3 else "[{:+.4f}, {:+.4f}]".format(*t_interval(diff, 0.90))
    return (f"{summarise(diff, bimodal=False).text(4)} | {ninety} | {int((diff < 0).sum())} of "
            f"{n} |" + (f" {verdict(diff, margin)} |" if margin is not None else ""))


def rate_table(runs: list[Arm]) -> list[str]:
    """Valid perplexity of each arm run at several rates, at the last step and the seeds all
    its rates have (their mean), the best marked."""
    kinds: dict[str, list[Arm]] = {}
    for run in runs:
        kinds.setdefault(_kind(run), []).append(run)
    lines = []
    for kind, arms in kinds.items():
        if len({run.lr for run in arms}) < 2:
            continue
        seeds = sorted(set.intersection(*(set(run.seeds) for run in arms)))
        step = min(run.last for run in arms)
        cells = {}
        for run in sorted(arms, key=lambda r: r.lr):
            steps, table = run.splits["valid"]
            row = table[list(steps).index(step)]
            cells[run.lr] = float(np.exp(np.mean([row[run.seeds.index(s)] for s in seeds])))
        best = min(cells, key=cells.get)
        lines.append(f"| {kind} | {step} | {', '.join(map(str, seeds))} | " + ", ".join(
            (f"**{lr:g}: {v:.2f}**" if lr == best else f"{lr:g}: {v:.2f}")
            for lr, v in cells.items()) + " |")
    if not lines:
        return []
    return (["Valid perplexity by learning rate at the last step and the seeds every rate of "
             "the arm has (their mean; best in bold):", "",
             "| arm | step | seeds | lr: valid perplexity |", "|---|---:|---|---|"]
            + lines + [""])


def report(runs: list[Arm], title: str, every: int = EVERY, margin: float | None = None,
           against: tuple[str, ...] = ()) -> str:
    rule = "" if margin is None else (
        f"; verdict: the sign where the 95% interval excludes 0, within ±{margin:g} where the "
        "90% t interval lies inside the margin (TOST at 5%), else undecided")
    lines = [f"# {title}\n",
             f"Valid perplexity (whole valid split) per seed every {every} steps to the last "
             "step both runs of a comparison reached; run - reference in log perplexity, "
             f"paired by seed (the seeds both have){rule}.\n", *_header("step", margin)]
    for run, reference in comparisons(runs, against):
        their_steps, last = reference.splits["valid"][0], min(run.last, reference.last)
        for step in run.splits["valid"][0]:
            if step == 0 or step > last or step not in their_steps or (
                    step % every and step != last):
                continue
            seeds, diff = paired(run, reference, int(step))
            lines.append(f"| {run.name} | {reference.name} | {int(step)} | "
                         f"{', '.join(map(str, seeds))} | {_ppl(at(run, int(step), seeds))} | "
                         f"{_ppl(at(reference, int(step), seeds))} | {_difference(diff, margin)}")
    lines += ["", *best_table(runs, margin, against), *rate_table(runs),
              "Train minus valid loss at each run's last step (nats per seed; the fixed train "
              "windows; more negative: the model fits its training windows further below "
              "valid):", "", "| run | seeds | step | train - valid |", "|---|---|---:|---|"]
    for run in runs:
        gap = (at(run, run.last, list(run.seeds), "train")
               - at(run, run.last, list(run.seeds)))
        lines.append(f"| {run.name} | {', '.join(map(str, run.seeds))} | {run.last} | "
                     f"{' / '.join(f'{g:+.3f}' for g in gap)} |")
    return "\n".join(lines) + "\n"


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
        for run, reference in comparisons(runs):
            if run.lr != lr or run.name in shown:
                continue
            shown.add(run.name)
            steps = [s for s in run.splits["valid"][0] if s in reference.splits["valid"][0]
                     and s > 0]
            diff = np.array([paired(run, reference, s)[1] for s in steps])
            for seed in range(diff.shape[1]):
                bottom.plot(steps, diff[:, seed], color=colours[_kind(run)], lw=1, alpha=0.8)
        bottom.axhline(0, color="grey", lw=0.8)
        top.set(title=f"lr {lr:g}", yscale="log")
        top.legend(fontsize=7)
        bottom.set(xlabel="step")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("valid perplexity")
    axes[1, 0].set_ylabel("run - untied, log ppl\n(per seed; < 0: run better)")
    fig.suptitle(textwrap.fill(title, 45 * axes.shape[1]), fontsize=10)  # no wider than the panels
    fig.tight_layout()
    save(fig, path)


def difference_figure(runs: list[Arm], path: Path, title: str, margin: float | None,
                      against: tuple[str, ...] = ()) -> None:
    """Left: valid perplexity by step, each run's mean over its seeds (runs of one seed dotted;
    20 colours, so that up to 20 runs are told apart).
    Right: each comparison of at least 2 seeds at the last step both runs reached: the seeds'
    paired differences (dots), their mean and 95% t interval, the margin shaded."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), width_ratios=(1, 1.2))
    for index, run in enumerate(runs):
        steps, table = run.splits["valid"]
        keep = steps > 0
        left.plot(steps[keep], np.exp(table[keep].mean(axis=1)), color=plt.cm.tab20(index % 20),
                  ls="-" if len(run.seeds) > 1 else ":", marker="o", ms=3,
                  label=f"{run.name} (seeds {', '.join(map(str, run.seeds))})")
    left.set(xlabel="step", ylabel="valid perplexity (mean over seeds)", yscale="log",
             title="valid perplexity")
    for axis in (left.yaxis.set_major_formatter, left.yaxis.set_minor_formatter):
        axis(ScalarFormatter())
    left.legend(fontsize=7)
    left.grid(alpha=0.3)
    rows = [(run, reference, step, *paired(run, reference, step))
            for run, reference in comparisons(runs, against)
            for step in [min(run.last, reference.last)]]
    rows = [row for row in rows if len(row[3]) >= 2]
    for y, (run, reference, step, seeds, diff) in enumerate(rows):
        n = len(diff)
        right.errorbar(diff.mean(), y, xerr=t_half(diff), fmt="s", color="k", capsize=3)
        right.scatter(diff, [y] * n, color="C3", s=14, zorder=3)
    if margin is not None:
        right.axvspan(-margin, margin, color="C2", alpha=0.15, label=f"±{margin:g} (declared)")
        right.legend(fontsize=7, loc="lower right")
    right.axvline(0, color="grey", lw=0.8)
    right.set_yticks(range(len(rows)), [f"{r.name} - {ref.name}\n(step {step}, seeds "
                                        f"{', '.join(map(str, seeds))})"
                                        for r, ref, step, seeds, _ in rows], fontsize=8)
    right.invert_yaxis()
    right.set(xlabel="valid loss difference, nats (> 0: the first is worse)",
              title="paired by seed: seeds (dots), mean and 95% t interval")
    right.grid(alpha=0.3, axis="x")
    fig.suptitle(title)
    fig.tight_layout()
    save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("studies", type=Path, nargs="+", metavar="STUDY")
    parser.add_argument("--name", default="", help="suffix of the files written")
    parser.add_argument("--stem", default="word-gpu", help="stem of the files written")
    parser.add_argument("--title", default=WORD_TITLE, help="start of the tables' title")
    parser.add_argument("--every", type=int, default=EVERY, help="steps between table rows")
    parser.add_argument("--margin", type=float, help="declared equivalence margin, nats")
    parser.add_argument("--figure", choices=("curves", "differences"), default="curves")
    parser.add_argument("--out", type=Path, default=HERE, help="where the files go")
    parser.add_argument("--against", action="append", default=[], metavar="RUN",
                        help="also compare every other run of RUN's tie schedule with RUN "
                             "(repeatable)")
    args = parser.parse_args()
    against = tuple(args.against)
    runs = read_study(*args.studies)
    stem = args.stem + (f"-{args.name}" if args.name else "")
    title = (f"{args.title}: "
             + tomllib.loads((args.studies[-1] / "study.toml").read_text())["study"]["name"])
    text = report(runs, title, args.every, args.margin, against)  # a bad --against stops here
    write_csv(runs, args.out / f"results-{stem}.csv")
    (args.out / f"results-{stem}.md").write_text(text)
    draw = (figure if args.figure == "curves"
            else partial(difference_figure, margin=args.margin, against=against))
    draw(runs, args.out / "figures" / f"{stem}.png", title)
    print(text)


if __name__ == "__main__":
    main()
