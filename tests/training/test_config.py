"""TrainConfig: seeds parsing, validation messages, and an exact TOML round trip."""

from __future__ import annotations

import pytest

from dhwt.errors import DhwtError
from dhwt.config.run import TrainConfig, format_seeds, parse_seeds


@pytest.mark.parametrize("text, seeds", [
    ("42-46", [42, 43, 44, 45, 46]), ("1,2,5", [1, 2, 5]), ("1-3,7", [1, 2, 3, 7]),
    ("7", [7]), (3, [3]), ([5, 1], [5, 1]), (" 4 , 6-7", [4, 6, 7]),
])
def test_parse_seeds(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text, fragment", [
    ("46-42", "runs backwards"), ("a-b", "not an integer"), ("", "not an integer"),
    ("1,,2", "not an integer"), ("1,1", "distinct"), ("1-3,2", "distinct"), ([], "at least one"),
    (True, "must be integers"), ([1, "2"], "list of integers"), ("-5", "not an integer"),
])
def test_parse_seeds_rejects(text, fragment):
    with pytest.raises(DhwtError, match=fragment):
        parse_seeds(text)


def test_format_seeds_inverts_parse():
    for seeds in ([42, 43, 44, 45, 46], [1, 2, 5], [9], [3, 4, 8, 9, 10, 1]):
        assert parse_seeds(format_seeds(seeds)) == seeds


def test_defaults_are_the_papers_exor_setting():
    c = TrainConfig()
    assert (c.n_layers, c.n_heads, c.d_model, c.d_ff, c.activation, c.norm, c.positions) == (
        1, 1, 4, 4, "gelu", "post", "none")
    assert (c.emb_init, c.emb_std, c.dropout, c.batch_size) == ("normal", 1.0, 0.0, None)
    assert (c.lr, c.beta1, c.beta2, c.eps, c.weight_decay) == (5e-4, 0.9, 0.999, 1e-12, 0.1)
    assert (c.lr_schedule, c.lr_period, c.lr_min) == ("periodic-cosine", 10_000, 1e-5)


@pytest.mark.parametrize("values, fragment", [
    ({"objective": "seq2seq"}, "objective must be one of mlm, clm, got 'seq2seq'"),
    ({"steps": 0}, "steps must be >= 1, got 0"),
    ({"steps": 2.5}, "steps must be an integer, got 2.5"),
    ({"lr": -1.0}, r"lr must be a finite number > 0, got -1.0"),
    ({"lr": float("nan")}, "lr must be a finite number"),
    ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
    ({"activation": "tanh"}, "activation must be one of gelu, relu, got 'tanh'"),
    ({"batch_size": 0}, "batch_size must be >= 1"),
    ({"grammar": "parity", "data": "d"}, "either grammar or data"),
    ({"d_model": 6, "n_heads": 4}, r"d_model \(6\) must be divisible by n_heads \(4\)"),
    ({"lr": 1e-3, "lr_min": 1e-2}, "lr_min"),
    ({"warmup_steps": 10, "steps": 10}, "warmup_steps"),
    ({"lr_schedule": "step"}, "lr_schedule must be one of constant, cosine, periodic-cosine"),
    ({"emb_scale": 1}, "emb_scale must be true or false"),
    ({"valid_fraction": 0.6, "test_fraction": 0.5}, "leave training strings"),
])
def test_validation_messages(values, fragment):
    with pytest.raises(DhwtError, match=fragment):
        TrainConfig(**values)


def test_unknown_key_names_it():
    with pytest.raises(DhwtError, match="unknown key 'd_modle'"):
        TrainConfig.from_dict({"d_modle": 8})


def test_toml_round_trip_is_exact(tmp_path):
    c = TrainConfig(grammar="parity", seeds="42-46", batch_size=None, grad_clip=1.5, lr=3e-4,
                    tie_schedule="untie@2000,tie@8000:mean", threads=1)
    path = tmp_path / "c.toml"
    path.write_text(c.to_toml())
    assert TrainConfig.from_toml(path) == c
    text = c.to_toml()
    assert 'seeds = "42-46"' in text and 'batch_size = "full"' in text
    assert "# data = (not set)" in text


def test_toml_ints_for_floats_become_floats(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("lr = 1\nsteps = 10\n")
    c = TrainConfig.from_toml(path)
    assert isinstance(c.lr, float) and c.lr == 1.0


def test_bad_toml_files(tmp_path):
    with pytest.raises(DhwtError, match="does not exist"):
        TrainConfig.from_toml(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_text("steps = = 3\n")
    with pytest.raises(DhwtError, match="not valid TOML"):
        TrainConfig.from_toml(tmp_path / "bad.toml")
    (tmp_path / "table.toml").write_text("[model]\nd_model = 4\n")
    with pytest.raises(DhwtError, match=r"table \[model\]"):
        TrainConfig.from_toml(tmp_path / "table.toml")


@pytest.mark.parametrize("values, fragment", [
    ({"tie_schedule": "untie@abc"}, "not a whole number"),
    ({"tie_schedule": "untie@-5"}, "negative"),
    ({"tie_schedule": "untie@100", "steps": 100}, "at or beyond the end of the run"),
    ({"tie_schedule": "tied,tie@5"}, "already tied"),
    ({"tie_schedule": "untie@5,tie@9:median"}, "unknown merge mode 'median'"),
    ({"tie_penalty": 0.1}, "tie_penalty 0.1 has no effect with tie_schedule 'tied'"),
])
def test_tie_schedule_is_validated_with_the_config(values, fragment):
    with pytest.raises(DhwtError, match=fragment):
        TrainConfig(**values)
