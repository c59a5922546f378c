"""TrainConfig: seeds parsing, validation messages, and an exact TOML round trip."""

from __future__ import annotations

import pytest

from dhwt.errors import DhwtError
from dhwt.checks import format_seeds, parse_seeds
from dhwt.config.run import TrainConfig


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
    assert (c.model.n_layers, c.model.n_heads, c.model.d_model, c.model.d_ff, c.model.activation, c.model.norm, c.model.positions) == (
        1, 1, 4, 4, "gelu", "post", "none")
    assert (c.model.emb_init, c.model.emb_std, c.model.dropout, c.optim.batch_size) == ("normal", 1.0, 0.0, None)
    assert (c.optim.lr, c.optim.beta1, c.optim.beta2, c.optim.eps, c.optim.weight_decay) == (5e-4, 0.9, 0.999, 1e-12, 0.1)
    assert (c.optim.lr_schedule, c.optim.lr_period, c.optim.lr_min) == ("periodic-cosine", 10_000, 1e-5)


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
    assert isinstance(c.optim.lr, float) and c.optim.lr == 1.0


def test_bad_toml_files(tmp_path):
    with pytest.raises(DhwtError, match="does not exist"):
        TrainConfig.from_toml(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_text("steps = = 3\n")
    with pytest.raises(DhwtError, match="not valid TOML"):
        TrainConfig.from_toml(tmp_path / "bad.toml")
    (tmp_path / "table.toml").write_text("[trainer]\nd_model = 4\n")
    with pytest.raises(DhwtError, match=r"table \[trainer\]"):
        TrainConfig.from_toml(tmp_path / "table.toml")
    (tmp_path / "misplaced.toml").write_text("[optim]\nd_model = 4\n")
    with pytest.raises(DhwtError, match=r"d_model belongs in \[model\], not \[optim\]"):
        TrainConfig.from_toml(tmp_path / "misplaced.toml")
    (tmp_path / "twice.toml").write_text("d_model = 8\n[model]\nd_model = 4\n")
    with pytest.raises(DhwtError, match="d_model twice"):
        TrainConfig.from_toml(tmp_path / "twice.toml")


def test_flat_and_sectioned_files_read_into_one_tree(tmp_path):
    """A flat file (as run directories before the sections held) and the sectioned file
    to_toml writes give the same config; every setting lands in its section."""
    config = TrainConfig(grammar="parity", d_model=8, steps=50, tie_schedule="untie@10",
                         seeds="1-3", lr=1e-3, device="auto", eval_every=5)
    flat = tmp_path / "flat.toml"
    flat.write_text('grammar = "parity"\nd_model = 8\nsteps = 50\ntie_schedule = "UNTIE@10"\n'
                    'seeds = "1-3"\nlr = 1e-3\ndevice = "auto"\neval_every = 5\n')
    sectioned = tmp_path / "sectioned.toml"
    sectioned.write_text(config.to_toml())
    assert TrainConfig.from_toml(flat) == TrainConfig.from_toml(sectioned) == config
    assert (config.data.grammar, config.model.d_model, config.optim.steps, config.optim.lr,
            config.members.seeds, config.placement.device, config.record.eval_every) == (
        "parity", 8, 50, 1e-3, [1, 2, 3], "auto", 5)
    assert "[model]\narchitecture = \"transformer\"\nd_model = 8\n" in sectioned.read_text()


def test_tie_schedules_compare_parsed():
    """Two spellings of one schedule are one config (a resume accepts either)."""
    a = TrainConfig(grammar="parity", steps=100, tie_schedule="untie@50")
    b = TrainConfig(grammar="parity", steps=100, tie_schedule="Tied, UNTIE@50")
    assert a == b and a.resume_key() == b.resume_key()
    assert str(TrainConfig(grammar="parity", steps=100, tie_schedule="untied,tie@5").tying
               .tie_schedule) == "tie@5:mean"


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


def test_one_rule_resolves_every_data_source(tmp_path, monkeypatch):
    """dhwt.config.sources: a built-in name wins over a file of that name; a path beside the
    study file is taken from there, else from the working directory; a missing grammar stays as
    written (its error names it)."""
    from dhwt.config.sources import resolve_source

    monkeypatch.chdir(tmp_path)
    (tmp_path / "parity").write_text("a file named like a built-in grammar")
    assert resolve_source("grammar", "parity") == "parity"
    assert resolve_source("grammar", "./parity") == str(tmp_path / "parity")
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "g.toml").write_text("")
    (tmp_path / "g.toml").write_text("")
    assert resolve_source("grammar", "g.toml", base=tmp_path / "study") == str(
        tmp_path / "study" / "g.toml")
    assert resolve_source("grammar", "g.toml") == str(tmp_path / "g.toml")
    assert resolve_source("grammar", "missing.toml") == "missing.toml"
    assert resolve_source("corpus", "wikitext-2") == "wikitext-2"
    assert resolve_source("data", "later") == str(tmp_path / "later")


