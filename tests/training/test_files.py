"""metrics.jsonl truncation, snapshots, and all-or-nothing run directories."""

from __future__ import annotations

import json

import pytest
import torch

from dhwt.errors import DhwtError
from dhwt.runs.metrics import MetricsWriter, read_metrics, truncate_metrics
from dhwt.directories import LOCK, MARKER
from dhwt.runs.layout import create_run_dir
from dhwt.runs.snapshots import read_snapshot
from dhwt.runs.snapshots import remove_snapshots_after, save_snapshot


def test_metrics_truncate_drops_later_lines_and_a_half_written_tail(tmp_path):
    path = tmp_path / "metrics.jsonl"
    w = MetricsWriter(path)
    w.write([{"step": s, "loss": s / 10} for s in (0, 10, 20, 30)])
    w.close()
    with open(path, "a") as fh:
        fh.write('{"step": 40, "lo')  # killed mid-line
    assert [r["step"] for r in read_metrics(path)] == [0, 10, 20, 30]
    truncate_metrics(path, 20)
    assert path.read_text() == "".join(json.dumps({"step": s, "loss": s / 10}) + "\n"
                                       for s in (0, 10, 20))


def test_metrics_corrupt_middle_line_is_an_error(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\nnot json\n{"step": 1}\n')
    with pytest.raises(DhwtError, match="line 2 is not valid JSON"):
        read_metrics(path)


def test_snapshot_round_trip_and_removal(tmp_path):
    x = torch.randn(2, 5, 3)
    for step in (0, 100, 200):
        save_snapshot(tmp_path, step, x, x + 1, tied=False, seeds=[4, 9], vocab=("a", "b", "[M]"))
    snap = read_snapshot(tmp_path / "step_0000100.safetensors")  # safetensors' own reader
    assert torch.equal(torch.from_numpy(snap.input), x)
    assert torch.equal(torch.from_numpy(snap.output), x + 1)
    assert (snap.step, snap.tied, snap.seeds, snap.vocab) == (100, False, (4, 9), ("a", "b", "[M]"))
    remove_snapshots_after(tmp_path, 100)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_0000000.safetensors",
                                                          "step_0000100.safetensors"]


def test_run_dir_created_whole_or_not_at_all(tmp_path):
    run = tmp_path / "run"

    def fail(staging):
        (staging / "data").mkdir()
        raise DhwtError("dataset is broken")

    with pytest.raises(DhwtError, match="dataset is broken"):
        create_run_dir(run, "steps = 1\n", fill=fail)
    assert list(tmp_path.iterdir()) == []
    def dataset(staging):  # a dataset of dhwt's, as dhwt.languages.write_dataset marks it
        (staging / "data").mkdir()
        (staging / "data" / MARKER).write_text('{"kind": "dataset"}')
        return 7

    with create_run_dir(run, "steps = 1\n", fill=dataset) as held:
        assert held.value == 7 and held.path == run
    assert sorted(p.name for p in run.iterdir()) == [MARKER, LOCK, "checkpoints", "config.toml",
                                                     "data", "embeddings", "figures"]
    with pytest.raises(DhwtError, match="already exists; pass --overwrite"):
        create_run_dir(run, "steps = 2\n")
    with pytest.raises(DhwtError, match="dataset is broken"):
        create_run_dir(run, "steps = 2\n", overwrite=True, fill=fail)
    assert (run / "config.toml").read_text() == "steps = 1\n"  # the old run survives a failure
    create_run_dir(run, "steps = 2\n", overwrite=True).release()
    assert (run / "config.toml").read_text() == "steps = 2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_run_dir_makes_missing_parents_and_removes_them_on_failure(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "kept").write_text("x")
    deep = tmp_path / "runs" / "a" / "b" / "run"

    def fail(staging):
        raise DhwtError("dataset is broken")

    with pytest.raises(DhwtError, match="dataset is broken"):
        create_run_dir(deep, "steps = 1\n", fill=fail)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["kept"]
    create_run_dir(deep, "steps = 1\n").release()
    assert (deep / "config.toml").read_text() == "steps = 1\n"
    with pytest.raises(DhwtError, match=f"{tmp_path / 'runs' / 'kept'} is not a directory"):
        create_run_dir(tmp_path / "runs" / "kept" / "x" / "run", "steps = 1\n")


def test_snapshot_bytes_are_reproducible_and_read_by_safetensors(tmp_path):
    """Equal snapshots are equal files, and the safetensors library reads them (an independent
    reader of the hand-written format)."""
    from safetensors.numpy import load_file

    x = torch.arange(24, dtype=torch.float32).view(2, 3, 4) / 7
    a = save_snapshot(tmp_path / "a", 5, x, -x, tied=True, seeds=[1, 2], vocab=("p", "q", "r"))
    b = save_snapshot(tmp_path / "b", 5, x.clone(), -x, tied=True, seeds=[1, 2],
                      vocab=("p", "q", "r"))
    assert a.read_bytes() == b.read_bytes()
    arrays = load_file(str(a))
    assert (arrays["input"] == x.numpy()).all() and (arrays["output"] == -x.numpy()).all()


def test_run_report_without_ground_truth(tmp_path):
    """A text task has no exact truth: the report and figure leave the Bayes lines out."""
    from dhwt.config.run import TrainConfig
    from dhwt.report.run_report import write_figure, write_report

    records = [{"step": s, "member": 0, "seed": 1, "split": "train", "loss": 2.0 - s / 10,
                "accuracy": 0.1 * s} for s in (0, 5, 10)]
    write_figure(records, tmp_path / "figures" / "training.png", None, ())
    write_report(tmp_path / "report.md", TrainConfig(data="x", seeds=[1]), records[-1:], None,
                 windows={"train": 12})
    text = (tmp_path / "report.md").read_text()
    assert "| 1 | train | 12 | 1.0000 | 2.72 | 1.0000 |" in text and "Bayes" not in text  # e^1
    assert (tmp_path / "figures" / "training.png").stat().st_size > 0
