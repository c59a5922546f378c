"""`dhwt diagnose RUN_DIR`: each member read at a snapshot with its tie history; the reading is
withheld right after an untie (the two matrices are still one copy) and given for members
untied from the start; `dhwt analyze` withholds it the same way."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dhwt.analysis.diagnose_result import DiagnoseOptions, diagnose_path
from dhwt.config.schedule import TieHistory
from dhwt.report.diagnose_report import history, reading
from dhwt.runs.snapshots import read_snapshot, snapshot_paths

from tests.report.text_runs import make_text_run


def make_run(root, name, schedule, lr):
    return make_text_run(root / name, schedule=schedule, lr=lr, steps=8, eval_every=4)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return {"untie": make_run(root, "untie", "untie@2", 1e-4),
            "untied": make_run(root, "untied", "untied", 0.05),
            "tied": make_run(root, "tied", "tied", 0.05),
            "tie": make_run(root, "tie", "tie@4", 0.05),
            "wide untie": make_text_run(root / "wide", schedule="untie@2", lr=1e-4, steps=4,
                                        d_model=32)}


def test_right_after_an_untie_the_reading_is_withheld(runs, cli):
    snap = read_snapshot(snapshot_paths(runs["untie"])[2])  # step 4: 2 steps after the untie
    assert snap.step == 4 and not snap.tied
    result = diagnose_path(str(runs["untie"]), DiagnoseOptions(step=4, k=5))
    for subject, m in zip(result.subjects, range(2)):
        residue = np.linalg.norm(snap.input[m] - snap.output[m]) / np.linalg.norm(snap.output[m])
        assert subject.residue == pytest.approx(residue, rel=1e-5) and residue < 1.0
        assert subject.history == TieHistory(step=4, untied_at=2)
        assert history(subject, result) == "untied at step 2, 2 steps before this snapshot"
        assert reading(subject, result).startswith("withheld:")
        assert subject.diagnosis.overlap.mean > 0.5  # the copy agrees with itself
    code, out, _ = cli(["diagnose", runs["untie"], "--step", 4, "--k", 5, "--json"])
    assert code == 0 and all(s["reading"].startswith("withheld") for s in
                             json.loads(out)["subjects"])


def test_a_copy_at_the_untie_step_has_procrustes_error_zero(runs, cli):
    """At the untie step the two matrices are bit-identical: the Procrustes error is below
    1e-12 (the closed form's square root once made 2.5e-4 of its cancellation), and two steps
    later it agrees with scipy's orthogonal_procrustes."""
    from scipy.linalg import orthogonal_procrustes

    code, out, err = cli(["diagnose", runs["wide untie"], "--step", 2, "--k", 5, "--json"])
    assert code == 0, err
    subjects = json.loads(out)["subjects"]
    assert all(s["copy_residue"] == 0 and s["procrustes_error"] < 1e-12 for s in subjects), out
    code, out, err = cli(["diagnose", runs["wide untie"], "--step", 4, "--k", 5, "--json"])
    snap = read_snapshot(snapshot_paths(runs["wide untie"])[2])
    for subject, m in zip(json.loads(out)["subjects"], range(2)):
        x, y = (np.asarray(e[m], np.float64) for e in (snap.input, snap.output))
        expected = np.linalg.norm(x @ orthogonal_procrustes(x, y)[0] - y) / np.linalg.norm(y)
        assert 0 < subject["procrustes_error"] == pytest.approx(expected, abs=1e-6)


def test_untied_from_the_start_gets_a_reading_and_tied_is_said(runs):
    result = diagnose_path(str(runs["untied"]), DiagnoseOptions(k=5))
    assert [history(s, result) for s in result.subjects] == [
        "untied from the start (independent matrices)"] * 2
    assert all(reading(s, result).startswith("input and output neighbourhoods share")
               for s in result.subjects)
    tied = diagnose_path(str(runs["tied"]), DiagnoseOptions())
    assert all(s.diagnosis is None and history(s, tied) == "tied from the start"
               and s.tied_because == "the tie schedule 'tied' ties it from the start"
               for s in tied.subjects)


def test_the_terminal_reading_is_short_bullet_lines_of_the_same_words(runs, cli):
    """The reading (one ~700-character sentence in the JSON) prints as one bullet per clause,
    wrapped to 100 columns."""
    code, out, err = cli(["diagnose", runs["untied"]])
    assert code == 0, err
    doc = json.loads(cli(["diagnose", runs["untied"], "--json"])[1])
    blocks = out.split("  reading:\n")[1:]
    assert len(blocks) == len(doc["subjects"]) == 2
    for block, subject in zip(blocks, doc["subjects"]):
        lines = block.split("\n\n")[0].splitlines()
        assert len(lines) >= 3 and all(len(line) <= 100 for line in lines)
        assert all(line.startswith(("    - ", "      ")) for line in lines)
        assert sum(line.startswith("    - ") for line in lines) >= 3
        words = " ".join(line[6:] for line in lines).replace(";", "").split()
        assert words == subject["reading"].replace(";", "").split()


def test_a_tie_switch_is_named_by_its_own_step_at_every_later_snapshot(runs, cli):
    for step in (4, 6, "last"):  # the switch after update 4; snapshots 4, 6 and 8
        result = diagnose_path(str(runs["tie"]), DiagnoseOptions(step=step))
        assert all(s.diagnosis is None and s.tied_since == 4
                   and history(s, result) == "tied since step 4"
                   and s.tied_because == "the tie schedule 'tie@4:mean' tied it at step 4"
                   for s in result.subjects)
    before = diagnose_path(str(runs["tie"]), DiagnoseOptions(step=2, k=5))
    assert all(history(s, before) == "untied from the start (independent matrices)"
               for s in before.subjects)
    code, out, _ = cli(["diagnose", runs["tie"]])
    assert code == 0 and "tied it at step 4;" in out and "step 8;" not in out


def test_tied_before_the_untie_and_bad_steps(runs, cli):
    before = diagnose_path(str(runs["untie"]), DiagnoseOptions(step=0))
    assert all(s.diagnosis is None for s in before.subjects)
    code, _, err = cli(["diagnose", runs["untie"], "--step", 3])
    assert code == 2 and "no snapshot of step 3" in err
    code, _, err = cli(["diagnose", runs["untie"], "--step", "soon"])
    assert code == 2 and "whole number or 'last'" in err


def test_analyze_withholds_the_reading_after_an_untie(runs, tmp_path, cli):
    # the untie run's last snapshot (step 8) is 6 steps after the untie at lr 1e-4: still a copy
    assert cli(["analyze", runs["untie"], "--out", tmp_path / "rep", "--k", 5])[0] == 0
    text = (tmp_path / "rep" / "report.md").read_text()
    dh = text[text.index("### DH diagnostic"):]
    rows = [line for line in dh.splitlines() if line.startswith("| seed")]
    assert len(rows) == 2 and all("withheld: untied at step 2, 6 steps before" in r for r in rows)


def test_analyzes_dh_figure_leaves_out_what_diagnose_withholds(runs, tmp_path, cli, monkeypatch):
    """The untie run at lr 1e-4 is still a copy at every untied snapshot (2, 4, 6, 8), where
    diagnose withholds the reading: the DH figure draws none of them (it drew an overlap of 1
    at the untie step); the numbers stay in similarity.csv."""
    from dhwt.report import runs_similarity_report

    drawn = {}

    def keep(fig, path):
        drawn[path.name] = [line.get_ydata() for ax in fig.axes for line in ax.get_lines()]
        return save(fig, path)

    save = runs_similarity_report.save
    monkeypatch.setattr(runs_similarity_report, "save", keep)
    assert cli(["analyze", runs["untie"], "--out", tmp_path / "rep", "--k", 5])[0] == 0
    curves = [y for y in drawn["similarity_dh.png"] if len(y) == 5]  # steps 0, 2, 4, 6, 8
    assert curves and all(np.isnan(y[1:]).all() for y in curves)
    dh = [c for c in json.loads((tmp_path / "rep" / "similarity.json").read_text())["curves"]
          if c["kind"] == "dh"]
    assert len(dh) == 2 and all(c["overlap"][1] > 0.99 for c in dh)  # kept in the numbers
    assert "The figure leaves out the snapshots whose reading is withheld" in (
        tmp_path / "rep" / "report.md").read_text()
    assert cli(["analyze", runs["untied"], "--out", tmp_path / "rep2", "--k", 5])[0] == 0
    assert "The figure leaves out" not in (tmp_path / "rep2" / "report.md").read_text()

