"""`dhwt analyze`: the closeness report of run directories, read from their snapshots, and on text
runs its loss, KNN match and DH diagnostic against a float64 brute force on the snapshots."""

from __future__ import annotations

import csv
import json
import math
import shutil

import numpy as np
import pytest

from dhwt.runs import load_run

from tests.report.text_runs import V, make_text_run

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


# ---------------------------------------------------------------------------------------------
# `dhwt analyze` on text runs: loss, KNN match between members and the DH diagnostic over
# training, checked against a float64 brute force on the run's own snapshots.


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    """Two untied members trained a few steps on random text of 35 of the 40 token ids."""
    return make_text_run(tmp_path_factory.mktemp("runs") / "text")


def brute_overlap(x, y, k):
    def neighbours(m):
        m = np.asarray(m, np.float64)
        score = m @ m.T
        np.fill_diagonal(score, -np.inf)
        order = np.lexsort((np.broadcast_to(np.arange(len(m)), score.shape), -score), axis=1)
        return order[:, :k]
    a, b = neighbours(x), neighbours(y)
    return np.mean([len(set(r) & set(s)) / k for r, s in zip(a, b)])


def read_csv(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_text_run_report_matches_a_brute_force(text_run, tmp_path, cli):
    assert cli(["analyze", text_run, "--out", tmp_path / "rep", "--k", 5])[0] == 0
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "perplexity" in text and "### Between members" in text and "DH diagnostic" in text
    assert "| seed1 vs seed2 | output |" in text
    for name in ("similarity_knn.png", "similarity_dh.png", "loss_valid.png"):
        assert (tmp_path / "rep" / "figures" / name).stat().st_size > 0
    rows = read_csv(tmp_path / "rep" / "similarity.csv")
    snapshots = {s.step: s for s in load_run(text_run).snapshots()}
    assert {int(r["step"]) for r in rows} == set(snapshots) == {0, 2, 4}
    for r in rows:
        snap = snapshots[int(r["step"])]
        if r["kind"] == "pair":
            x, y = getattr(snap, r["side"])[0], getattr(snap, r["side"])[1]
        else:
            m = 0 if r["a"] == "seed1" else 1
            x, y = snap.input[m], snap.output[m]
        assert float(r["overlap"]) == pytest.approx(brute_overlap(x, y, 5), abs=1e-6)
        assert 0 <= float(r["chance_overlap"]) < 1


def test_seen_tokens_come_from_counts(text_run, tmp_path, cli):
    counts = np.zeros(V)
    counts[: V - 5] = 3  # ids 35..39 never occur
    np.save(tmp_path / "counts.npy", counts)
    assert cli(["analyze", text_run, "--out", tmp_path / "rep", "--k", 4, "--tokens", "seen",
                "--counts", tmp_path / "counts.npy", "--members", "0,1",
                "--similarity", "knn,cka", "--no-chance"])[0] == 0
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "averaged over 35 tokens seen in training (count > 0) of 40" in text
    rows = read_csv(tmp_path / "rep" / "similarity.csv")
    last = next(r for r in rows if r["kind"] == "pair" and r["side"] == "input"
                and r["step"] == "4")
    snap = load_run(text_run).embeddings()
    expected = brute_overlap(snap.input[0][:35], snap.input[1][:35], 4)
    assert float(last["overlap"]) == pytest.approx(expected, abs=1e-6)
    assert "chance_overlap" not in last and float(last["cka"]) > 0


@pytest.mark.parametrize("args, message", [
    (["--members", "0,7"], "member 7 does not exist"),
    (["--members", "a"], "bad --members 'a'"),
    (["--similarity", "knn,foo"], "unknown similarity measure 'foo'"),
    (["--pairs", "t1:t2"], "--pairs tracks symbols of a synthetic language"),
])
def test_bad_options_are_one_line_and_write_nothing(text_run, tmp_path, cli, args, message):
    code, _, err = cli(["analyze", text_run, "--out", tmp_path / "rep", *args])
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert not (tmp_path / "rep").exists()


def test_seen_tokens_default_to_the_runs_counts_file(text_run, tmp_path, cli):
    run = tmp_path / "run"
    shutil.copytree(text_run, run)
    (run / "token_counts.npy").unlink(missing_ok=True)
    code, _, err = cli(["analyze", run, "--out", tmp_path / "rep", "--tokens", "seen"])
    assert code == 2 and err.count("\n") == 1 and "token_counts.npy does not exist" in err
    assert not (tmp_path / "rep").exists()
    counts = np.zeros(V)
    counts[:20] = 1
    np.save(run / "token_counts.npy", counts)
    assert cli(["analyze", run, "--out", tmp_path / "rep", "--tokens", "seen", "--k", 3])[0] == 0
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "averaged over 20 tokens seen in training" in text


@pytest.mark.parametrize("value, chance, words", [
    (0.60, 0.10, "largely agree; what this implies"),          # (0.6 - 0.1) / 0.9 = 0.56
    (0.30, 0.10, "partly agree"),                              # 0.22
    (0.18, 0.10, "mostly disagree (at chance level)"),         # 0.09, under 2x chance
    (0.082, 0.008, "mostly disagree (10x chance but far"),     # 0.075, 10x chance
    (0.025, 0.0, "mostly disagree (far from identity)"),       # a chance level of 0 (no hubs)
])
def test_the_dh_reading_follows_the_share_from_chance_to_identity(value, chance, words):
    from dhwt.analysis.dh_reading_result import dh_reading
    from dhwt.report.dh_reading_report import reading_text
    line = reading_text(dh_reading(value, chance))
    assert words in line and f"{100 * value:.1f}%" in line and f"{100 * chance:.1f}%" in line


def test_the_loss_table_gives_test_perplexity_at_the_last_step(text_run, tmp_path, cli):
    assert cli(["analyze", text_run, "--out", tmp_path / "rep", "--similarity", "none"])[0] == 0
    text = (tmp_path / "rep" / "report.md").read_text()
    lines = [json.loads(x) for x in (text_run / "metrics.jsonl").read_text().splitlines()]
    test = [r["loss"] for r in lines if r["split"] == "test"]
    assert {r["step"] for r in lines if r["split"] == "test"} == {4} and len(test) == 2
    perplexity = math.exp(sum(test) / 2)  # of the mean cross-entropy over the two members
    row = next(x for x in text.splitlines() if x.startswith("| text | test |"))
    # two members: their values, not a t-interval from two points; no corpus to count the
    # windows in (the run's task was given in code)
    assert row.startswith(f"| text | test | 4 | — | {test[0]:.4f}, {test[1]:.4f} | ")
    assert f"| {perplexity:.2f} |" in row
    assert not (tmp_path / "rep" / "figures" / "loss_test.png").exists()  # one point: no curve
