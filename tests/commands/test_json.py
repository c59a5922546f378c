"""Every command takes --json: one JSON document on stdout with the numbers of its text or
report, built from the same result object (issue 31 item 1)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from dhwt.cli import cli as group


def test_every_command_has_json():
    lacking = [name for name, command in group.commands.items()
               if "--json" not in {o for p in command.params for o in p.opts}]
    assert not lacking, f"commands without --json: {lacking}"


def test_knn_json_has_the_numbers_the_text_prints(cli, tmp_path):
    rng = np.random.default_rng(0)
    for name in "ab":
        np.save(tmp_path / f"{name}.npy", rng.normal(size=(40, 3)))
    args = ["knn", tmp_path / "a.npy", tmp_path / "b.npy", "--k", 3]
    code, text, err = cli(args)
    assert code == 0, err
    code, out, err = cli([*args, "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["k"] == 3 and doc["tokens"] == 40 and doc["metric"] == "ip"
    for score in ("jaccard", "overlap"):
        shown = re.search(rf"^{score} +([0-9.]+) .* chance ([0-9.]+)", text, re.M)
        assert f"{doc['mean_' + score]:.4f}" == shown[1]
        assert f"{doc['chance']['mean_' + score]:.4f}" == shown[2]


def test_synth_json_has_the_bayes_optimum_and_relations_the_summary_gives(cli):
    code, text, err = cli(["synth", "--grammar", "parity"])
    assert code == 0, err
    code, out, err = cli(["synth", "--grammar", "parity", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    mlm = doc["objectives"]["mlm"]
    assert f"Bayes optimum: accuracy {mlm['bayes_accuracy']:.4f}" in text
    kinds = {(p["first"], p["second"]): p["kind"] for p in mlm["pairs"]}
    assert kinds[("0a", "0b")] == "sem only" and kinds[("1a", "1b")] == "sem and cnd"
    assert doc["class_strings"] == 128 and doc["written"] is None


def test_verify_theorems_json_counts_what_the_table_shows(cli):
    code, text, _ = cli(["verify-theorems", "--only", "T1"])
    code_json, out, _ = cli(["verify-theorems", "--only", "T1", "--json"])
    doc = json.loads(out)
    assert code == code_json == 0
    assert doc["failed"] == 0 and doc["passed"] == len(doc["checks"]) == text.count(" PASS ")
    assert {c["theorem"] for c in doc["checks"]} == {"T1"}


@pytest.mark.slow
def test_train_and_analyze_json(cli, tmp_path):
    run = tmp_path / "run"
    code, out, err = cli(["train", "--grammar", "parity", "--steps", 4, "--seeds", "1,2",
                          "--eval-every", 2, "--snapshot-every", 2, "--out", run, "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["step"] == 4 and doc["start"] == 0 and doc["run_dir"] == str(run)
    assert {r["step"] for r in doc["final_metrics"]} == {4}
    rep = tmp_path / "rep"
    code, out, err = cli(["analyze", run, "--out", rep, "--json"])
    assert code == 0 and err == f"report: {rep / 'report.md'}\n", err
    doc = json.loads(out)
    fit = doc["closeness"]["runs"]["run"]
    assert fit["step"] == 4 and fit["seeds"] == [1, 2] and len(fit["accuracy"]) == 2
    curves = doc["similarity_curves"]
    assert curves == json.loads((rep / "similarity.json").read_text())


TINY_STUDY = """
[study]
name = "tiny"

[data]
grammar = "parity"
valid_fraction = 0.25
set = { n_bits = 3 }

[train]
steps = 4
seeds = "1-2"
snapshot_every = 2
eval_every = 2
checkpoint_every = 2

[[runs]]
tie_schedule = "tied"
name = "tied"

[[runs]]
tie_schedule = "untie@2"
name = "untie"
"""


@pytest.mark.slow
def test_study_json_has_each_runs_final_fit(cli, tmp_path):
    (tmp_path / "study.toml").write_text(TINY_STUDY)
    out = tmp_path / "out"
    code, text, err = cli(["study", tmp_path / "study.toml", "--out", out, "--json"])
    assert code == 0, err
    doc = json.loads(text)
    assert doc["report"] == str(out / "report.md") and doc["analysis"] is None
    runs = doc["closeness"]["runs"]
    assert set(runs) == {"tied", "untie"} and runs["tied"]["seeds"] == [1, 2]
    assert set(runs["tied"]["final_closeness"]) == {"tied matrix"}
    assert set(runs["untie"]["final_closeness"]) == {"input", "output"}
