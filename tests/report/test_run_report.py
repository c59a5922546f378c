"""A run's report and training figure (dhwt.report.run_report)."""

from __future__ import annotations

from dhwt.config.run import TrainConfig
from dhwt.report.run_report import write_figure, write_report


def test_run_report_without_ground_truth(tmp_path):
    """A text task has no exact truth: the report and figure leave the Bayes lines out."""
    records = [{"step": s, "member": 0, "seed": 1, "split": "train", "loss": 2.0 - s / 10,
                "accuracy": 0.1 * s} for s in (0, 5, 10)]
    write_figure(records, tmp_path / "figures" / "training.png", None, ())
    write_report(tmp_path / "report.md", TrainConfig(data="x", seeds=[1]), records[-1:], None,
                 windows={"train": 12})
    text = (tmp_path / "report.md").read_text()
    assert "| 1 | train | 12 | 1.0000 | 2.72 | 1.0000 |" in text and "Bayes" not in text  # e^1
    assert (tmp_path / "figures" / "training.png").stat().st_size > 0
