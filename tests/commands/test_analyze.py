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


def test_one_arm_of_two_studies_is_labelled_by_the_shortest_distinct_path(runs, tmp_path, cli):
    """Two run directories named alike (STUDY_A/runs/tied, STUDY_B/runs/tied) are distinct: the
    report labels them by the shortest endings of their paths that differ."""
    import shutil

    for study in ("study_a", "study_b"):
        shutil.copytree(runs / "tied", tmp_path / study / "runs" / "tied")
    code, _, err = cli(["analyze", tmp_path / "study_a" / "runs" / "tied",
                        tmp_path / "study_b" / "runs" / "tied", "--out", tmp_path / "rep"])
    assert code == 0, err
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "| study_a/runs/tied: tied matrix | 0a-0b |" in text
    assert "| study_b/runs/tied: tied matrix | 0a-0b |" in text


@pytest.mark.parametrize("args, message", [
    (lambda r: [r / "tied", "--pairs", "0a-0b"], "bad --pairs"),
    (lambda r: [r / "tied", "--pairs", "0a:zz"], "'zz' is not in the vocabulary"),
    (lambda r: [r / "parity"], "not a dhwt run directory"),
    (lambda r: [r / "tied", r / "other"], "different vocabularies"),
    (lambda r: [r / "tied", r / "tied"], "is given twice; give each run once"),
    (lambda r: [r / "tied", r / "untied" / ".." / "tied"], "are the same run directory"),
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


def _files(folder):
    """Every file under `folder` (hidden ones too) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_a_narrower_analysis_replaces_the_earlier_report_whole(runs, tmp_path, cli):
    """F5: a second analysis without similarity leaves no similarity file of the first."""
    rep = tmp_path / "rep"
    assert cli(["analyze", runs / "tied", "--out", rep])[0] == 0
    assert (rep / "similarity.csv").is_file() and (rep / "figures" / "similarity_knn.png").is_file()
    assert cli(["analyze", runs / "tied", "--similarity", "none", "--out", rep])[0] == 0
    assert sorted(p.name for p in rep.iterdir()) == ["analyze.json", "figures", "report.html",
                                                     "report.md"]
    assert not (rep / "figures" / "similarity_knn.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]  # no staging left beside it


def test_an_analysis_that_stops_half_way_leaves_the_earlier_report_as_it_was(
        runs, tmp_path, cli, monkeypatch):
    """F4: the similarity files are written, then the report fails (or Ctrl-C): the earlier
    report stays whole, without the new files; nothing is left beside it."""
    import dhwt.report.runs_closeness_report as runs_closeness_report

    rep = tmp_path / "rep"
    assert cli(["analyze", runs / "tied", "--similarity", "none", "--out", rep])[0] == 0
    before = _files(rep)

    def stop(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(runs_closeness_report, "write_document", stop)
    code, out, err = cli(["analyze", runs / "tied", "--out", rep])
    assert code == 130 and out == ""
    assert err.strip() == f"error: interrupted; {rep} was left as it was"
    assert _files(rep) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]


def test_a_swallowed_ctrl_c_still_stops_analyze(runs, tmp_path, cli, monkeypatch):
    """F23: Ctrl-C whose KeyboardInterrupt is lost on its way out (as one raised in a __del__
    is) still ends analyze with exit 130, writing nothing."""
    import signal

    import dhwt.report.analyze_report as report

    original = report.similarity_lines

    def swallowed(*args, **kwargs):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass
        return original(*args, **kwargs)
    monkeypatch.setattr(report, "similarity_lines", swallowed)
    # Python's Ctrl-C handler, as a terminal's python has it: a suite started in the background
    # by a shell without job control inherits SIGINT ignored, and raise_signal would do nothing
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code, out, err = cli(["analyze", runs / "tied", "--out", tmp_path / "rep"])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 130 and out == ""
    assert err.strip() == f"error: interrupted; {tmp_path / 'rep'} was left as it was"
    assert list(tmp_path.iterdir()) == []


def test_a_users_file_in_an_earlier_report_is_never_deleted(runs, tmp_path, cli):
    rep = tmp_path / "rep"
    assert cli(["analyze", runs / "tied", "--similarity", "none", "--out", rep])[0] == 0
    (rep / "notes.txt").write_text("mine")
    before = _files(rep)
    code, _, err = cli(["analyze", runs / "tied", "--similarity", "none", "--out", rep])
    assert code == 2 and err == (f"error: --out {rep} holds notes.txt, which analyze did not "
                                 "write and replacing its earlier report would delete; move it "
                                 f"out of {rep} first\n")
    assert _files(rep) == before


def test_an_unfinished_run_is_analysed_at_its_checkpoint_step_and_says_so(tmp_path, cli):
    """An interrupted run (its last checkpoint lost, snapshots beyond the newest one kept) is
    reported at the step of its newest checkpoint throughout, never as a final fit."""
    import json

    run = tmp_path / "run"
    assert cli(["train", "--grammar", "parity", "--set", "n_bits=3", "--steps", 30,
                "--eval-every", 5, "--snapshot-every", 5, "--checkpoint-every", 10,
                "--out", run])[0] == 0
    (run / "report.md").unlink()  # killed after its snapshot of step 30, before the rest
    (run / "checkpoints" / "step_0000030.pt").unlink()
    code, out, err = cli(["analyze", run, "--similarity", "none", "--json", "--out",
                          tmp_path / "rep"])
    assert code == 0, err
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "## Fit at step 20 (run unfinished: 20 of 30 steps)" in text
    assert "Final" not in text
    found = json.loads(out[out.index("{"):])["closeness"]["runs"]["run"]
    assert (found["step"], found["steps"], found["finished"]) == (20, 30, False)
    for step in (25, 30):  # what the run recorded after step 20 was left out
        (run / "embeddings" / f"step_{step:07d}.safetensors").unlink()
    metrics = run / "metrics.jsonl"
    metrics.write_text("".join(line for line in metrics.read_text().splitlines(keepends=True)
                               if json.loads(line)["step"] <= 20))
    code, again, err = cli(["analyze", run, "--similarity", "none", "--json", "--out",
                            tmp_path / "rep"])
    assert code == 0, err
    assert json.loads(again[again.index("{"):])["closeness"]["runs"]["run"] == found
