"""`dhwt.load_run`: a run directory read back, the model rebuilt from a checkpoint alone, and run
directories written by earlier code still read (fixtures/run-d40337b: `dhwt train --grammar
parity --seeds 1-2 --steps 4 --eval-every 2 --snapshot-every 2 --checkpoint-every 2
--tie-schedule untie@2` at commit d40337b, before checkpoints carried `model_args`; its older
checkpoint, figure and lock files were dropped to keep it small); and the run's data, recorded by
its checksum and checked at every later read (check_task)."""

from __future__ import annotations

import re
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from dhwt.config import TrainConfig
from dhwt.errors import DhwtError
from dhwt.languages import load_language, load_task, write_dataset
from dhwt.languages.dataset import FILES, dataset_checksum
from dhwt.runs import load_run
from dhwt.runs.checkpoints import latest_checkpoint
from dhwt.runs.run import check_task, is_finished, is_run
from dhwt.text.corpus import load_corpus
from dhwt.text.text_task import load_text_task
from dhwt.training.runner import train_run

OLD = Path(__file__).parent / "fixtures" / "run-d40337b"
ARGS = ["--grammar", "parity", "--seeds", "1-2", "--steps", "4", "--eval-every", "2",
        "--snapshot-every", "2", "--checkpoint-every", "2", "--tie-schedule", "untie@2"]


@pytest.fixture
def old_run(tmp_path) -> Path:
    """A copy of the fixture (a resume or an analysis writes into it)."""
    return Path(shutil.copytree(OLD, tmp_path / "old"))


@pytest.fixture(scope="module")
def new_run(tmp_path_factory, cli) -> Path:
    """The same command run by today's code."""
    path = tmp_path_factory.mktemp("runs") / "new"
    code, _, err = cli(["train", *ARGS, "--out", path])
    assert code == 0, err
    return path


def _model_embeddings(model) -> tuple[np.ndarray, np.ndarray]:
    emb = model.embeddings
    return emb.input_weight.detach().numpy(), emb.output_weight.detach().numpy()


@pytest.mark.parametrize("which", ["old", "new"])
def test_the_rebuilt_model_holds_the_snapshots_matrices(which, old_run, new_run):
    """Two records of one state agree: the model rebuilt from the newest checkpoint (by its
    model_args, or for the old run from its config and data) has the input and output matrices
    that the snapshot of that step holds, and the tying state the schedule gives (untied)."""
    run = load_run(old_run if which == "old" else new_run)
    assert run.steps == [0, 2, 4] and run.checkpoint_steps[-1] == 4
    assert run.config.members.seeds == [1, 2] and str(run.config.tying.tie_schedule) == "untie@2"
    model = run.model()
    snapshot = run.embeddings(4)
    assert not model.embeddings.tied and snapshot.tied is False
    for got, saved in zip(_model_embeddings(model), (snapshot.input, snapshot.output)):
        np.testing.assert_array_equal(got, saved)
    assert snapshot.vocab == tuple(run.task.vocab)


def test_model_args_and_the_config_give_the_same_model(new_run):
    """A new checkpoint carries model_args; they equal what the config and the data give."""
    run = load_run(new_run)
    _, state = latest_checkpoint(new_run / "checkpoints")
    assert state["model_args"] == asdict(run.model_config())
    a, b = run.model(), run.model(4)
    for x, y in zip(a.state_dict().values(), b.state_dict().values()):
        assert torch.equal(x, y)


def test_an_old_run_resumes_and_is_analysed(old_run, cli):
    code, out, err = cli(["train", "--out", old_run, "--resume", "--steps", 6])
    assert code == 0 and "resumed at step 4 and trained to step 6" in out, err
    assert load_run(old_run).steps == [0, 2, 4, 6]
    code, _, err = cli(["analyze", old_run, "--out", old_run.parent / "report"])
    assert code == 0, err


def test_the_run_is_the_door_to_each_of_its_files(old_run, tmp_path):
    """What analyses read of a run comes from the Run: its snapshots in step order, their
    vocabulary, the tie switches, the grammar-built dataset, whether training finished, and
    where token counts would lie (a grammar run has none)."""
    run = load_run(old_run)
    assert [s.step for s in run.snapshots()] == run.steps == list(run.snapshot_files) == [0, 2, 4]
    assert run.vocab == run.embeddings(0).vocab == tuple(run.task.vocab)
    assert [(e.action, e.step) for e in run.tie_events] == [("untie", 2)]
    assert run.dataset == old_run / "data"
    assert run.finished and is_finished(old_run) and is_run(old_run)
    assert not is_finished(tmp_path) and not is_run(tmp_path)
    assert run.token_counts_file.parent == old_run and not run.token_counts_file.exists()
    assert run.report.is_file() and run.figures == old_run / "figures"  # dropped from the fixture
    assert {r["step"] for r in run.metrics()} == {0, 2, 4}


def test_bad_requests_are_one_line_errors(old_run, tmp_path):
    with pytest.raises(DhwtError, match="is not a dhwt run directory"):
        load_run(tmp_path)
    run = load_run(old_run)
    with pytest.raises(DhwtError, match="no snapshot of step 3; its snapshots are at steps 0, 2, 4"):
        run.embeddings(3)
    with pytest.raises(DhwtError, match="keeps no checkpoint of step 2; it keeps steps 4"):
        run.model(2)


