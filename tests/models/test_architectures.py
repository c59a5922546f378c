"""What every architecture owes the rest of dhwt: the ensemble contract, the config, the trainer.

The transformer's own versions of the model-level checks live in test_transformer.py; here the
LSTM and the mixer meet the same contract, and all three go through the trainer.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from dhwt.errors import DhwtError
from dhwt.languages import load_language, load_task, write_dataset
from dhwt.models import LSTM, Mixer, ModelConfig, Transformer, build_model
from dhwt.config import TrainConfig
from dhwt.training.runner import train_run
from dhwt.runs.checkpoints import latest_checkpoint

ARCHITECTURES = ("transformer", "lstm", "mixer")
SEEDS = (3, 11, 42)


@pytest.fixture(scope="module")
def task(make_task):
    """Parity with 3 bits as a masked LM, every string in the training split."""
    return make_task(overrides={"n_bits": 3}, valid_fraction=0.0)


def test_build_model_builds_the_configured_architecture():
    for architecture, cls in (("transformer", Transformer), ("lstm", LSTM), ("mixer", Mixer)):
        config = ModelConfig(vocab_size=7, max_len=8, architecture=architecture)
        assert type(build_model(config, [1], tied=True)) is cls
    with pytest.raises(DhwtError, match="LSTM builds architecture 'lstm'.*'transformer'"):
        LSTM(ModelConfig(vocab_size=7, max_len=8), [1], tied=True)


@pytest.mark.parametrize("architecture", ["lstm", "mixer"])
def test_member_equals_solo_model_and_tied_shares_init_with_untied(architecture):
    config = ModelConfig(vocab_size=7, max_len=8, architecture=architecture, output_bias=True)
    ensemble = build_model(config, SEEDS, tied=False)
    inputs = torch.randint(0, 7, (3, 4, 8), generator=torch.Generator().manual_seed(0))
    logits = ensemble(inputs)
    ours = ensemble.state_dict()
    for member, seed in enumerate(SEEDS):
        solo = build_model(config, [seed], tied=False)
        for name, tensor in solo.state_dict().items():
            assert torch.equal(ours[name][member], tensor[0]), name
        torch.testing.assert_close(logits[member], solo(inputs[member : member + 1])[0])
        tied_state = build_model(config, [seed], tied=True).state_dict()
        assert set(tied_state) == set(solo.state_dict()) - {"embeddings.untied_output"}
        for name, tensor in tied_state.items():
            assert torch.equal(tensor, solo.state_dict()[name]), name
    assert not torch.equal(ensemble.embeddings.output_weight, ensemble.embeddings.input_weight)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_logit_scale_divides_the_logits_before_the_bias_by_sqrt_d(architecture):
    plain = ModelConfig(vocab_size=7, max_len=8, architecture=architecture, d_model=8,
                        output_bias=True)
    scaled = ModelConfig(**{**plain.__dict__, "logit_scale": "rsqrt_d"})
    inputs = torch.randint(0, 7, (3, 4, 8), generator=torch.Generator().manual_seed(0))
    models = [build_model(c, SEEDS, tied=True) for c in (plain, scaled)]
    with torch.no_grad():
        for model in models:
            model.output_bias.copy_(torch.randn(model.output_bias.shape,
                                                generator=torch.Generator().manual_seed(1)))
        (z, z_scaled), bias = (m(inputs) for m in models), models[0].output_bias[:, None, None]
    torch.testing.assert_close(z_scaled - bias, (z - bias) / 8**0.5, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(z_scaled, z)


@pytest.mark.parametrize("values, fragment", [
    ({"architecture": "gru"}, "architecture must be one of transformer, lstm, mixer, got 'gru'"),
    ({"architecture": "lstm", "n_heads": 2}, "n_heads applies to the transformer only"),
    ({"architecture": "mixer", "lstm_hidden": 16}, "lstm_hidden applies to the lstm only"),
    ({"lstm_layers": 3}, "lstm_layers applies to the lstm only"),
    ({"architecture": "lstm", "final_norm": True}, "final_norm applies to the transformer and "
                                                   "mixer only"),
    ({"architecture": "mixer", "token_mixing": 0}, "token_mixing must be >= 1, got 0"),
    ({"architecture": "mixer", "objective": "clm"}, "masked LM only"),
    ({"logit_scale": "sqrt"}, "logit_scale must be one of none, rsqrt_d, got 'sqrt'"),
])
def test_train_config_validates_the_architecture_fields(values, fragment):
    with pytest.raises(DhwtError, match=fragment):
        TrainConfig(**values)


def _metrics(run_dir) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_untie_through_the_trainer_changes_no_loss_then_both_matrices_train(
        architecture, task, tmp_path):
    """A tied run and an untie@3 run take the same first 3 updates, so their evaluations at
    step 3 (recorded after the untie) must agree exactly; afterwards the new output matrix trains
    away from the input one."""
    base = dict(architecture=architecture, seeds=[1, 2], steps=6, lr=1e-2, eval_every=1,
                snapshot_every=3, checkpoint_every=6)
    train_run(TrainConfig(**base), task, tmp_path / "tied")
    train_run(TrainConfig(**base, tie_schedule="untie@3"), task, tmp_path / "untie")
    tied, untie = _metrics(tmp_path / "tied"), _metrics(tmp_path / "untie")
    for a, b in zip(tied, untie):
        if a["step"] <= 3:
            assert (a["loss"], a["accuracy"]) == (b["loss"], b["accuracy"]), a
    assert [r["tied"] for r in untie if r["split"] == "train" and r["member"] == 0] == [
        True, True, True, False, False, False, False]
    snap3 = load_file(tmp_path / "untie" / "embeddings" / "step_0000003.safetensors")
    snap6 = load_file(tmp_path / "untie" / "embeddings" / "step_0000006.safetensors")
    assert torch.equal(snap3["input"], snap3["output"])
    assert not torch.equal(snap6["output"], snap3["output"])
    assert not torch.equal(snap6["input"], snap6["output"])


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_short_training_on_parity_lowers_the_loss(architecture, task, tmp_path):
    """200 updates at lr 1e-2 take every member from its random start to the unigram plateau:
    the loss on the training strings falls to within 0.15 of the entropy of the target marginal
    (the loss of a model that predicts the marginal; the paper's tiny models sit there for
    thousands of steps before learning parity)."""
    config = TrainConfig(architecture=architecture, seeds=[1, 2], steps=200, lr=1e-2,
                         lr_schedule="constant", eval_every=200, snapshot_every=200,
                         checkpoint_every=200)
    train_run(config, task, tmp_path / "run")
    lines = [r for r in _metrics(tmp_path / "run") if r["split"] == "train"]
    for member in (0, 1):
        first, last = (r["loss"] for r in lines if r["member"] == member)
        assert last < first - 0.3
        assert last < task.truth.marginal_entropy + 0.15


def test_cli_selects_the_architecture_by_flag_and_config(tmp_path, cli):
    """`--architecture` picks the model; its sizes come from --config; the run's resolved
    config.toml and checkpoint say what was trained; a mixer for clm is one error line."""
    config_file = tmp_path / "small.toml"
    config_file.write_text("lstm_hidden = 5\nsteps = 2\ncheckpoint_every = 2\n")
    data = str(tmp_path / "data")
    write_dataset(load_language("parity", {"n_bits": 3}), data, valid_fraction=0.0,
                  test_fraction=0.0, seed=14)
    code, _, err = cli(["train", "--data", data, "--architecture", "lstm", "--config",
                        config_file, "--out", tmp_path / "run"])
    assert code == 0, err
    saved = TrainConfig.from_toml(tmp_path / "run" / "config.toml")
    assert (saved.model.architecture, saved.model.lstm_hidden, saved.model.lstm_layers) == ("lstm", 5, 2)
    _, state = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert state["model"]["layers.1.weight_hh"].shape == (1, 2, 20, 5)
    code, _, err = cli(["train", "--data", data, "--architecture", "mixer", "--objective", "clm",
                        "--out", tmp_path / "clm"])
    assert code == 2
    assert err.strip().endswith("it has no causal form")
    assert not (tmp_path / "clm").exists()


UNEQUAL = """
family = "automaton"
start = "s"
[classes.a]
variants = ["a1", "a2"]
[classes.b]
variants = ["b"]
[states]
s = [{emit = "a", to = "t", p = 0.5}, {emit = "b", to = "u", p = 0.5}]
t = [{emit = "b", to = "end", p = 1.0}]
u = [{emit = "a", to = "end", p = 0.5}, {emit = "b", to = "v", p = 0.5}]
v = [{emit = "a", to = "end", p = 0.5}, {emit = "b", to = "end", p = 0.5}]
"""


@pytest.mark.parametrize("architecture, objective", [
    ("lstm", "mlm"), ("lstm", "clm"), ("mixer", "mlm"),
])
def test_padded_language_trains_through_the_trainer(architecture, objective, tmp_path):
    """Strings of unequal length reach the model with a padding mask (masked and causal LM):
    the run works and the loss on the training strings falls."""
    grammar = tmp_path / "unequal.toml"
    grammar.write_text(UNEQUAL)
    write_dataset(load_language(str(grammar)), tmp_path / "data", valid_fraction=0.0,
                  test_fraction=0.0, seed=0)
    task = load_task(tmp_path / "data", objective)
    assert task.eval_batch("train").padding is not None
    config = TrainConfig(architecture=architecture, objective=objective, seeds=[1, 2], steps=50,
                         lr=1e-2, eval_every=50, snapshot_every=50, checkpoint_every=50)
    train_run(config, task, tmp_path / "run")
    lines = [r for r in _metrics(tmp_path / "run") if r["split"] == "train"]
    for member in (0, 1):
        first, last = (r["loss"] for r in lines if r["member"] == member)
        assert last < first


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("vocab", [7, 40])  # the one-hot input path and the lookup
@pytest.mark.parametrize("bad", [-1, "vocab"])
def test_token_ids_outside_the_vocabulary_are_refused(architecture, vocab, bad):
    model = build_model(ModelConfig(vocab_size=vocab, max_len=8, architecture=architecture),
                        [1, 2], tied=True)
    inputs = torch.zeros(2, 3, 8, dtype=torch.long)
    inputs[0, 1, 2] = vocab if bad == "vocab" else bad  # member 0: a lookup would read member 1
    with pytest.raises(ValueError, match=rf"token ids must lie in \[0, {vocab}\)"):
        model(inputs)
    inputs[0, 1, 2] = vocab - 1
    assert model(inputs).shape == (2, 3, 8, vocab)
