"""The end of a run: figures/training.png (loss and accuracy curves) and a short report.md,
rendered from its numbers (dhwt.analysis.run_end: metrics.jsonl and the exact fit).

Both are written to a temporary file and renamed. dhwt.report.figures (matplotlib) is imported
when a figure is drawn, not with this module.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from dhwt.analysis.escape import SPLIT as POPULATION
from dhwt.analysis.run_end import RunEnd
from dhwt.checks import format_seeds
from dhwt.config.run import TrainConfig
from dhwt.config.schedule import TieEvent
from dhwt.languages import GroundTruth
from dhwt.report.document import write_document
from dhwt.runs import layout
from dhwt.runs.run import Run
from dhwt.text.tokenizers import shortfall

#: Evaluation sets drawn from data (test: the last step only); "population" is the exact fit.
TABLE_SPLITS = ("train", "valid", "test", "train_fresh")
#: The figure's lines: the exact fit where recorded, else the fixed evaluation sets (train_fresh,
#: a new draw each time, stays in the table: in the figure it only adds noise).
FIGURE_SPLITS = (POPULATION, "train", "valid")
COLOURS = {POPULATION: "tab:blue", "train": "tab:blue", "valid": "tab:orange"}
#: `dhwt train` says so when a training split holds at most this share of the language's class
#: strings or of its probability (split_line); the report always does when it holds less than all.
FEW = 0.5


def write_run_report(run_dir: Path, config: TrainConfig, task, end: RunEnd) -> None:
    """Write the figure and report.md of the run in `run_dir` (trained to config.optim.steps) on
    `task`, from its numbers `end` (dhwt.analysis.run_end). Where the task has ground truth, the
    report compares each member's exact fit of the last step with the Bayes optimum."""
    run = Run(run_dir, config)
    write_figure(end.records, run.training_figure, task.truth, run.tie_events)
    write_report(run.report, config, end.final, task.truth, end.exact, len(task.vocab),
                 split_line(task), end.windows)


def _optimizer_line(config: TrainConfig) -> str:
    """The report's line of how the run was optimized."""
    optim = config.optim
    if optim.optimizer == "population":
        return (f"- population fit: {optim.steps} Adam steps at lr {optim.lr}, then up to "
                f"{optim.lbfgs_steps} L-BFGS iterations"
                + (f" and {optim.newton_steps} Newton iterations" if optim.newton_steps else "")
                + f" a member, on CE + {optim.weight_decay:g} / 2 ||θ||² over the whole language")
    name = {"adamw": "AdamW", "sgd": "SGD"}[optim.optimizer]
    return (f"- {optim.steps} steps, batch {optim.batch_size or 'full'}, {name} lr {optim.lr} "
            f"({optim.lr_schedule}, warmup {optim.warmup_steps}), weight decay "
            f"{optim.weight_decay}")


def _certificate(rows: list[dict[str, object]], l2: float) -> list[str]:
    """The certificate of a population fit, a line per member (dhwt.training.population), with
    each member's gap to the best F of the run's members (restarts from other seeds), and where
    Newton ran, its fall past L-BFGS, its iterations and the Hessian's smallest eigenvalue."""
    best = min(float(r["objective"]) for r in rows)
    newton = "min_eigenvalue" in rows[0]
    return ["## Certificate of the population fit", "",
            f"Each member's objective F = cross-entropy + {l2:g} / 2 ||θ||² where it ended, its "
            "gradient norm there, drift: F's fall over the last 100 L-BFGS iterations, or "
            "all of them where fewer ran (small when the fit has stopped moving), and its gap to "
            "the lowest F of this run's members: the objective is not convex, and members from "
            "different seeds are restarts."
            + (" Newton: how much lower trust-region Newton took F past L-BFGS's end, in how "
               "many iterations, and the smallest eigenvalue of the Hessian where it ended "
               "(not below zero to rounding, with a gradient norm near rounding: a local "
               "minimum's second-order necessary conditions; clearly negative: a saddle)."
               if newton else ""), "",
            "| seed | F | gap to the best | gradient norm | drift | L-BFGS iterations |"
            + (" Newton's fall | Newton iterations | smallest eigenvalue |" if newton else ""),
            "|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if newton else ""),
            *(f"| {r['seed']} | {r['objective']:.6f} | {float(r['objective']) - best:.2e} | "
              f"{r['grad_norm']:.2e} | {r['drift']:.2e} | {r['lbfgs_iterations']} |"
              + (f" {r['newton_fall']:.2e} | {r['newton_iterations']} | "
                 f"{r['min_eigenvalue']:+.2e} |" if newton else "")
              for r in rows), ""]


