"""`dhwt analyze` on text runs: loss, KNN match between members and the DH diagnostic over
training, checked against a float64 brute force on the run's own snapshots."""

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
