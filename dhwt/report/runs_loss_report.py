"""The loss section of a report on text runs (dhwt.analysis.runs_loss.RunsLoss): a table of
final values and curves of loss and accuracy over training."""

from __future__ import annotations

from pathlib import Path

from dhwt.analysis.runs_loss import RunsLoss
from dhwt.filenames import ACCURACY_FIGURE, FIGURES, LOSS_FIGURE
from dhwt.report.figures import metric_figure


def loss_lines(result: RunsLoss, out: Path) -> list[str]:
    """Write out/figures/loss_SPLIT.png and accuracy_SPLIT.png; return the markdown section:
    per run, the last evaluation of each split (test perplexity once the run has finished)."""
    lines = ["## Loss (last evaluation; over members: mean ± 95% t-interval, clipped to the "
             "quantity's range where it leaves it, the two groups (count and range of each) "
             "where bimodal, the values where fewer than 3; dhwt.analysis.intervals)", "",
             "| run | split | step | windows | cross-entropy (nats) | perplexity | accuracy |",
             "|---|---|---|---|---|---|---|"]
    for final in result.finals:
        windows = "—" if final.windows is None else f"{final.windows:,}"
        lines.append(f"| {final.run} | {final.split} | {final.step} | {windows} | "
                     f"{final.loss.text(4)} | {final.perplexity:.2f} | {final.accuracy.text(4)} |")
    figures = []
    for split, curves in result.loss.items():
        metric_figure(curves, out / FIGURES / LOSS_FIGURE.format(split),
                      ylabel=f"cross-entropy, nats ({split} set)", log=True,
                      events=result.events)
        metric_figure(result.accuracy[split], out / FIGURES / ACCURACY_FIGURE.format(split),
                      ylabel=f"next-token accuracy ({split} set)", events=result.events)
        figures += [f"![loss ({split})]({FIGURES}/{LOSS_FIGURE.format(split)})", "",
                    f"![accuracy ({split})]({FIGURES}/{ACCURACY_FIGURE.format(split)})", ""]
    if not figures:
        return ["## Loss", "", "No evaluations in metrics.jsonl yet.", ""]
    note = ("Perplexity = exp(mean cross-entropy) under the task's evaluation windowing: "
            "`windows` sequences of the run's seq_len tokens (valid and test: the whole split "
            "cut into consecutive windows; train: a fixed sample of its windows; —: the run's "
            "data is not at hand to count them); the test split is evaluated at a run's last "
            "step only.")
    return lines + ["", note, ""] + figures