def test_the_cli_states_the_config_defaults_and_choices():
    """`dhwt train --help` spells defaults and choices out (so that --help needs no torch), and
    they must be the configuration's: each option's [default: X] equals its section's default
    and each choice list the config's own."""
    import re
    from dataclasses import MISSING, fields

    import click

    from dhwt.cli import cli
    from dhwt.config.run import LR_SCHEDULES, OBJECTIVES, PRECISIONS, SECTION_OF, SECTIONS
    from dhwt.languages.splits import SPLIT_SEED, TEST_FRACTION, VALID_FRACTION
    from dhwt.models.config import ARCHITECTURES

    defaults = {f.name: (f.default if f.default is not MISSING else f.default_factory())
                for cls in SECTIONS.values() for f in fields(cls)}
    checked = 0
    for option in cli.commands["train"].params:
        if option.name not in SECTION_OF:
            continue
        said = re.search(r"\[default: ([^\]:]+)\]", option.help or "")
        if said is not None and not said.group(1).startswith("all"):
            text, value = said.group(1).strip(), defaults[option.name]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert float(text) == value, option.name
            else:
                expected = ("full" if value is None else ",".join(map(str, value))
                            if isinstance(value, list) else ("off", "on")[value]
                            if isinstance(value, bool) else str(value))
                assert text == expected, option.name
            checked += 1
        if isinstance(option.type, click.Choice):
            own = {"objective": OBJECTIVES, "architecture": ARCHITECTURES,
                   "lr_schedule": LR_SCHEDULES, "precision": PRECISIONS}[option.name]
            assert tuple(option.type.choices) == own, option.name
    assert checked >= 12
    synth = {o.name: o.default for o in cli.commands["synth"].params}
    assert (synth["valid_fraction"], synth["test_fraction"], synth["seed"]) == (
        VALID_FRACTION, TEST_FRACTION, SPLIT_SEED)


#: One valid value of each text corpus option (a new option must be added here).
TEXT_VALUES = {"tokenizer": "char", "seq_len": 8, "eval_windows": 2, "mask_rate": 0.1,
               "mask_rule": "bert", "twins": 2, "twin_p": 0.5, "twin_kind": "sem",
               "twin_seed": 1}


def test_the_text_options_are_read_from_the_data_fields():
    """DataConfig's fields declare which source each setting belongs to; every text option
    given with a grammar is refused naming itself, and a study's text keys are these."""
    from dhwt.config.run import GRAMMAR_KEYS, TEXT_KEYS, TEXT_OPTIONS

    assert set(TEXT_OPTIONS) == set(TEXT_VALUES)
    for key, value in TEXT_VALUES.items():
        with pytest.raises(DhwtError, match=f"^{key} is an option of text corpora"):
            TrainConfig(grammar="parity", **{key: value})
    TrainConfig(corpus="wikitext-2", batch_size=4, **TEXT_VALUES)
    assert TEXT_KEYS == {"corpus", "data", *TEXT_VALUES}
    assert GRAMMAR_KEYS == {"grammar", "set", "valid_fraction", "test_fraction", "split_seed"}
