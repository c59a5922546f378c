"""A study's run names, and every directory a command is to write (--out), are one line of
printable characters: a name with a newline or another control character is refused before
anything is written; a name in any script is kept, and its figures draw it without a
missing-glyph warning (dhwt.report.figures.drawable_text)."""

from __future__ import annotations

import warnings

import pytest

STUDY = """[study]
name = "names"
[data]
grammar = "parity"
set = {{ n_bits = 3 }}
[train]
steps = 4
[[runs]]
name = {name}
tie_schedule = "tied"
"""


@pytest.mark.parametrize("name", ['"a\\nb"', '"tab\\there"', '"bell\\u0007"', '"""two\nlines"""'])
def test_a_run_name_with_a_control_character_is_refused(name, cli, tmp_path):
    (tmp_path / "s.toml").write_text(STUDY.format(name=name), "utf-8")
    code, out, err = cli(["study", tmp_path / "s.toml", "--out", tmp_path / "out"])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "every [[runs]] needs a plain name (one line of printable characters" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # trains a study
def test_a_run_name_in_any_script_is_accepted(cli, tmp_path):
    (tmp_path / "s.toml").write_text(STUDY.format(name='"未绑定 tied"'), "utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # matplotlib's "Glyph ... missing"
        code, _, err = cli(["study", tmp_path / "s.toml", "--out", tmp_path / "out"])
    assert code == 0, err
    assert (tmp_path / "out" / "runs" / "未绑定 tied").is_dir()


@pytest.mark.parametrize("command", [
    ["synth", "--grammar", "parity"],
    ["train", "--grammar", "parity", "--steps", "2"],
    ["study", "{study}"],
    ["corpus-dh", "--grammar", "parity"],
    ["export", "norun", "--to", "hf"],
])
@pytest.mark.parametrize("name", ["a\nb", "tab\there"])
def test_an_out_directory_with_a_control_character_is_refused(command, name, cli, tmp_path):
    (tmp_path / "s.toml").write_text(STUDY.format(name='"r"'), "utf-8")
    out = tmp_path / name
    args = [str(tmp_path / "s.toml") if a == "{study}" else a for a in command]
    code, _, err = cli([*args, "--out", out])
    assert code == 2 and err.count("\n") == 1, err
    assert "holds a character that does not print" in err
    assert list(tmp_path.iterdir()) == [tmp_path / "s.toml"]
