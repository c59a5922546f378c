"""vary, init_from, redraw, freeze and symmetric_init (dhwt.training.members), and chunked
evaluation: checked against weights and batches built independently (fresh models, the source
checkpoint, a run built without symmetric_init)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dhwt.config import TrainConfig
from dhwt.errors import DhwtError
from dhwt.models import build_model
from dhwt.runs.checkpoints import latest_checkpoint
from dhwt.text.text_task import TextTask
from dhwt.training.ensemble import chunked_metrics, member_loss, repeat_batch
from dhwt.training.members import EMBEDDINGS, INPUT, OUTPUT
from dhwt.training.runner import train_run
from dhwt.training.trainer import Trainer, model_config

VOCAB = 12


def text_task(seq_len: int = 6) -> TextTask:
    rng = np.random.default_rng(0)
    ids = {split: rng.integers(0, VOCAB, n) for split, n in
           (("train", 400), ("valid", 47), ("test", 33))}
    return TextTask(ids, tuple(f"t{i}" for i in range(VOCAB)), seq_len)


def config(**changes) -> TrainConfig:
    values = dict(objective="clm", d_model=8, n_layers=1, n_heads=2, d_ff=16, dropout=0.1,
                  positions="sinusoidal", tie_schedule="untied", seeds=[3, 4], steps=3,
                  batch_size=4, lr=1e-2, eval_every=3, snapshot_every=3, checkpoint_every=3)
    return TrainConfig(**{**values, **changes})


def weights(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_vary_embeddings_shares_the_body_and_the_batches_only(tmp_path):
    task = text_task()
    shared = Trainer([(config(vary="embeddings"), tmp_path / "a")], task)
    alone = Trainer([(config(), tmp_path / "b")], task)
    first = build_model(model_config(config(), task), [3], tied=False)  # seed 3 on its own
    body = weights(first)
    for name, value in weights(shared.model).items():
        if name in EMBEDDINGS:
            assert not torch.equal(value[0], value[1])
            assert torch.equal(value, weights(alone.model)[name])  # each member's own draw
        else:
            assert torch.equal(value[0], value[1]) and torch.equal(value[0], body[name][0])
    batch = task.train_batches(shared.streams["data"], shared.config.optim.batch_size)
    assert torch.equal(batch.inputs[0], batch.inputs[1])
    other = task.train_batches(alone.streams["data"], alone.config.optim.batch_size)
    assert not torch.equal(other.inputs[0], other.inputs[1])
    assert torch.equal(shared.model.rng_state()[0], shared.model.rng_state()[1])


def test_frozen_weights_stay_bit_identical_and_get_no_optimizer_state(tmp_path):
    task, frozen = text_task(), config(freeze="non-embedding")
    before = weights(Trainer([(frozen, tmp_path / "unused")], task).model)
    train_run(frozen, task, tmp_path / "run")
    _, state = latest_checkpoint(tmp_path / "run" / "checkpoints")
    for name, value in before.items():
        assert torch.equal(value, state["model"][name]) == (name not in EMBEDDINGS), name
    assert state["optimizer_params"] == [list(EMBEDDINGS)]
    assert len(state["optimizer"]["state"]) == 2  # Adam moments of the two embeddings only


@pytest.mark.parametrize("redraw", ["input", "both"])
def test_init_from_loads_the_source_member_except_the_redrawn_matrices(tmp_path, redraw):
    task = text_task()
    train_run(config(seeds=[1, 2]), task, tmp_path / "source")
    _, state = latest_checkpoint(tmp_path / "source" / "checkpoints")
    source = {n: v[1] for n, v in state["model"].items()}  # member 1 (seed 2)
    new = config(seeds=[7, 8], init_from=f"{tmp_path / 'source'}@3", init_member=1,
                 redraw=redraw, freeze="loaded")
    start = weights(Trainer([(new, tmp_path / "unused")], task).model)
    fresh = weights(build_model(model_config(new, task), [7, 8], tied=False))
    redrawn = {INPUT} if redraw == "input" else {INPUT, OUTPUT}
    for name, value in start.items():
        if name in redrawn:
            assert torch.equal(value, fresh[name])
        else:
            assert torch.equal(value, source[name].expand_as(value))
    train_run(new, task, tmp_path / "new")
    _, state = latest_checkpoint(tmp_path / "new" / "checkpoints")
    for name, value in start.items():
        assert torch.equal(value, state["model"][name]) == (name not in redrawn), name


def test_init_from_refuses_a_missing_step_or_member_and_another_shape(tmp_path):
    task = text_task()
    train_run(config(seeds=[1]), task, tmp_path / "source")
    for changes, message in [
        (dict(init_from=f"{tmp_path / 'source'}@2"), "no checkpoint of step 2"),
        (dict(init_from=str(tmp_path / "source"), init_member=1), "init_member 1 is out of range"),
        (dict(init_from=str(tmp_path / "source"), d_ff=12), "the source has (16, 8)"),
    ]:
        with pytest.raises(DhwtError, match=message.replace("(", r"\(").replace(")", r"\)")):
            Trainer([(config(**changes), tmp_path / "new")], task)


@pytest.mark.parametrize("changes, message", [
    (dict(freeze="non-embedding", tie_schedule="untie@2"), "needs a fixed tying state"),
    (dict(freeze="loaded"), "needs init_from"),
    (dict(redraw="input"), "needs init_from"),
    (dict(init_from="run", redraw="input", tie_schedule="tied"), "needs untied embeddings"),
    (dict(init_from="run@x"), "STEP a whole number"),
    (dict(vary="some"), "vary must be one of"),
    (dict(freeze="all"), "freeze must be one of"),
])
def test_bad_member_options(changes, message):
    with pytest.raises(DhwtError, match=message):
        config(**changes)


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 100])
def test_chunked_evaluation_equals_one_pass_and_the_mean_over_tokens(rows):
    task = text_task()
    model = build_model(model_config(config(), task), [3, 4], tied=False).eval()
    batch = repeat_batch(task.eval_batch("valid"), 2)
    with torch.no_grad():
        whole = member_loss(model(batch.inputs), batch)
        loss, _ = chunked_metrics(model, batch, rows)
        # oracle: mean cross-entropy over every predicted token, window by window
        logits = model(batch.inputs)
        real = batch.targets[0] != -100
        ce = torch.stack([F.cross_entropy(logits[s][real], batch.targets[s][real])
                          for s in range(2)])
    assert int(real.sum()) == 46  # every valid token but the first, once
    torch.testing.assert_close(loss, whole, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(loss, ce, rtol=1e-5, atol=1e-5)


def test_a_frozen_shared_body_run_resumes_bit_for_bit(tmp_path, interrupt_at, assert_same):
    task = text_task()
    train_run(config(seeds=[1, 2]), task, tmp_path / "source")
    run = config(seeds=[5, 6], vary="embeddings", init_from=str(tmp_path / "source"),
                 redraw="input", freeze="loaded", steps=4, checkpoint_every=2)
    train_run(run, task, tmp_path / "straight")
    interrupt_at(3)
    with pytest.raises(KeyboardInterrupt):
        train_run(run, task, tmp_path / "resumed")
    train_run(run, task, tmp_path / "resumed", resume=True)
    straight = latest_checkpoint(tmp_path / "straight" / "checkpoints")[1]
    resumed = latest_checkpoint(tmp_path / "resumed" / "checkpoints")[1]
    for key in ("model", "optimizer", "rng"):
        assert_same(straight[key], resumed[key])


# ---------------------------------------------------------------------------------------------
# symmetric_init: the named groups' input rows start equal, every other weight as drawn; checked
# against a run built without it.


@pytest.fixture(scope="module")
def task(make_task):
    return make_task()


def symmetric_config(**changes) -> TrainConfig:
    values = dict(grammar="parity", d_model=8, seeds=[5, 6, 7], steps=2, eval_every=2,
                  snapshot_every=2, checkpoint_every=2, tie_schedule="untied")
    return TrainConfig(**{**values, **changes})


@pytest.mark.parametrize("schedule", ["untied", "tied"])
def test_each_symbol_starts_with_its_groups_first_row(task, tmp_path, schedule):
    groups = [["0b", "0a"], ["1a", "1b"]]
    plain = Trainer([(symmetric_config(tie_schedule=schedule), tmp_path / "plain")], task).model
    equal = Trainer([(symmetric_config(tie_schedule=schedule, symmetric_init=groups),
                      tmp_path / "equal")], task).model
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
        Trainer([(symmetric_config(symmetric_init=[["0a", "2a"]]), tmp_path / "run")], task)


@pytest.mark.parametrize("value, message", [
    ("0a,0b", "symmetric_init must be a list of groups of two or more symbols"),
    ([["0a"]], "symmetric_init must be a list of groups of two or more symbols"),
    ([["0a", 1]], "symmetric_init must be a list of groups of two or more symbols"),
    ([["0a", "0b"], ["0a", "1a"]], "symmetric_init names '0a' twice"),
])
def test_bad_groups_are_one_line_errors(value, message):
    with pytest.raises(DhwtError, match=message):
        symmetric_config(symmetric_init=value)


def test_the_groups_are_written_and_read_back(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(symmetric_config(symmetric_init=[["0a", "0b"]]).to_toml())
    assert TrainConfig.from_toml(path).members.symmetric_init == [["0a", "0b"]]
    assert TrainConfig.from_toml(path) == symmetric_config(symmetric_init=[["0a", "0b"]])