def split_line(task, at_most: float = 1.0) -> str | None:  # noqa: ANN001 (a Task or TextTask)
    """What a synthetic language's task trains on, when its training split holds less than the
    whole language and at most `at_most` of its class strings or of its probability: the exact
    fit and the Bayes optimum are over the whole language, so a model that learned its training
    split well can stay far from them. None otherwise (and for text, which has no language).

    Examples:
        >>> from dhwt.languages import Task, load_language
        >>> from dhwt.languages.splits import split_of
        >>> language = load_language("four-cases")
        >>> print(split_line(Task(language, split_of(language), "clm")))  # the default split
        training sees 2 of the language's 4 class strings (50% of its probability; valid and
        test hold the rest), while the exact fit and the Bayes optimum are over all of it; set
        valid_fraction = 0 and test_fraction = 0 in the config to train on every string
        >>> split_line(Task(language, split_of(language, 0.0, 0.0), "clm")) is None
        True
    """
    language = getattr(task, "language", None)
    if language is None:
        return None
    train = task.indices("train").numpy()
    strings, share = len(train) / len(language.probs), float(language.probs[train].sum())
    if strings == 1 or (strings > at_most and share > at_most):
        return None
    hint = ("" if language.split is not None else "; set valid_fraction = 0 and test_fraction = "
            "0 in the config to train on every string")
    return (f"training sees {len(train):,} of the language's {len(language.probs):,} class "
            f"strings ({share:.0%} of its probability; valid and test hold the rest), while the "
            f"exact fit and the Bayes optimum are over all of it{hint}")


def write_figure(records: list[dict[str, object]], path: Path, truth: GroundTruth | None,
                 events: tuple[TieEvent, ...] = ()) -> None:
    """Loss (log axis: the first steps sit far above the rest) and accuracy against step, one
    line per member of the exact population fit where recorded, else of the fixed evaluation
    sets; the task's Bayes optimum (dashed), the unigram baseline of always predicting the
    target marginal (dotted) and the tie-schedule switches (dotted verticals, labelled)."""
    from dhwt.report.figures import legend_below, log_y, mark_events, new_figure, save, step_axis

    curves: dict[tuple[str, str], dict[int, list[tuple[int, float]]]] = defaultdict(
        lambda: defaultdict(list))
    for r in records:
        for metric in ("loss", "accuracy"):
            curves[(metric, r["split"])][r["member"]].append((r["step"], r[metric]))
    shown = ((POPULATION,) if any(split == POPULATION for _, split in curves)
             else FIGURE_SPLITS[1:])
    fig = new_figure(10, 4.4)
    axes = fig.subplots(1, 2)
    for ax, metric in zip(axes, ("loss", "accuracy")):
        for split in shown:
            members = curves.get((metric, split), {})
            for i, points in sorted(members.items()):
                steps, values = zip(*points)
                ax.plot(steps, values, color=COLOURS[split], lw=1,
                        alpha=0.8 if len(members) == 1 else 0.4,
                        label=(f"{'exact fit' if split == POPULATION else split} "
                               f"({len(members)} member{'s' * (len(members) > 1)})")
                        if i == min(members) else None)
        if truth is not None:  # text tasks have no exact ground truth
            bayes, marginal = ((truth.bayes_cross_entropy, truth.marginal_entropy)
                               if metric == "loss" else (truth.bayes_accuracy,
                                                         truth.marginal_accuracy))
            ax.axhline(bayes, color="black", linestyle="--", linewidth=1,
                       label=f"Bayes optimum ({truth.bayes_cross_entropy:.3f} nats, accuracy "
                             f"{truth.bayes_accuracy:.2f})")
            ax.axhline(marginal, color="grey", linestyle=":", linewidth=1,
                       label=f"unigram baseline ({truth.marginal_entropy:.3f} nats, accuracy "
                             f"{truth.marginal_accuracy:.2f})")
        mark_events(ax, events)
        step_axis(ax)
        ax.grid(alpha=0.3)
    log_y(axes[0])
    axes[0].set_ylabel("cross-entropy, nats")
    axes[1].set_ylabel("accuracy")
    axes[1].set_ylim(0, 1)
    legend_below(fig, axes, "one line per member: " + (
        "the exact fit over every context of the language" if shown == (POPULATION,) else
        "train / valid: evaluation sets drawn once"))
    save(fig, path)


def _vocabulary(tokenizer: str, size: int | None) -> str:
    """' (N tokens)' after a corpus's tokenizer, saying when bpe:N learned fewer than asked."""
    if size is None:
        return ""
    return f" ({shortfall(tokenizer, size) or f'{size:,} tokens'})"


