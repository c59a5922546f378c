"""`dhwt.load_run`: a run directory read back, the model rebuilt from a checkpoint alone, and run
directories written by earlier code still read (fixtures/run-d40337b: `dhwt train --grammar
parity --seeds 1-2 --steps 4 --eval-every 2 --snapshot-every 2 --checkpoint-every 2
--tie-schedule untie@2` at commit d40337b, before checkpoints carried `model_args`; its older
checkpoint, figure and lock files were dropped to keep it small)."""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from dhwt.errors import DhwtError
from dhwt.runs import load_run
from dhwt.runs.checkpoints import latest_checkpoint
from dhwt.runs.run import is_finished, is_run

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
