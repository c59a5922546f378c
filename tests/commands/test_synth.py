"""`dhwt synth` through the real entry point: the summary, writing, and every class of bad input
(exit 2, one `error:` line on stderr, no traceback, nothing left on disk)."""

from __future__ import annotations

from pathlib import Path

import pytest

GOOD_AUTOMATON = """
family = "automaton"
start = "s"
[classes.a]
variants = ["a1", "a2"]
[classes.b]
variants = ["b"]
[states]
s = [{emit = "a", to = "t", p = 0.5}, {emit = "b", to = "end", p = 0.5}]
t = [{emit = "b", to = "end", p = 1.0}]
"""


def test_parity_summary_shows_the_paper_setting(cli):
    code, out, err = cli(["synth", "--grammar", "parity"])
    assert code == 0 and err == ""
    assert "vocab 0a 0b 1a 1b EVEN ODD [MASK]" in out
    assert "accuracy 0.7000" in out
    assert "sem, not cnd (DH violated): 0a~0b" in out
    assert "sem and cnd (DH holds):     1a~1b" in out
    assert "never predicted: EVEN, ODD" in out
    assert "nothing written" in out


def test_synth_writes_with_overrides(tmp_path, cli):
    out_dir = tmp_path / "p5"
    code, out, _ = cli(["synth", "-g", "parity", "--set", "n_bits=5", "--set",
                        "classes.1.skew=0.8", "--out", str(out_dir), "--seed", "3"])
    assert code == 0
    assert "32 class strings" in out and "1a: 0.1  1b: 0.9" in out
    assert "accuracy 0.9000" in out.split("causal")[0]  # 0.5 * 0.9 + 0.5 * 0.9
    assert (out_dir / "truth.json").exists()
    assert 'n_bits = 5' in (out_dir / "spec.toml").read_text()


def test_user_spec_file_works(tmp_path, cli):
    spec = tmp_path / "mine.toml"
    spec.write_text(GOOD_AUTOMATON)
    code, out, _ = cli(["synth", "--grammar", str(spec)])
    assert code == 0 and "language mine (family automaton)" in out


def test_help_explains_the_command(cli):
    code, out, _ = cli(["synth", "--help"])
    assert code == 0
    out = " ".join(out.split())
    for option in ("--grammar", "--set", "--out", "--valid-fraction", "--test-fraction",
                   "--seed", "--overwrite", "print the summary only"):
        assert option in out