def write_report(path: Path, config: TrainConfig, final: list[dict[str, object]],
                 truth: GroundTruth | None, exact: list[dict[str, object]] = (),
                 vocab_size: int | None = None, split: str | None = None,
                 windows: dict[str, int] | None = None) -> None:
    """report.md: the config in brief (a corpus's tokenizer with its `vocab_size`); where the
    task has ground truth, each member's exact fit (`exact`: seed, loss, accuracy) against the
    Bayes optimum, after the `split` line (split_line) where there is one; the final
    evaluation-set metrics (a text task: with the windows of each split, `windows`); pointers
    to the figure and the files."""
    data = (f"grammar `{config.data.grammar}` (dataset in `data/`)" if config.data.grammar is not None
            else f"corpus `{config.data.corpus}`, tokenizer `{config.data.tokenizer}`"
                 f"{_vocabulary(config.data.tokenizer, vocab_size)}, windows of "
                 f"{config.data.seq_len} tokens" if config.data.corpus is not None
            else f"dataset `{config.data.data}`")
    lines = [
        "# Training run", "",
        f"- data: {data}, objective {config.data.objective}",
        f"- model: {config.model.n_layers} layer(s), {config.model.n_heads} head(s), d_model {config.model.d_model}, "
        f"d_ff {config.model.d_ff}, {config.model.activation}, {config.model.norm}-LN, positions {config.model.positions}",
        f"- seeds {format_seeds(config.members.seeds)}; tie schedule `{config.tying.tie_schedule}`, "
        f"tie penalty {config.tying.tie_penalty}",
        _optimizer_line(config),
        "- full config: `config.toml`", "",
    ]
    if truth is not None:
        lines += [
            f"## Exact fit (step {config.optim.steps})", "",
            "Over every context of the language, weighted by its probability "
            "(dhwt.analysis.population): no sampling noise, never below the optimum. The "
            f"task's Bayes optimum: cross-entropy **{truth.bayes_cross_entropy:.4f}** nats, "
            f"accuracy **{truth.bayes_accuracy:.4f}**; always predicting the target marginal "
            f"gives {truth.marginal_entropy:.4f} nats, accuracy {truth.marginal_accuracy:.4f}.",
            *(["", f"Note: {split}."] if split is not None else []),
            "", "| seed | cross-entropy | excess over Bayes | expected accuracy | "
            "accuracy - Bayes |", "|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['seed']} | {r['loss']:.4f} | {r['loss'] - truth.bayes_cross_entropy:+.4f}"
                  f" | {r['accuracy']:.4f} | {r['accuracy'] - truth.bayes_accuracy:+.4f} |"
                  for r in exact]
        lines.append("")
        if any("grad_norm" in r for r in exact):
            lines += _certificate(exact, config.optim.weight_decay)
    lines += [
        f"## Evaluation sets (step {config.optim.steps})", "",
        "Accuracy is the probability-weighted share of loss positions predicted right; "
        "`train_fresh` is a new draw of training batches (fresh variants and masks)"
        + ("; all are samples, which scatter around the exact fit above (valid and test: "
           "held-out strings)." if truth is not None else "."),
    ]
    if truth is None:  # a text task: no exact optimum to compare with; perplexity = exp(loss)
        lines[-1] += (" Windows: the sequences evaluated (valid and test: the whole split cut "
                      "into consecutive windows; train: a fixed sample of them; train_fresh: "
                      "one training batch per member).")
        lines += ["", "| seed | split | windows | loss | perplexity | accuracy |",
                  "|---:|---|---:|---:|---:|---:|"]
    else:
        lines += ["", "| seed | split | loss | accuracy |", "|---:|---|---:|---:|"]
    for r in sorted((r for r in final if r["split"] in TABLE_SPLITS),
                    key=lambda r: (r["member"], TABLE_SPLITS.index(r["split"]))):
        count = (windows or {}).get(r["split"])
        cell = "" if truth is not None else f" {'—' if count is None else f'{count:,}'} |"
        ppl = f" {math.exp(r['loss']):.2f} |" if truth is None else ""
        lines.append(f"| {r['seed']} | {r['split']} |{cell} {r['loss']:.4f} |{ppl} "
                     f"{r['accuracy']:.4f} |")
    lines += ["", f"![loss and accuracy over training]({layout.FIGURE})", "",
              "Metrics per evaluation: `metrics.jsonl`. Embedding snapshots (input and output, "
              "per step): `embeddings/`. Checkpoints: `checkpoints/`.", ""]
    write_document(path, "\n".join(lines))
