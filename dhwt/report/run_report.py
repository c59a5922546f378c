"""The end of a run: figures/training.png (loss and accuracy curves) and a short report.md,
read from the run's metrics.jsonl.

Both are written to a temporary file and renamed. dhwt.report.figures (matplotlib) is imported
when a figure is drawn, not with this module.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from dhwt.config.checks import format_seeds
from dhwt.config.run import TrainConfig
from dhwt.config.schedule import TieEvent
from dhwt.directories import atomic_write_bytes
from dhwt.languages import GroundTruth
from dhwt.runs import layout
from dhwt.runs.metrics import read_metrics

#: test: the last step only; population: exact, where record.population_every asks for it.
SPLITS = ("train", "valid", "test", "train_fresh", "population")


def write_run_report(run_dir: Path, config: TrainConfig,
                     truth: GroundTruth | None) -> list[dict[str, object]]:
    """Write the figure and report.md of the run in `run_dir` (trained to config.optim.steps); return
    the metric lines of its last step."""
    records = read_metrics(run_dir / layout.METRICS)
    final = [r for r in records if r["step"] == config.optim.steps]
    events = config.tying.tie_schedule.events
    write_figure(records, run_dir / layout.FIGURE, truth, events)
    write_report(run_dir / layout.REPORT, config, final, truth)
    return final


def write_figure(records: list[dict[str, object]], path: Path, truth: GroundTruth | None,
                 events: tuple[TieEvent, ...] = ()) -> None:
    """Loss and accuracy against step: one line per member and split; the task's Bayes optimum
    (dashed), the unigram baseline of always predicting the target marginal (dotted) and the
    tie-schedule switches (vertical lines)."""
    from dhwt.report.figures import new_figure, save, step_axis

    curves: dict[tuple[str, str], dict[int, list[tuple[int, float]]]] = defaultdict(
        lambda: defaultdict(list))
    for r in records:
        for metric in ("loss", "accuracy"):
            curves[(metric, r["split"])][r["member"]].append((r["step"], r[metric]))
    fig = new_figure(10, 4)
    colours = dict(zip(SPLITS, ("tab:blue", "tab:orange", "tab:red", "tab:green", "black")))
    for ax, metric in zip(fig.subplots(1, 2), ("loss", "accuracy")):
        for split in SPLITS:
            members = curves.get((metric, split), {})
            for i, points in sorted(members.items()):
                steps, values = zip(*points)
                ax.plot(steps, values, color=colours[split], alpha=0.8 if len(members) == 1 else 0.35,
                        linewidth=1, label=split if i == 0 else None)
        if truth is not None:  # text tasks have no exact ground truth
            bayes, marginal = ((truth.bayes_cross_entropy, truth.marginal_entropy)
                               if metric == "loss" else (truth.bayes_accuracy,
                                                         truth.marginal_accuracy))
            ax.axhline(bayes, color="black", linestyle="--", linewidth=1,
                       label=f"Bayes optimum {bayes:.3f}")
            ax.axhline(marginal, color="grey", linestyle=":", linewidth=1,
                       label=f"unigram baseline {marginal:.3f}")
        for event in events:
            ax.axvline(event.step, color="purple", linewidth=0.8, alpha=0.6)
            ax.annotate(str(event), (event.step, 1), xycoords=("data", "axes fraction"),
                        fontsize="small", color="purple", rotation=90, va="top", ha="right")
        step_axis(ax)
        ax.set_ylabel(metric)
        ax.legend(fontsize="small")
    fig.suptitle("one line per member; train/valid: fixed evaluation sets, train_fresh: new draws")
    save(fig, path)


def write_report(path: Path, config: TrainConfig, final: list[dict[str, object]],
                 truth: GroundTruth | None) -> None:
    """report.md: the config in brief, final metrics per member against the task's Bayes optimum
    (from its ground truth), pointers to the figure and the files."""
    data = (f"grammar `{config.data.grammar}` (dataset in `data/`)" if config.data.grammar is not None
            else f"corpus `{config.data.corpus}`, tokenizer `{config.data.tokenizer}`, windows of "
                 f"{config.data.seq_len} tokens" if config.data.corpus is not None
            else f"dataset `{config.data.data}`")
    lines = [
        "# Training run", "",
        f"- data: {data}, objective {config.data.objective}",
        f"- model: {config.model.n_layers} layer(s), {config.model.n_heads} head(s), d_model {config.model.d_model}, "
        f"d_ff {config.model.d_ff}, {config.model.activation}, {config.model.norm}-LN, positions {config.model.positions}",
        f"- seeds {format_seeds(config.members.seeds)}; tie schedule `{config.tying.tie_schedule}`, "
        f"tie penalty {config.tying.tie_penalty}",
        f"- {config.optim.steps} steps, batch {config.optim.batch_size or 'full'}, AdamW lr {config.optim.lr} "
        f"({config.optim.lr_schedule}, warmup {config.optim.warmup_steps}), weight decay {config.optim.weight_decay}",
        "- full config: `config.toml`", "",
        f"## Final metrics (step {config.optim.steps})", "",
        "Accuracy is the probability-weighted share of loss positions predicted right; "
        "`train_fresh` is a new draw of training batches (fresh variants and masks).",
    ]
    if truth is None:  # a text task: no exact optimum to compare with; perplexity = exp(loss)
        lines += ["", "| seed | split | loss | perplexity | accuracy |", "|---:|---|---:|---:|---:|"]
    else:
        lines += [
            f"The task's Bayes optimum: accuracy **{truth.bayes_accuracy:.4f}**, cross-entropy "
            f"**{truth.bayes_cross_entropy:.4f}** nats; always predicting the target marginal "
            f"gives accuracy {truth.marginal_accuracy:.4f}, cross-entropy "
            f"{truth.marginal_entropy:.4f}.",
            "", "| seed | split | loss | accuracy | accuracy - Bayes |", "|---:|---|---:|---:|---:|"]
    for r in sorted(final, key=lambda r: (r["member"], SPLITS.index(r["split"]))):
        gap = "" if truth is None else f" {r['accuracy'] - truth.bayes_accuracy:+.4f} |"
        ppl = f" {math.exp(r['loss']):.2f} |" if truth is None else ""
        lines.append(f"| {r['seed']} | {r['split']} | {r['loss']:.4f} |{ppl} {r['accuracy']:.4f} |"
                     + gap)
    lines += ["", f"Curves: `{layout.FIGURE}`. Metrics per evaluation: `metrics.jsonl`. Embedding "
              "snapshots (input and output, per step): `embeddings/`. Checkpoints: `checkpoints/`.",
              ""]
    atomic_write_bytes(path, "\n".join(lines).encode("utf-8"))
