"""A run records the checksum of its data (config.toml's data_sha256) when it is created, and
every later read of the data (a resume, an extension, `dhwt analyze`, `Run.task`) refuses data
that changed since, in one `error:` line, before anything is touched."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from dhwt.config import TrainConfig
from dhwt.errors import DhwtError
from dhwt.languages import load_language, write_dataset
from dhwt.languages.dataset import FILES, dataset_checksum
from dhwt.runs import load_run
from dhwt.text.corpus import load_corpus

TINY = ["--steps", "4", "--eval-every", "2", "--snapshot-every", "2", "--checkpoint-every", "2"]


def _replace_dataset(data: Path, tmp_path: Path, **split: object) -> None:
    """Put another dataset's files (parity of 3 bits, another split) in place of `data`'s."""
    other = tmp_path / "other-data"
    write_dataset(load_language("parity", {"n_bits": 3}), other, **split)
    for name in FILES:
        shutil.copyfile(other / name, data / name)


def _one_error(code: int, err: str) -> str:
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.fixture()
def run(tmp_path, cli) -> Path:
    """A finished 4-step run of `--grammar parity --set n_bits=3`, its dataset in run/data."""
    path = tmp_path / "run"
    code, _, err = cli(["train", "--grammar", "parity", "--set", "n_bits=3", *TINY,
                        "--out", path])
    assert code == 0, err
    return path


def test_a_new_run_records_the_checksum_of_its_dataset(run, tmp_path, cli, make_dataset):
    assert TrainConfig.from_toml(run / "config.toml").data.data_sha256 == \
        dataset_checksum(run / "data")
    data = make_dataset(overrides={"n_bits": 3})
    code, _, err = cli(["train", "--data", data, *TINY, "--out", tmp_path / "on-data"])
    assert code == 0, err
    recorded = TrainConfig.from_toml(tmp_path / "on-data" / "config.toml").data.data_sha256
    assert recorded == dataset_checksum(data) != dataset_checksum(run / "data")  # other split


@pytest.mark.parametrize("extend", [False, True], ids=["resume", "resume --steps"])
def test_resume_refuses_a_changed_dataset_and_touches_nothing(run, tmp_path, cli, extend, file_tree):
    """A resume of an unfinished run, or an extension of a finished one, on a dataset put in
    place of the one it trained on: one error line naming the dataset, the run as it was
    (report.md and config.toml too), rather than a size-mismatch traceback."""
    if not extend:
        (run / "report.md").unlink()
        (run / "checkpoints" / "step_0000004.pt").unlink()
    _replace_dataset(run / "data", tmp_path, seed=7)
    before = file_tree(run)
    code, _, err = cli(["train", "--out", run, "--resume", *(["--steps", "8"] * extend)])
    err = _one_error(code, err)
    assert re.search(rf"dataset {re.escape(str(run / 'data'))} changed since {re.escape(str(run))} "
                     r"was trained on it .*put back the data", err), err
    assert file_tree(run) == before


def test_analyze_and_run_task_refuse_a_changed_dataset(run, tmp_path, cli):
    """The Bayes optimum of another dataset is never reported for the run."""
    _replace_dataset(run / "data", tmp_path, seed=7)
    code, _, err = cli(["analyze", run, "--out", tmp_path / "analysis"])
    assert "changed since" in _one_error(code, err)
    assert not (tmp_path / "analysis").exists()
    with pytest.raises(DhwtError, match="changed since"):
        load_run(run).task


def test_an_extension_that_cannot_restore_keeps_the_report(run, cli, file_tree):
    """Nothing of the run changes before its checkpoint is restored: a damaged one stops
    `--resume --steps` with report.md and config.toml's steps as they were."""
    checkpoint = run / "checkpoints" / "step_0000004.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:-10])
    before = file_tree(run)
    code, _, err = cli(["train", "--out", run, "--resume", "--steps", "8"])
    assert "truncated or corrupt" in _one_error(code, err)
    assert file_tree(run) == before


def test_a_run_made_before_the_record_still_resumes_with_a_note(run, cli):
    config = run / "config.toml"
    config.write_text("".join(line for line in config.read_text().splitlines(keepends=True)
                              if not line.startswith("data_sha256")))
    code, out, err = cli(["train", "--out", run, "--resume", "--steps", "6"])
    assert code == 0, err
    assert "records no checksum of its data" in out and "resumed at step 4" in out
    assert TrainConfig.from_toml(config).data.data_sha256 is None  # not made up afterwards


def test_a_config_that_names_a_checksum_trains_only_on_that_data(run, tmp_path, cli):
    """A run's config.toml repeats the run (the same data) and refuses other data; flags that
    name other data drop the file's checksum."""
    config = run / "config.toml"
    code, _, err = cli(["train", "--config", config, "--out", tmp_path / "again"])
    assert code == 0, err
    other = tmp_path / "other.toml"
    other.write_text(config.read_text().replace("valid_fraction = 0.1", "valid_fraction = 0.2"))
    code, _, err = cli(["train", "--config", other, "--out", tmp_path / "other"])
    assert "is not the data that data_sha256 in the config names" in _one_error(code, err)
    assert not (tmp_path / "other").exists()
    code, _, err = cli(["train", "--config", config, "--grammar", "parity-dh", "--set",
                        "n_bits=3", "--out", tmp_path / "flagged"])
    assert code == 0, err


@pytest.fixture()
def corpus(tmp_path, monkeypatch) -> Path:
    """A corpus folder (train/valid/test.txt); the token cache in tmp_path."""
    monkeypatch.setenv("DHWT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "text"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for split, lines in (("train", 30), ("valid", 5), ("test", 5)):
        (folder / f"{split}.txt").write_text(
            "".join(" ".join(rng.choice(["a", "b", "c", "d"], 5)) + "\n" for _ in range(lines)))
    return folder


def test_a_text_run_records_its_corpus_and_refuses_it_edited(corpus, tmp_path, cli, file_tree):
    run = tmp_path / "text-run"
    code, _, err = cli(["train", "--corpus", corpus, "--tokenizer", "word", "--seq-len", "4",
                        "--objective", "clm", "--batch-size", "2", *TINY, "--out", run])
    assert code == 0, err
    recorded = TrainConfig.from_toml(run / "config.toml").data.data_sha256
    assert recorded == load_corpus(corpus).checksum  # the corpus' own, as the token cache's
    (run / "report.md").unlink()
    (run / "checkpoints" / "step_0000004.pt").unlink()
    with (corpus / "train.txt").open("a") as text:  # same words: the same vocabulary
        text.write("a b c d\n")
    before = file_tree(run)
    code, _, err = cli(["train", "--out", run, "--resume"])
    assert re.search(rf"corpus {re.escape(str(corpus))} changed since", _one_error(code, err))
    assert file_tree(run) == before
