"""metrics.jsonl (dhwt.runs.metrics): truncation after a step and a half-written tail, a corrupt
line; and `--tensorboard`: TensorBoard event files beside metrics.jsonl holding the same numbers,
a resume that shows no step twice, nothing without the flag, and one `error:` line without the
package."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dhwt.config import TrainConfig
from dhwt.errors import DhwtError
from dhwt.runs.metrics import MetricsWriter, read_metrics, truncate_metrics


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


RUN = ["--grammar", "parity", "--seeds", "1-2", "--steps", "30", "--tie-schedule", "untie@15",
       "--eval-every", "5", "--snapshot-every", "30", "--checkpoint-every", "10"]


def _board(run_dir: Path) -> dict[str, dict[str, dict[int, float]]]:
    """{member folder: {tag: {step: value}}} as TensorBoard reads RUN_DIR/tensorboard; asserts
    that no tag shows a step twice."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = {}
    for folder in sorted((run_dir / "tensorboard").iterdir()):
        events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        events.Reload()
        board[folder.name] = {}
        for tag in events.Tags()["scalars"]:
            points = events.Scalars(tag)
            steps = [p.step for p in points]
            assert len(steps) == len(set(steps)), f"{folder.name} {tag}: steps {steps}"
            board[folder.name][tag] = {p.step: p.value for p in points}
    return board


def _expected(run_dir: Path) -> dict[str, dict[str, dict[int, float]]]:
    """What the board should hold, from metrics.jsonl read on its own: per member's seed, each
    line's loss, accuracy and exp(loss) under its split, and lr, tied and gap, as float32."""
    expected: dict[str, dict[str, dict[int, float]]] = {}
    for text in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        line = json.loads(text)
        tags = expected.setdefault(f"seed_{line['seed']}", {})
        split = line["split"]
        for tag, value in ((f"loss/{split}", line["loss"]),
                           (f"accuracy/{split}", line["accuracy"]),
                           (f"perplexity/{split}", math.exp(line["loss"])), ("lr", line["lr"]),
                           ("tied", float(line["tied"])), ("gap", line["gap"])):
            tags.setdefault(tag, {})[line["step"]] = float(np.float32(value))
    return expected


def test_events_hold_the_numbers_of_metrics_jsonl(tmp_path, cli):
    """Every number of every metric line is a scalar at its step, and nothing else is."""
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    code, _, err = cli(["train", *RUN, "--tensorboard", "--out", run])
    assert code == 0, err
    assert sorted(p.name for p in (run / "tensorboard").iterdir()) == ["seed_1", "seed_2"]
    board = _board(run)
    assert board == _expected(run)
    assert sorted(board["seed_1"]["loss/valid"]) == list(range(0, 31, 5))
    assert board["seed_2"]["tied"][10] == 1.0 and board["seed_2"]["tied"][15] == 0.0
    assert "tensorboard = true" in (run / "config.toml").read_text()


def test_a_resume_shows_no_step_twice(tmp_path, cli, interrupt_at):
    """Interrupted at step 27 (events written to step 25, last checkpoint 20) and resumed: the
    event files hold step 25 twice, TensorBoard shows it once, with the resumed run's values,
    which are metrics.jsonl's."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    run = tmp_path / "run"
    interrupt_at(27)
    code, _, err = cli(["train", *RUN, "--tensorboard", "--out", run])
    assert code == 130, err
    # TensorBoard reads a folder's event files in name order, whose first field is the second
    # they were opened in: the resumed run's must come after the killed run's.
    time.sleep(1.01 - time.time() % 1)
    code, _, err = cli(["train", "--out", run, "--resume"])
    assert code == 0, err
    files = sorted((run / "tensorboard" / "seed_1").iterdir())
    assert len(files) == 2
    written = [event.step for path in files for event in EventFileLoader(str(path)).Load()
               if any(v.tag == "loss/valid" for v in event.summary.value)]
    assert written.count(25) == 2 and written.count(20) == 1
    board = _board(run)
    assert board == _expected(run)
    assert sorted(board["seed_1"]["loss/valid"]) == list(range(0, 31, 5))


def test_no_flag_no_folder(tmp_path, cli):
    run = tmp_path / "run"
    code, _, err = cli(["train", "--grammar", "parity", "--steps", "5", "--out", run])
    assert code == 0, err
    assert not (run / "tensorboard").exists()
    assert "tensorboard = false" in (run / "config.toml").read_text()


def test_without_the_package_the_cli_says_so_in_one_line(tmp_path, cli, monkeypatch):
    """Runs everywhere: the import fails as if tensorboard were not installed; exit 2, one
    `error:` line, nothing written."""
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    run = tmp_path / "run"
    code, out, err = cli(["train", *RUN, "--tensorboard", "--out", run])
    assert (code, out, err) == (2, "", "error: --tensorboard needs the tensorboard package: pip "
                                       "install 'dhwt[tensorboard]'\n")
    assert not run.exists()


def test_the_setting_is_where_a_run_logs_not_what_it_computes(tmp_path):
    """A TOML key of [record] (a bool), left out of what a resume must repeat, as device is."""
    config = TrainConfig(grammar="parity", tensorboard=True)
    assert config.record.tensorboard and "[record]" in config.to_toml()
    (tmp_path / "config.toml").write_text(config.to_toml())
    assert TrainConfig.from_toml(tmp_path / "config.toml") == config
    assert config.resume_key() == TrainConfig(grammar="parity").resume_key()
    with pytest.raises(DhwtError, match="^tensorboard must be true or false, got 'yes'$"):
        TrainConfig(grammar="parity", tensorboard="yes")


def test_a_study_passes_it_to_its_runs(tmp_path):
    from dhwt.config.study import StudyConfig

    study = tmp_path / "study.toml"
    study.write_text('[data]\ngrammar = "parity"\n[train]\nsteps = 10\ntensorboard = true\n'
                     '[[runs]]\nname = "tied"\n[[runs]]\nname = "quiet"\ntensorboard = false\n')
    runs = dict(StudyConfig.from_toml(study).runs)
    assert runs["tied"].record.tensorboard and not runs["quiet"].record.tensorboard
