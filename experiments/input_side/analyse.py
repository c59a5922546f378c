"""Untied input distances of the factorial's runs against the decay scale D(t).

    python experiments/input_side/analyse.py OUT

For every run under OUT/runs (factorial.py) and every pair: the raw input distance
||e1 - e2||, the normalised one (over the mean distance between predicted symbols of different
classes in the same matrix, the rule of dhwt's run report) and r = d(t) / (d(0) D(t)), where
D(t) = prod_{s < t} (1 - lr_s weight_decay) is the factor by which a row without gradient
shrinks (README.md); and the same normalised distance of the learned part l(t) = e(t) - D(t) e(0),
what the updates wrote, without the decayed init. Seeds that fit: exact population loss within 0.05 nats of the Bayes
optimum at the last step. Writes OUT/results.json, the tables to results.md beside this file
(the README's numbers are checked against it) and figures/input_side.png; prints the tables.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter
import numpy as np

import dhwt
from dhwt import pair_closeness
from dhwt.analysis.intervals import summarise
from dhwt.runs.run import is_run
from dhwt.training.lr import LRSchedule

HERE = Path(__file__).resolve().parent
PAIRS = {
    "exor4": [("0a", "0b", "1:9 sem"), ("1a", "1b", "1:1 sem+cnd")],
    "four": [("a1", "a2", "1:1 sem+cnd"), ("b1", "b2", "1:9 sem"), ("c", "d", "cnd only"),
             ("e", "f", "neither"), ("[EOS]", "[PAD]", "never read")],
}
FIT = 0.05
RESULTS_HEAD = ("# The input side: results\n\nWritten by `python experiments/input_side/analyse.py "
                "OUT` over the factorial's runs (OUT/runs) and the main job's untied run "
                "(OUT/main/exor4/main-untied).\n")


def decay(config, steps: list[int]) -> np.ndarray:
    """D at each of `steps`: the product of 1 - lr_s wd over the updates before it."""
    o = config.optim
    schedule = LRSchedule(o.lr_schedule, o.lr, o.lr_min, o.steps, o.lr_period, o.warmup_steps)
    log = np.cumsum([0.0] + [math.log1p(-schedule.lr_at(s) * o.weight_decay)
                             for s in range(max(steps))])
    return np.exp(log[steps])


def measure(run_dir: Path, language: str) -> dict[str, object]:
    run = dhwt.load_run(run_dir)
    task = run.task
    never = set(task.truth.never_predicted)
    symbols = [(c.name, s) for c in task.language.classes for s in c.variants if s not in never]
    base = [(a, b) for (ca, a), (cb, b) in itertools.combinations(symbols, 2) if ca != cb]
    steps = run.steps
    snapshots = [run.embeddings(step) for step in steps]
    pairs = [(a, b) for a, b, _ in PAIRS[language]]
    close = pair_closeness(snapshots, "input", pairs, base)
    d = decay(run.config, steps)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = close.raw / (close.raw[:1] * d[:, None, None])  # (T, S, P)
        scale = close.raw / close.normalised
    # Decoupled (AdamW) and coupled-SGD decay are linear: e(t) = D(t) e(0) + l(t) exactly, l(t)
    # the updates' own sum, each shrunk by the decay after it: the part the gradients wrote.
    learned = [replace(s, input=s.input - d[i] * snapshots[0].input)
               for i, s in enumerate(snapshots)]
    written = pair_closeness(learned[1:], "input", pairs, base)
    last = max(m["step"] for m in run.metrics())
    loss = {m["member"]: m["loss"] for m in run.metrics()
            if m["split"] == "population" and m["step"] == last}
    fit = [loss[i] - task.truth.bayes_cross_entropy < FIT for i in sorted(loss)]
    return {"steps": steps, "decay": d.tolist(), "fit": fit,
            "raw": close.raw.tolist(), "normalised": close.normalised.tolist(),
            "ratio": ratio.tolist(), "baseline_raw": scale.tolist(),
            "learned_normalised": written.normalised.tolist()}


def text(values, digits: int = 2) -> str:
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return "-"
    if np.isnan(values).any():
        return "n/a"
    return summarise(values, bimodal=False).text(digits) if len(values) >= 3 else ", ".join(
        f"{v:.{digits}f}" for v in values)


def order(name: str) -> tuple[str, str, float, str]:
    """A cell's name (LANGUAGE/OPTIMIZER/wdLEVEL/INIT) as a key that sorts levels as numbers."""
    language, optimizer, level, init = name.split("/")
    return language, optimizer, float(level[2:]), init


def table(results: dict) -> list[str]:
    lines = []
    for language, pairs in PAIRS.items():
        head = " | ".join(f"{a}-{b} ({kind})" for a, b, kind in pairs)
        lines += [f"\n**{language}**: final normalised distance / r = d / (d(0) D), mean ± 95% "
                  "t-interval over the 5 seeds (n = 5); symmetric inits: the twins' raw distance "
                  "instead of r (their d(0) is 0)\n",
                  f"| optimizer | level | init | D | seeds fit | {head} |",
                  "|---|---|---|---|---|" + "---|" * len(pairs)]
        for name, found in sorted(results.items(), key=lambda item: order(item[0])):
            lang, optimizer, level, init = name.split("/")
            if lang != language:
                continue
            norm, ratio = np.array(found["normalised"])[-1], np.array(found["ratio"])[-1]
            raw = np.array(found["raw"])[-1]
            cells = [f"{text(norm[:, p])} / " + (f"raw {text(raw[:, p])}" if init == "symmetric"
                                                 and p < 2 else text(ratio[:, p]))
                     for p in range(len(pairs))]
            lines.append(f"| {optimizer} | {level} | {init} | {found['decay'][-1]:.3f} | "
                         f"{sum(found['fit'])} of {len(found['fit'])} | " + " | ".join(cells)
                         + " |")
    lines += ["\n**The learned part** l = e(t) - D(t) e(0) (random inits): its normalised "
              "distance at the last step, mean ± 95% t-interval over the 5 seeds\n",
              "| language | optimizer | level | seeds fit | pairs |", "|---|---|---|---|---|"]
    for name, found in sorted(results.items(), key=lambda item: order(item[0])):
        language, optimizer, level, init = name.split("/")
        if init != "random":
            continue
        written = np.array(found["learned_normalised"])[-1]
        cells = "; ".join(f"{a}-{b} {text(written[:, p])}"
                          for p, (a, b, _) in enumerate(PAIRS[language]) if b != "[PAD]")
        lines.append(f"| {language} | {optimizer} | {level} | {sum(found['fit'])} of "
                     f"{len(found['fit'])} | {cells} |")
    return lines


