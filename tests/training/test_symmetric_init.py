"""symmetric_init: the named groups' input rows start equal, every other weight as drawn; checked
against a run built without it."""

from __future__ import annotations

import pytest
import torch

from dhwt.config import TrainConfig
from dhwt.errors import DhwtError
from dhwt.training.trainer import Trainer


@pytest.fixture(scope="module")
def task(make_task):
    return make_task()


def config(**changes) -> TrainConfig:
    values = dict(grammar="parity", d_model=8, seeds=[5, 6, 7], steps=2, eval_every=2,
                  snapshot_every=2, checkpoint_every=2, tie_schedule="untied")
    return TrainConfig(**{**values, **changes})


@pytest.mark.parametrize("schedule", ["untied", "tied"])
def test_each_symbol_starts_with_its_groups_first_row(task, tmp_path, schedule):
    groups = [["0b", "0a"], ["1a", "1b"]]
    plain = Trainer([(config(tie_schedule=schedule), tmp_path / "plain")], task).model
    equal = Trainer([(config(tie_schedule=schedule, symmetric_init=groups), tmp_path / "equal")],
                    task).model
    index = {s: i for i, s in enumerate(task.vocab)}
    drawn, started = plain.embeddings.input_weight, equal.embeddings.input_weight
    for first, other in groups:
        assert torch.equal(started[:, index[other]], drawn[:, index[first]])
        assert torch.equal(started[:, index[first]], drawn[:, index[first]])
    assert not torch.equal(drawn[:, index["0a"]], drawn[:, index["0b"]])
    kept = [i for s, i in index.items() if s not in ("0a", "1b")]
    assert torch.equal(started[:, kept], drawn[:, kept])
    for (name, a), (_, b) in zip(plain.named_parameters(), equal.named_parameters()):
        if name != "embeddings.input_weight":
            assert torch.equal(a, b), name


def test_a_symbol_outside_the_task_is_an_error(task, tmp_path):
    with pytest.raises(DhwtError, match="symmetric_init names '2a', which is not a symbol of "
                                        "the task \\(its symbols: '0a', '0b'"):
        Trainer([(config(symmetric_init=[["0a", "2a"]]), tmp_path / "run")], task)


@pytest.mark.parametrize("value, message", [
    ("0a,0b", "symmetric_init must be a list of groups of two or more symbols"),
    ([["0a"]], "symmetric_init must be a list of groups of two or more symbols"),
    ([["0a", 1]], "symmetric_init must be a list of groups of two or more symbols"),
    ([["0a", "0b"], ["0a", "1a"]], "symmetric_init names '0a' twice"),
])
def test_bad_groups_are_one_line_errors(value, message):
    with pytest.raises(DhwtError, match=message):
        config(symmetric_init=value)


def test_the_groups_are_written_and_read_back(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(config(symmetric_init=[["0a", "0b"]]).to_toml())
    assert TrainConfig.from_toml(path).members.symmetric_init == [["0a", "0b"]]
    assert TrainConfig.from_toml(path) == config(symmetric_init=[["0a", "0b"]])
