"""`dhwt analyze`: the closeness report of run directories, read from their snapshots."""

from __future__ import annotations

import pytest

@pytest.fixture(scope="module")
def runs(tmp_path_factory, cli):
    root = tmp_path_factory.mktemp("runs")
    for grammar in ("parity", "parity-dh"):
        assert cli(["synth", "--grammar", grammar, "--set", "n_bits=3", "--out",
                    root / grammar])[0] == 0
    common = ["--steps", 12, "--seeds", "1-2", "--eval-every", 6, "--snapshot-every", 6]
    for schedule in ("tied", "untied"):
        assert cli(["train", "--data", root / "parity", "--tie-schedule", schedule, *common,
                    "--out", root / schedule])[0] == 0
    assert cli(["train", "--data", root / "parity-dh", *common, "--out", root / "other"])[0] == 0
    return root


def test_report_has_a_panel_per_matrix_and_the_exact_relations(runs, tmp_path, cli):
    code, out, _ = cli(["analyze", runs / "tied", runs / "untied", "--out", tmp_path / "rep"])
    assert code == 0
    assert "report:" in out
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "| tied: tied matrix | 0a-0b | sem only |" in text
    assert "| untied: input | 1a-1b | sem and cnd |" in text
    assert "| untied: output | 0a-0b | sem only |" in text
    assert (tmp_path / "rep" / "figures" / "closeness.png").stat().st_size > 0


@pytest.mark.parametrize("args, message", [
    (lambda r: [r / "tied", "--pairs", "0a-0b"], "bad --pairs"),
    (lambda r: [r / "tied", "--pairs", "0a:zz"], "'zz' is not in the vocabulary"),
    (lambda r: [r / "parity"], "not a dhwt run directory"),
    (lambda r: [r / "tied", r / "other"], "different vocabularies"),
])
def test_bad_input_is_one_line_and_writes_nothing(runs, tmp_path, cli, args, message):
    code, _, err = cli(["analyze", *args(runs), "--out", tmp_path / "rep"])
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert not (tmp_path / "rep").exists()


def test_out_is_new_empty_or_an_earlier_analyze_report(runs, tmp_path, cli):
    import json

    args = ["analyze", runs / "tied", "--similarity", "none", "--out"]
    assert cli([*args, tmp_path / "rep"])[0] == 0
    record = json.loads((tmp_path / "rep" / "analyze.json").read_text())
    assert record["runs"] == [str(runs / "tied")] and record["measure"] == "normalised"
    assert cli([*args, tmp_path / "rep"])[0] == 0  # its own earlier report: replaced
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my notes")
    code, _, err = cli([*args, mine])
    assert code == 2 and "no earlier analyze report (analyze.json)" in err
    assert [p.name for p in mine.iterdir()] == ["report.md"]
    assert (mine / "report.md").read_text() == "my notes"