BAD = {
    "unknown name": (["-g", "nope"], None, "unknown grammar 'nope'"),
    "missing file": (["-g", "missing/spec.toml"], None, "no such file"),
    "not TOML": (None, "family = \n", "not valid TOML"),
    "unknown family": (None, 'family = "regex"', "'family' is 'regex'"),
    "p not summing to 1": (["-g", "parity", "--set", "classes.0.p=[0.2, 0.3]"], None,
                           "sum to 0.5; they must sum to 1"),
    "transitions not summing to 1": (None, GOOD_AUTOMATON.replace("p = 1.0", "p = 0.9"),
                                     "transition probabilities of state 't' sum to 0.9"),
    "negative p": (["-g", "parity", "--set", "classes.0.p=[-0.1, 1.1]"], None, "is -0.1"),
    "NaN p": (["-g", "parity", "--set", "classes.0.p=[nan, 0.5]"], None, "NaN"),
    "NaN transition": (None, GOOD_AUTOMATON.replace("p = 1.0", "p = nan"), "NaN"),
    "unknown top key": (["-g", "parity", "--set", "n_bit=5"], None, "unknown key 'n_bit'"),
    "unknown class key": (None, GOOD_AUTOMATON.replace("[classes.b]", "[classes.b]\nvarients=1"),
                          "unknown key 'varients' in class 'b'"),
    "unknown transition key": (None, GOOD_AUTOMATON.replace("p = 1.0", "p = 1.0, q = 2"),
                               "unknown key 'q' in transition 0 of state 't'"),
    "duplicate symbol across classes": (["-g", "parity", "--set", 'classes.1.variants=["0a", "x"]'],
                                        None, "duplicate symbol '0a' in classes '0' and '1'"),
    "duplicate symbol in a class": (None, GOOD_AUTOMATON.replace('["a1", "a2"]', '["a1", "a1"]'),
                                    "duplicate symbol 'a1' in class 'a'"),
    "label used as a variant": (["-g", "parity", "--set", 'classes.1.variants=["EVEN", "x"]'],
                                None, "duplicate symbol 'EVEN'"),
    "empty alphabet": (None, 'family = "automaton"\nstart = "s"\nclasses = {}\nstates = {}',
                       "alphabet is empty"),
    "class without variants": (["-g", "parity", "--set", "classes.1.variants=[]"], None,
                               "class '1' has no variants"),
    "non-terminating cycle": (None, GOOD_AUTOMATON.replace('to = "end", p = 1.0',
                                                           'to = "s", p = 1.0'),
                              "non-terminating: it has the cycle s -> t -> s"),
    "self loop": (None, GOOD_AUTOMATON.replace('to = "end", p = 1.0', 'to = "t", p = 1.0'),
                  "cycle t -> t"),
    "state without transitions": (None, GOOD_AUTOMATON.replace(
        't = [{emit = "b", to = "end", p = 1.0}]', "t = []"), "state 't' has no transitions"),
    "undeclared state": (None, GOOD_AUTOMATON.replace('to = "t"', 'to = "u"'),
                         "undeclared state 'u'"),
    "enumeration too big": (["-g", "parity", "--set", "n_bits=20"], None,
                            "would enumerate 1,099,511,627,776 symbol strings"),
    "skew out of range": (["-g", "parity", "--set", "classes.0.skew=1.0"], None, "[0, 1)"),
    "bad --set": (["-g", "parity", "--set", "n_bits"], None, "--set takes KEY=VALUE"),
    "bad fraction": (["-g", "parity", "--valid-fraction", "1.5"], None, "valid_fraction"),
    "string with nothing maskable": (None, GOOD_AUTOMATON.replace(
        '[classes.b]', '[classes.b]\nmaskable = false'), "has no maskable position"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_input_is_one_error_line_and_leaves_nothing(case, tmp_path, cli, monkeypatch):
    args, spec_text, message = BAD[case]
    monkeypatch.chdir(tmp_path)
    if spec_text is not None:
        Path("spec.toml").write_text(spec_text)
        args = ["-g", "spec.toml"]
    before = set(tmp_path.iterdir())
    code, out, err = cli(["synth", *args, "--out", "data"])
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert message in lines[0]
    assert "Traceback" not in err
    assert set(tmp_path.iterdir()) == before  # no output directory, no temporary


def test_unknown_name_lists_the_builtins(cli):
    _, _, err = cli(["synth", "-g", "nope"])
    assert "four-cases, parity, parity-dh, parity-nocnd" in err


def test_existing_output_needs_overwrite(tmp_path, cli):
    out_dir = tmp_path / "data"
    out_dir.mkdir()
    (out_dir / "x").write_text("keep")
    for overwrite in ([], ["--overwrite"]):  # no hint to pass --overwrite, which is refused
        code, _, err = cli(["synth", "-g", "parity-dh", "--out", str(out_dir), *overwrite])
        assert code == 2 and "not made by dhwt" in err and "pass --overwrite" not in err
        assert (out_dir / "x").read_text() == "keep"
    (out_dir / "x").unlink()
    assert cli(["synth", "-g", "parity", "--out", str(out_dir)])[0] == 0  # dhwt's own now
    code, _, err = cli(["synth", "-g", "parity-dh", "--out", str(out_dir)])
    assert code == 2 and "already exists; pass --overwrite" in err
    code, _, _ = cli(["synth", "-g", "parity-dh", "--out", str(out_dir), "--overwrite"])
    assert code == 0 and "parity-dh" in (out_dir / "truth.json").read_text()


def test_overwrite_keeps_a_users_file_in_a_dataset(tmp_path, cli):
    """F1: a file of the user's inside dhwt's dataset is never deleted by --overwrite: refused,
    named."""
    out_dir = tmp_path / "d"
    assert cli(["synth", "-g", "parity", "--out", out_dir])[0] == 0
    (out_dir / "NOTES.txt").write_text("notes\n")
    before = sorted(p.name for p in out_dir.iterdir())
    code, out, err = cli(["synth", "-g", "parity", "--out", out_dir, "--overwrite"])
    assert code == 2 and out == "" and err == (
        f"error: {out_dir} holds NOTES.txt, which dhwt did not write and a replacement would "
        "delete; move it out first\n")
    assert sorted(p.name for p in out_dir.iterdir()) == before
    assert (out_dir / "NOTES.txt").read_text() == "notes\n"


@pytest.mark.slow
def test_console_script_resolves_builtins_outside_the_checkout(tmp_path, console):
    [(code, out, err)] = console(["synth", "--grammar", "parity-nocnd"], cwd=tmp_path)
    assert code == 0, err
    assert "accuracy 0.9500" in out