def test_a_run_is_finished_when_its_record_says_so_and_an_old_one_by_its_report(
        old_run, tmp_path, cli):
    """Finished is the run's record (sessions.json: its newest session ended at the configured
    steps), with or without report.md; an old run without that record is finished by its
    report; a run whose newest session did not end (killed in training) is not."""
    import json

    run = tmp_path / "new"
    assert cli(["train", *ARGS, "--out", run])[0] == 0
    (run / "report.md").unlink()
    assert is_finished(run) and load_run(run).finished
    sessions = json.loads((run / "sessions.json").read_text())
    sessions[-1].update(end_utc=None, to_step=None)
    (run / "sessions.json").write_text(json.dumps(sessions))
    assert not is_finished(run)
    assert not (old_run / "sessions.json").exists() and is_finished(old_run)
    (old_run / "report.md").unlink()
    assert not is_finished(old_run)


# ---------------------------------------------------------------------------------------------
# A run records the checksum of its data (config.toml's data_sha256) when it is created, and
# every later read of the data (a resume, an extension, `dhwt analyze`, `Run.task`) refuses data
# that changed since, in one `error:` line, before anything is touched.


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


# ---------------------------------------------------------------------------------------------
# The data given once (dhwt.runs.run.check_task): `train(config, task, ...)` refuses a task that
# is not the data its config names, because the run's report would read one and `dhwt analyze`,
# `--resume` and `load_run(...).task` the other; a config that names no data takes any task.


TINY_CONFIG = dict(d_model=8, n_layers=1, n_heads=2, d_ff=16, seeds=[1], steps=2,
                   eval_every=2, snapshot_every=2, checkpoint_every=2, threads=1)
ONCE = "give the data once: no task"


def test_a_task_of_other_data_is_refused_before_anything_is_written(make_dataset, tmp_path):
    named = make_dataset(overrides={"n_bits": 3})
    other = load_task(make_dataset(overrides={"n_bits": 4}), "mlm")
    with pytest.raises(DhwtError, match=r"the task given is not the data .* the config names: "
                       r"its sequence length is 5, the config's 4; give the data once"):
        train_run(TrainConfig(data=str(named), **TINY_CONFIG), other, tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("change, differs", [
    (dict(seed=15), r"split differs \(other strings in train/valid/test, 7/1/0 in both\)"),
    (dict(overrides={"n_bits": 3, "classes.1.skew": 0.4}), r"language 'parity' has another spec"),
])
def test_the_same_vocabulary_is_not_enough(make_dataset, tmp_path, change, differs):
    other = load_task(make_dataset(**{"overrides": {"n_bits": 3}, **change}), "mlm")
    config = TrainConfig(data=str(make_dataset(overrides={"n_bits": 3})), **TINY_CONFIG)
    with pytest.raises(DhwtError, match=differs):
        check_task(config, tmp_path / "run", other, fresh=True)


def test_the_objective_is_part_of_the_data(make_dataset, tmp_path):
    data = make_dataset(overrides={"n_bits": 3})
    with pytest.raises(DhwtError, match="its objective is 'clm', the config's 'mlm'"):
        check_task(TrainConfig(data=str(data)), tmp_path / "run", load_task(data, "clm"),
                   fresh=True)


def test_a_grammar_with_a_task_is_refused_for_a_new_run(make_task, tmp_path):
    with pytest.raises(DhwtError, match=r"the config names grammar 'parity', which is built into "
                       r".*/run/data only when no task is given; give the data once"):
        train_run(TrainConfig(grammar="parity", **TINY_CONFIG), make_task(), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_named_data_passes_at_its_path_or_in_a_copy(make_dataset, tmp_path):
    data = make_dataset(overrides={"n_bits": 3})
    copy = shutil.copytree(data, tmp_path / "copy")
    result = train_run(TrainConfig(data=str(copy), **TINY_CONFIG), load_task(data, "mlm"), tmp_path / "run")
    assert result.step == 2
    assert load_run(tmp_path / "run").task.vocab == load_task(data, "mlm").vocab


def test_a_config_without_data_takes_any_task(make_task, tmp_path):
    assert train_run(TrainConfig(**TINY_CONFIG), make_task(), tmp_path / "run").step == 2


def test_a_resumed_grammar_run_checks_its_own_dataset(make_task, tmp_path):
    config = TrainConfig(grammar="parity", **TINY_CONFIG)
    train_run(config, None, tmp_path / "run")  # builds run/data from the grammar
    longer = TrainConfig(grammar="parity", **{**TINY_CONFIG, "steps": 4})
    mine = load_task(tmp_path / "run" / "data", "mlm")
    assert train_run(longer, mine, tmp_path / "run", resume=True).step == 4
    with pytest.raises(DhwtError, match="its sequence length is 4, the config's 8"):
        train_run(longer, make_task(overrides={"n_bits": 3}), tmp_path / "run", resume=True)
    with pytest.raises(DhwtError, match="the config names grammar 'parity'"):  # replaced: new
        train_run(config, mine, tmp_path / "run", overwrite=True)


def test_text_corpora_compare_tokens_and_windows(tmp_path, monkeypatch):
    monkeypatch.setenv("DHWT_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split, text in (("train", "a b c d e f\n" * 5), ("valid", "a b c\n" * 4),
                        ("test", "f e d c\n" * 3)):
        (corpus / f"{split}.txt").write_text(text)
    config = TrainConfig(corpus=str(corpus), tokenizer="word", seq_len=4, objective="clm",
                         batch_size=2)
    run = tmp_path / "run"
    check_task(config, run, load_text_task(corpus, "word", 4), fresh=True)
    with pytest.raises(DhwtError, match="its sequence length is 3, the config's 4"):
        check_task(config, run, load_text_task(corpus, "word", 3), fresh=True)
    with pytest.raises(DhwtError, match=r"evaluation windows differ \(train/valid/test 2/"):
        check_task(config, run, load_text_task(corpus, "word", 4, eval_windows=2), fresh=True)
