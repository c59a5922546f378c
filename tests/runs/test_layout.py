"""Run directories (dhwt.runs.layout.create_run_dir): created whole or not at all, missing parents
made and removed again on failure, an existing run replaced only with --overwrite."""

from __future__ import annotations

import pytest

from dhwt.directories import LOCK, MARKER
from dhwt.errors import DhwtError
from dhwt.runs.layout import create_run_dir


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
