"""The loss section of a text run's report: the final values' intervals stay in each quantity's
range and say where they were clipped."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from dhwt.analysis.runs_loss import runs_loss
from dhwt.report.runs_loss_report import loss_lines
from dhwt.runs import layout
from tests.report.text_runs import make_text_run


@pytest.mark.slow  # trains a tiny run
def test_final_loss_and_accuracy_intervals_stay_in_range(tmp_path):
    run = make_text_run(tmp_path / "run")
    loss, accuracy = [0.001, 0.002, 0.09], [0.999, 0.9995, 0.91]
    rows = [{"step": 4, "member": m, "split": "valid", "loss": loss[m], "accuracy": accuracy[m]}
            for m in range(3)]
    (run / layout.METRICS).write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    (row,) = [line for line in loss_lines(runs_loss({"run": run}), tmp_path / "out")
              if line.startswith("| run | valid |")]
    half = [np.std(v, ddof=1) / np.sqrt(3) * stats.t.ppf(0.975, 2) for v in (loss, accuracy)]
    assert np.mean(loss) - half[0] < 0 and np.mean(accuracy) + half[1] > 1  # raw t-intervals
    assert f"{np.mean(loss):.4f} ± {half[0]:.4f}, clipped to [0.0000, " in row
    assert f"{np.mean(accuracy):.4f} ± {half[1]:.4f}, clipped to [" in row
    assert row.count(", 1.0000]") == 1 and "-0." not in row