def main_job(found: dict) -> list[str]:
    """The main job's untied run (main_job_untied.toml): its input distances at the last step
    split into the decayed init and the learned part, over all seeds and the seeds that fit."""
    fit = np.array(found["fit"])
    lines = ["\n**The main job's untied run** (seeds 42-49, wd 0.2, 10,000 steps, D = "
             f"{found['decay'][-1]:.3f}; {int(fit.sum())} of {len(fit)} seeds fit), mean ± 95% "
             "t-interval\n", "| seeds | pair | normalised | r | learned part, normalised |",
             "|---|---|---|---|---|"]
    for seeds, keep in (("all", np.ones_like(fit)), ("fit", fit)):
        for p, (a, b, kind) in enumerate(PAIRS["exor4"]):
            values = [np.array(found[k])[-1, keep, p]
                      for k in ("normalised", "ratio", "learned_normalised")]
            lines.append(f"| {seeds} | {a}-{b} ({kind}) | " + " | ".join(map(text, values))
                         + " |")
    return lines


def figure(results: dict, path: Path) -> None:
    """Per language: r(t) of each pair for AdamW and SGD from a random init, one line per
    level (mean over seeds); the last panel per language: r at the end against D."""
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5), constrained_layout=True)
    colours = {0.0: "tab:blue", 0.1: "tab:green", 0.3: "tab:orange", 0.67: "tab:red"}
    for row, (language, pairs) in enumerate(PAIRS.items()):
        for col, optimizer in enumerate(("adamw", "sgd0.3")):
            ax = axes[row, col]
            for name, found in sorted(results.items()):
                lang, opt, level, init = name.split("/")
                if lang != language or opt != optimizer or init != "random":
                    continue
                ratio = np.nanmean(np.array(found["ratio"]), axis=1)
                for p, (a, b, kind) in enumerate(pairs):
                    ax.plot(found["steps"], ratio[:, p], color=colours[float(level[2:])],
                            linestyle=["-", "--", ":", "-.", (0, (1, 3))][p],
                            label=f"{a}-{b}, {level}")
            ax.axhline(1, color="black", linewidth=0.8)
            ax.set_yscale("log")
            ax.set_title(f"{language}, {optimizer}, random init: r(t) = d / (d(0) D(t))")
            ax.set_xlabel("step")
            ax.legend(fontsize=6, ncol=2)
        ax = axes[row, 2]
        for p, (a, b, kind) in enumerate(pairs):
            for name, found in sorted(results.items()):
                lang, opt, level, init = name.split("/")
                if lang != language:
                    continue
                norm = np.array(found["normalised"])[-1, :, p]
                marker = {"adamw": "o", "sgd0.3": "s"}[opt]
                ax.scatter(np.full(len(norm), found["decay"][-1]) * (1 + 0.04 * p), norm,
                           marker=marker, s=14, color=f"C{p}",
                           facecolors="none" if init == "symmetric" else None,
                           label=f"{a}-{b} ({kind})" if (opt, level, init) == (
                               "adamw", "wd0", "random") else None)
        ax.set_xscale("log")
        ax.set_xlim(0.025, 1.6)
        ax.set_xticks([0.036, 0.23, 0.61, 1.0], ["0.036", "0.23", "0.61", "1"])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("D at the last step (levels 0.67, 0.3, 0.1, 0; pairs offset)")
        ax.set_ylabel("normalised input distance, each seed")
        ax.set_title(f"{language}: o AdamW, □ SGD; open: symmetric init")
        ax.legend(fontsize=7)
    fig.savefig(path, dpi=110)


def main(out: Path) -> None:
    results = {}
    for run_dir in sorted((out / "runs").glob("*/*")):
        language = run_dir.parent.name
        optimizer, level, init = run_dir.name.split("-")
        if not is_run(run_dir) or not dhwt.load_run(run_dir).steps:
            continue
        run = dhwt.load_run(run_dir)
        if run.steps[-1] != run.config.optim.steps:
            continue  # unfinished
        results[f"{language}/{optimizer}/{level}/{init}"] = measure(run_dir, language)
    (out / "results.json").write_text(json.dumps(results))
    lines = table(results)
    main_run = out / "main" / "exor4" / "main-untied"
    if is_run(main_run) and dhwt.load_run(main_run).steps:
        lines += main_job(measure(main_run, "exor4"))
    (HERE / "results.md").write_text(f"{RESULTS_HEAD}\n" + "\n".join(lines) + "\n", "utf-8")
    print("\n".join(lines))
    (HERE / "figures").mkdir(exist_ok=True)
    figure(results, HERE / "figures" / "input_side.png")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
