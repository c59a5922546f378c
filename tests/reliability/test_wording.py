"""Small things a user reads: the Ctrl-C line comes without a blank line before it, and counts
agree with their nouns."""

from __future__ import annotations

import pytest

ONE_STRING = """family = "automaton"
start = "s0"
[classes.c]
variants = ["c1", "c2"]
[classes.d]
variants = ["d"]
[states]
s0 = [{ emit = "c", to = "s1", p = 1.0 }]
s1 = [{ emit = "d", to = "end", p = 1.0 }]
"""


@pytest.mark.parametrize("command", ["synth", "corpus-dh"])
def test_ctrl_c_prints_one_error_line_and_no_blank_line(command, cli, monkeypatch, tmp_path):
    import dhwt.languages.synthesis as synth
    from dhwt.commands import corpus_dh

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(synth, "compute_truth", interrupt)
    monkeypatch.setattr(corpus_dh, "corpus_dh_command", interrupt)
    args = {"synth": ["synth", "--grammar", "parity", "--out", tmp_path / "ds"],
            "corpus-dh": ["corpus-dh", "--grammar", "parity"]}[command]
    code, out, err = cli(args)
    written = "; nothing was written" if command == "synth" else ""
    assert code == 130 and out == "" and err == f"error: interrupted{written}\n"


def test_one_class_string_is_singular(cli, tmp_path):
    (tmp_path / "one.toml").write_text(ONE_STRING, "utf-8")
    code, out, _ = cli(["synth", "--grammar", tmp_path / "one.toml"])
    assert code == 0
    assert "  1 class string, 2 symbol strings, length 2\n" in out
