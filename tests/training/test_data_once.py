"""The data given once (dhwt.runs.run.check_task): `train(config, task, ...)` refuses a task that
is not the data its config names, because the run's report would read one and `dhwt analyze`,
`--resume` and `load_run(...).task` the other; a config that names no data takes any task."""

from __future__ import annotations

import shutil

import pytest

from dhwt.training.runner import train_run
from dhwt.config import TrainConfig
from dhwt.errors import DhwtError
from dhwt.languages import load_task
from dhwt.runs import load_run
from dhwt.runs.run import check_task
from dhwt.text.text_task import load_text_task

TINY = dict(d_model=8, n_layers=1, n_heads=2, d_ff=16, seeds=[1], steps=2, eval_every=2,
            snapshot_every=2, checkpoint_every=2, threads=1)
ONCE = "give the data once: no task"


def test_a_task_of_other_data_is_refused_before_anything_is_written(make_dataset, tmp_path):
    named = make_dataset(overrides={"n_bits": 3})
    other = load_task(make_dataset(overrides={"n_bits": 4}), "mlm")
    with pytest.raises(DhwtError, match=r"the task given is not the data .* the config names: "
                       r"its sequence length is 5, the config's 4; give the data once"):
        train_run(TrainConfig(data=str(named), **TINY), other, tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("change, differs", [
    (dict(seed=15), r"split differs \(other strings in train/valid/test, 7/1/0 in both\)"),
    (dict(overrides={"n_bits": 3, "classes.1.skew": 0.4}), r"language 'parity' has another spec"),
])
def test_the_same_vocabulary_is_not_enough(make_dataset, tmp_path, change, differs):
    other = load_task(make_dataset(**{"overrides": {"n_bits": 3}, **change}), "mlm")
    config = TrainConfig(data=str(make_dataset(overrides={"n_bits": 3})), **TINY)
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
        train_run(TrainConfig(grammar="parity", **TINY), make_task(), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_named_data_passes_at_its_path_or_in_a_copy(make_dataset, tmp_path):
    data = make_dataset(overrides={"n_bits": 3})
    copy = shutil.copytree(data, tmp_path / "copy")
    result = train_run(TrainConfig(data=str(copy), **TINY), load_task(data, "mlm"), tmp_path / "run")
    assert result.step == 2
    assert load_run(tmp_path / "run").task.vocab == load_task(data, "mlm").vocab


def test_a_config_without_data_takes_any_task(make_task, tmp_path):
    assert train_run(TrainConfig(**TINY), make_task(), tmp_path / "run").step == 2


def test_a_resumed_grammar_run_checks_its_own_dataset(make_task, tmp_path):
    config = TrainConfig(grammar="parity", **TINY)
    train_run(config, None, tmp_path / "run")  # builds run/data from the grammar
    longer = TrainConfig(grammar="parity", **{**TINY, "steps": 4})
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
