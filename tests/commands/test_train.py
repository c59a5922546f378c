"""`dhwt train` through the real CLI: a killed run resumed bit for bit, and every bad input
answered with one `error:` line, exit code 2 and nothing written."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dhwt.languages import load_language, write_dataset
from dhwt.runs.checkpoints import latest_checkpoint, list_checkpoints


def _tree(root: Path) -> dict[str, str]:
    """Every file under root (hidden ones too) with a hash of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("datasets") / "parity"
    write_dataset(load_language("parity"), path, seed=14)
    return path


RUN = ["--seeds", "1-2", "--steps", "400", "--tie-schedule", "untie@150", "--checkpoint-every",
       "25", "--eval-every", "20", "--snapshot-every", "50"]


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights(tmp_path, cli):
    """THE kill test: SIGKILL a `--grammar parity` run after a checkpoint exists, --resume it,
    and compare with an uninterrupted run bit for bit."""
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "dhwt", "train", "--grammar", "parity", *RUN, "--out", str(killed)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    target = killed / "checkpoints" / "step_0000125.pt"
    deadline = time.monotonic() + 120
    while not target.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"the run ended before the kill: {proc.stderr.read()}"
    assert latest_checkpoint(killed / "checkpoints")[1]["step"] < 400
    resumed = subprocess.run([sys.executable, "-m", "dhwt", "train", "--out", str(killed),
                              "--resume"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    code, _, err = cli(["train", "--grammar", "parity", *RUN, "--out", str(tmp_path / "straight")])
    assert code == 0, err
    a = latest_checkpoint(tmp_path / "straight" / "checkpoints")[1]
    b = latest_checkpoint(killed / "checkpoints")[1]
    assert a["step"] == b["step"] == 400
    assert a["model"].keys() == b["model"].keys()
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    straight, again = _tree(tmp_path / "straight"), _tree(killed)
    for name in straight:  # metrics, snapshots, data, config: identical files (sessions.json
        # records when each session ran: it differs by nature)
        if name.endswith((".jsonl", ".safetensors", ".toml", ".npz", ".json")) and (
                Path(name).name != "sessions.json"):
            assert straight[name] == again.get(name), name
    assert sorted(straight) == sorted(again)  # no stray temporaries, same files


def test_success_prints_where_the_run_is(tmp_path, dataset, cli):
    code, out, err = cli(["train", "--data", str(dataset), "--steps", "5", "--threads", "1",
                          "--out", str(tmp_path / "run")])
    assert (code, err) == (0, "") and "trained 5 steps" in out
    assert (tmp_path / "run" / "report.md").is_file()


def _make_run(path: Path, dataset: Path, cli) -> None:
    code, _, err = cli(["train", "--data", str(dataset), "--steps", "20", "--checkpoint-every",
                        "10", "--threads", "1", "--out", str(path)])
    assert code == 0, err


BAD = [
    (["--grammar", "parity", "--tie-schedule", "untie@abc"], "not a whole number"),
    (["--grammar", "parity", "--tie-schedule", "untie@-5"], "negative"),
    (["--grammar", "parity", "--steps", "100", "--tie-schedule", "untie@100"], "beyond the end"),
    (["--grammar", "parity", "--tie-schedule", "tied,tie@5"], "already tied"),
    (["--grammar", "parity", "--tie-schedule", "untie@5,tie@9:median"], "unknown merge mode"),
    (["--grammar", "parity", "--tie-penalty", "0.1"], "never untied"),
    (["--grammar", "parity", "--seeds", "5-1"], "runs backwards"),
    (["--grammar", "parity", "--batch-size", "abc"], "neither 'full' nor a whole number"),
    (["--grammar", "parity", "--objective", "xyz"], "--objective"),
    (["--grammar", "parity", "--steps", "0"], "steps must be >= 1"),
    (["--grammar", "no-such-grammar"], "unknown grammar 'no-such-grammar'"),
    (["--grammar", "parity", "--data", "DATA"], "either grammar or data"),
    (["--steps", "10"], "no data: give --grammar"),
    (["--data", "MISSING"], "does not exist"),
    (["--data", "EDITED"], "inconsistent"),
    (["--data", "JUNK"], "JUNK"),
    (["--grammar", "parity", "--config", "MISSING.toml"], "does not exist"),
    (["--grammar", "parity", "--config", "UNKNOWN.toml"], "unknown key 'widht'"),
    (["--grammar", "parity", "--resume", "--overwrite"], "give only one"),
    (["--resume"], "no such directory"),
    (["--grammar", "parity", "--threads", "100000"],
     "threads must be an integer from 1 to 1024, got 100000"),
    (["--grammar", "parity", "--seeds", "1-100000000"],
     "bad seeds '1-100000000': 100,000,000 seeds, more than the 100,000 one run may train"),
    (["--grammar", "parity", "--batch-size", "1000000000000"], "the run needs at least"),
    (["--data", "DATA", "--seeds", "1-3", "--batch-size", "1000000000000"],
     "batches of 1,000,000,000,000 strings"),
    (["--data", "DATA", "--config", "BIG.toml"], "1 member x 4,000,"),
]


@pytest.mark.parametrize("args, fragment", BAD)
def test_bad_input_one_line_exit_2_nothing_written(args, fragment, tmp_path, dataset, cli):
    shutil.copytree(dataset, tmp_path / "JUNK")
    (tmp_path / "JUNK" / "strings.npz").write_bytes(b"not a numpy archive")
    shutil.copytree(dataset, tmp_path / "EDITED")
    spec = tmp_path / "EDITED" / "spec.toml"
    spec.write_text(spec.read_text().replace("n_bits = 7", "n_bits = 6"))
    (tmp_path / "UNKNOWN.toml").write_text("widht = 3\n")
    (tmp_path / "BIG.toml").write_text("d_model = 1000000\n")  # 4 x 10^12 weights: 64 TB
    names = {"BIG.toml": str(tmp_path / "BIG.toml"),"DATA": str(dataset), "MISSING": str(tmp_path / "missing"),
             "JUNK": str(tmp_path / "JUNK"), "EDITED": str(tmp_path / "EDITED"),
             "MISSING.toml": str(tmp_path / "missing.toml"),
             "UNKNOWN.toml": str(tmp_path / "UNKNOWN.toml")}
    before = _tree(tmp_path)
    code, out, err = cli(["train", *[names.get(a, a) for a in args], "--out",
                          str(tmp_path / "run")])
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert fragment in err
    assert _tree(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "BIG.toml", "EDITED", "JUNK", "UNKNOWN.toml"]


def test_existing_run_dir_is_refused_without_overwrite(tmp_path, dataset, cli):
    _make_run(tmp_path / "run", dataset, cli)
    before = _tree(tmp_path)
    code, _, err = cli(["train", "--data", str(dataset), "--out", str(tmp_path / "run")])
    assert code == 2 and "already exists; pass --overwrite" in err and _tree(tmp_path) == before
    code, _, err = cli(["train", "--data", str(dataset), "--steps", "3", "--overwrite",
                        "--out", str(tmp_path / "run")])
    assert code == 0 and list_checkpoints(tmp_path / "run" / "checkpoints")[-1].name == (
        "step_0000003.pt")


@pytest.mark.parametrize("damage, args, fragment", [
    ("truncate", [], "step_0000020.pt is truncated or corrupt"),
    (None, ["--lr", "0.01"], "cannot resume"),
    (None, ["--steps", "10"], "may extend it, not shorten it"),
    (None, ["--config", "x.toml"], "--config is for new runs"),
])
def test_resume_errors_leave_the_run_untouched(damage, args, fragment, tmp_path, dataset, cli):
    run = tmp_path / "run"
    _make_run(run, dataset, cli)
    if damage:
        newest = list_checkpoints(run / "checkpoints")[-1]
        newest.write_bytes(newest.read_bytes()[:-100])
    before = _tree(tmp_path)
    code, _, err = cli(["train", "--out", str(run), "--resume", *args])
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert fragment in err and _tree(tmp_path) == before


def test_resume_with_fewer_steps_says_steps_only_extend_a_run(tmp_path, dataset, cli):
    """Not the tie switch, which lies beyond the shorter run's end: the steps are what is wrong."""
    run = tmp_path / "run"
    code, _, err = cli(["train", "--data", str(dataset), "--steps", "20", "--tie-schedule",
                        "untie@15", "--checkpoint-every", "10", "--out", str(run)])
    assert code == 0, err
    before = _tree(tmp_path)
    code, out, err = cli(["train", "--out", str(run), "--resume", "--steps", "10"])
    assert (code, out) == (2, "") and err == (
        f"error: cannot resume {run} with steps = 10: the run is configured for 20 steps, and "
        "--steps may extend it, not shorten it\n")
    assert _tree(tmp_path) == before


def test_a_model_torch_cannot_allocate_is_one_line(tmp_path, dataset, cli, monkeypatch):
    """Where the memory available cannot be read, nothing is refused beforehand; torch's
    allocator then refuses 64 TB of weights, which is one error line and leaves nothing."""
    monkeypatch.setattr("dhwt.training.trainer.available_memory", lambda device: None)
    (tmp_path / "big.toml").write_text("d_model = 1000000\n")
    code, out, err = cli(["train", "--data", str(dataset), "--config", tmp_path / "big.toml",
                          "--out", tmp_path / "run"])
    assert (code, out) == (2, "") and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: cannot allocate the model of {tmp_path / 'run'} on device "
                          "cpu: can't allocate memory: you tried to allocate ")
    assert not (tmp_path / "run").exists()


def test_grammar_set_overrides_the_spec_as_synth_does_and_is_recorded(tmp_path, cli):
    """`train --grammar G --set K=V` builds RUN_DIR/data as `synth --grammar G --set K=V` builds
    its dataset; config.toml records the overrides, so a resume (repeating them or not) reads
    them back, and other overrides are refused."""
    run, synth = tmp_path / "run", tmp_path / "synth"
    sets = ["--set", "n_bits=3", "--set", "classes.1.skew=0.5"]
    code, _, err = cli(["train", "--grammar", "parity", *sets, "--steps", "4",
                        "--checkpoint-every", "2", "--out", run])
    assert code == 0, err
    assert cli(["synth", "--grammar", "parity", *sets, "--out", synth])[0] == 0
    for name in ("spec.toml", "strings.npz", "truth.json"):
        assert (run / "data" / name).read_bytes() == (synth / name).read_bytes(), name
    assert '[data.set]\nn_bits = 3\n"classes.1.skew" = 0.5\n' in (run / "config.toml").read_text()
    (run / "checkpoints" / "step_0000004.pt").unlink()
    code, out, err = cli(["train", "--out", run, "--resume", *sets])
    assert code == 0 and "resumed at step 2" in out, err
    code, _, err = cli(["train", "--out", run, "--resume", "--set", "n_bits=4"])
    assert code == 2 and err.startswith(f"error: cannot resume {run} with set = {{'n_bits': 4}}")


def test_grammar_set_in_a_config_file_is_the_flag_as_a_table(tmp_path, cli):
    (tmp_path / "flat.toml").write_text('grammar = "parity"\nset = { n_bits = 3 }\n')
    (tmp_path / "tables.toml").write_text('[data]\ngrammar = "parity"\n[data.set]\nn_bits = 3\n')
    for name in ("flat", "tables"):
        code, _, err = cli(["train", "--config", tmp_path / f"{name}.toml", "--steps", "1",
                            "--out", tmp_path / name])
        assert code == 0, err
        assert "n_bits = 3\n" in (tmp_path / name / "data" / "spec.toml").read_text()


@pytest.mark.parametrize("args, message", [
    (["--data", "DATA", "--set", "n_bits=3"],
     "set (overrides of a grammar's spec, --set) needs grammar; a dataset or corpus is used as "
     "it is"),
    (["--grammar", "parity", "--set", "n_bits"], "--set takes KEY=VALUE (e.g. n_bits=5), got "
                                                 "'n_bits'"),
    (["--grammar", "parity", "--set", "n_bits=0"], "'n_bits' must be an integer from 1 to 30"),
])
def test_bad_grammar_sets_are_one_line_and_write_nothing(args, message, tmp_path, dataset, cli):
    code, out, err = cli(["train", *[str(dataset) if a == "DATA" else a for a in args],
                          "--out", tmp_path / "run"])
    assert (code, out) == (2, "") and err.startswith("error: ") and err.count("\n") == 1
    assert message in err and not (tmp_path / "run").exists()


def test_a_run_on_a_dataset_records_the_datasets_split_not_unused_options(tmp_path, dataset,
                                                                           cli):
    """The split options shape a grammar's dataset only: a run on a dataset leaves them unset
    (config.toml says the split is the dataset's); stated in a config file, they must be the
    ones the dataset was built with (parity: 128 strings, 0.1 and 0.1 of them round to 13)."""
    code, _, err = cli(["train", "--data", dataset, "--steps", "1", "--out", tmp_path / "plain"])
    assert code == 0, err
    text = (tmp_path / "plain" / "config.toml").read_text()
    for name in ("valid_fraction", "test_fraction", "split_seed"):
        assert f"\n# {name} = (not set: the dataset's own split)\n" in text
        assert f"\n{name} = " not in text
    (tmp_path / "wrong.toml").write_text("valid_fraction = 0.3\n")
    code, out, err = cli(["train", "--data", dataset, "--config", tmp_path / "wrong.toml",
                          "--out", tmp_path / "wrong"])
    assert (code, out) == (2, "") and err == (
        "error: valid_fraction 0.3, test_fraction 0.1 and split_seed 14 do not give the split "
        f"of dataset {dataset} (train/valid/test 102/13/13 strings); leave them out: a dataset "
        "keeps the split it was built with\n")
    assert not (tmp_path / "wrong").exists()
    (tmp_path / "right.toml").write_text("valid_fraction = 0.1\nsplit_seed = 14\n")
    code, _, err = cli(["train", "--data", dataset, "--config", tmp_path / "right.toml",
                        "--steps", "1", "--out", tmp_path / "right"])
    assert code == 0, err
    assert "\nvalid_fraction = 0.1\n" in (tmp_path / "right" / "config.toml").read_text()


def test_a_split_that_leaves_half_the_language_out_is_said(tmp_path, cli):
    """four-cases has 4 class strings: the default split holds one out for valid and one for
    test, so training sees half the language, while the report's fit is over all of it."""
    code, out, err = cli(["train", "--grammar", "four-cases", "--objective", "clm", "--steps", "2",
                          "--eval-every", "2", "--out", tmp_path / "run"])
    assert code == 0, err
    said = "training sees 2 of the language's 4 class strings"
    assert out.startswith(f"note: {said}") and "valid_fraction = 0" in out
    assert said in (tmp_path / "run" / "report.md").read_text()
    whole = tmp_path / "whole.toml"
    whole.write_text("valid_fraction = 0.0\ntest_fraction = 0.0\n")
    code, out, err = cli(["train", "--grammar", "four-cases", "--objective", "clm", "--config",
                          whole, "--steps", "2", "--eval-every", "2", "--out", tmp_path / "all"])
    assert code == 0, err
    assert "note" not in out and "training sees" not in (tmp_path / "all" / "report.md").read_text()
