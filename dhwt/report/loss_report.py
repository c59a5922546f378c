"""Loss and accuracy of runs whose task has no exact ground truth (natural text): curves over
training and a table of final values, read from metrics.jsonl. Runs of a synthetic language get
the closeness report instead (dhwt.report.runs_report), which compares with the Bayes optimum.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from dhwt.analysis.intervals import NON_NEGATIVE, SHARE, summarise
from dhwt.report.figures import metric_figure
from dhwt.filenames import FIGURES
from dhwt.runs import load_run
from dhwt.runs.metrics import metric_table

SPLITS = ("valid", "test", "train")  # rows of the table, one run's next to each other
CURVES = ("valid", "train")  # figures: the trainer evaluates "test" at the last step only


def loss_lines(runs: Mapping[str, Path], out: Path) -> list[str]:
    """Write out/figures/loss_SPLIT.png and accuracy_SPLIT.png; return the markdown section:
    per run, the last evaluation of each split (test perplexity once the run has finished)."""
    loaded = {name: load_run(run) for name, run in runs.items()}
    records = {name: run.metrics() for name, run in loaded.items()}
    events = {name: run.tie_events for name, run in loaded.items()}
    lines = ["## Loss (last evaluation; over members: mean ± 95% t-interval, clipped to the "
             "quantity's range where it leaves it, median [quartiles] where bimodal, the values "
             "where fewer than 3; dhwt.analysis.intervals)", "",
             "| run | split | step | cross-entropy (nats) | perplexity | accuracy |",
             "|---|---|---|---|---|---|"]
    for name, rows in records.items():
        for split in SPLITS:
            if not any(r["split"] == split for r in rows):
                continue
            steps, losses = metric_table(rows, split, "loss")
            loss = summarise(losses[-1], bounds=NON_NEGATIVE)
            accuracy = summarise(metric_table(rows, split, "accuracy")[1][-1], bounds=SHARE)
            lines.append(f"| {name} | {split} | {steps[-1]} | {loss.text(4)} | "
                         f"{math.exp(loss.centre):.2f} | {accuracy.text(4)} |")
    figures = []
    for split in CURVES:
        curves = {name: metric_table(r, split, "loss") for name, r in records.items()
                  if any(x["split"] == split for x in r)}
        if not curves:
            continue
        accuracy = {name: metric_table(records[name], split, "accuracy") for name in curves}
        metric_figure(curves, out / FIGURES / f"loss_{split}.png",
                      ylabel=f"cross-entropy, nats ({split} set)", log=True,
                      events=events)
        metric_figure(accuracy, out / FIGURES / f"accuracy_{split}.png",
                      ylabel=f"next-token accuracy ({split} set)", events=events)
        figures += [f"![loss ({split})](figures/loss_{split}.png)", "",
                    f"![accuracy ({split})](figures/accuracy_{split}.png)", ""]
    if not figures:
        return ["## Loss", "", "No evaluations in metrics.jsonl yet.", ""]
    note = ("Perplexity = exp(mean cross-entropy) under the task's evaluation windowing; the "
            "test split is evaluated at a run's last step only.")
    return lines + ["", note, ""] + figures
