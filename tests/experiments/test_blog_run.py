"""experiments/wikitext/blog_run.py, the blog's two experiments in one call, at a tiny size on
the CPU: exp 1 and exp 2 trained as the blog does, their curves and figure in OUT, and what
cannot fit refused before any training."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from dhwt.config import TrainConfig

HERE = Path(__file__).parents[2] / "experiments" / "wikitext"
spec = importlib.util.spec_from_file_location("blog_run", HERE / "blog_run.py")
blog_run = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = blog_run
spec.loader.exec_module(blog_run)

WORDS = ("the cat sat on a mat and the dog ran to the red door while one bird sang over "
         "green hills near an old blue house").split()
TINY = """objective = "clm"
architecture = "transformer"
d_model = 8
n_layers = 1
n_heads = 2
d_ff = 16
dropout = 0.1
positions = "sinusoidal"
emb_scale = true
tie_schedule = "untied"
seeds = [1, 2]
vary = "embeddings"
steps = 4
batch_size = 3
lr = 1e-3
lr_schedule = "constant"
lr_min = 1e-3
eval_every = 2
snapshot_every = 2
"""
CPU = ["--device", "cpu", "--precision", "fp32"]


@pytest.fixture()
def tiny(tmp_path, monkeypatch) -> Path:
    """A config of exp 1 at a tiny size on a corpus folder of random lines (word tokens)."""
    monkeypatch.setenv("DHWT_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    folder = tmp_path / "text"
    folder.mkdir()
    for split, lines in (("train", 80), ("valid", 9), ("test", 7)):
        text = "".join(" ".join(rng.choice(WORDS, 6)) + "\n" for _ in range(lines))
        (folder / f"{split}.txt").write_text(text)
    config = tmp_path / "tiny.toml"
    config.write_text(f'corpus = "{folder}"\ntokenizer = "word"\nseq_len = 5\n{TINY}')
    return config


@pytest.mark.slow
def test_both_experiments_run_whole_and_only_small_results_come_back(tiny, tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    assert blog_run.main(["--config", str(tiny), *CPU, "--out", str(out), "--work", str(work),
                          "--budget", "120", "--curves-seconds", "30"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(blog_run.RESULTS)
    # exp 1 checkpoints only where it must (step 0) and where exp 2 starts (its last step)
    assert sorted(p.name for p in (work / "exp1" / "checkpoints").iterdir()) == [
        "step_0000000.pt", "step_0000004.pt"]
    exp2 = TrainConfig.from_toml(work / "exp2" / "config.toml")
    assert (exp2.members.init_from, exp2.members.init_member, exp2.members.seeds,
            exp2.members.redraw, exp2.members.freeze, exp2.optim.steps) == (
        str(work / "exp1"), 0, [100, 200], "input", "loaded", 2)
    with open(out / "blog_curves.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["experiment"], r["step"]) for r in rows] == [
        ("exp1", "0"), ("exp1", "2"), ("exp1", "4"), ("exp2", "0"), ("exp2", "2")]
    # exp 2's output matrices are exp 1's member 0's, loaded into both members and frozen
    assert all(float(r["output_all"]) == pytest.approx(1.0) for r in rows
               if r["experiment"] == "exp2")
    assert any(float(r["input_all"]) < 0.99 for r in rows if r["experiment"] == "exp2")
    summary = json.loads((out / "blog_curves.json").read_text())
    assert summary["steps"] == {"exp1": 4, "exp2": 2}
    assert set(summary["probe_s"]) == {"setup", "step", "evaluation", "snapshot", "checkpoint"}
    assert [len(summary["perplexity"][n]["valid"]) for n in ("exp1", "exp2")] == [2, 2]
    metrics = [json.loads(line) for line in (out / "blog_metrics.jsonl").read_text().splitlines()]
    assert {(m["run"], m["step"]) for m in metrics} == {
        ("exp1", 0), ("exp1", 2), ("exp1", 4), ("exp2", 0), ("exp2", 2)}
    assert (out / "blog_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "done" in (out / "blog_run.log").read_text()


@pytest.mark.parametrize(("args", "message"), [
    (["--device", "cuda"], "device cuda asks for a GPU"),
    ([*CPU, "--rate", "2", "--steps", "1000"],
     "exp 1's 1000 and exp 2's 500 steps need about 750 s at the declared --rate 2 steps/s"),
    ([*CPU, "--budget", "10", "--curves-seconds", "10"], "--budget 10 s leaves nothing to train"),
])
def test_what_cannot_fit_is_refused_before_training(tiny, tmp_path, capsys, args, message):
    out, work = tmp_path / "out", tmp_path / "work"
    assert blog_run.main(["--config", str(tiny), "--out", str(out), "--work", str(work),
                          "--budget", "60", "--curves-seconds", "10", *args]) == 2
    assert f"error: {message}" in capsys.readouterr().out
    assert not work.exists()
    assert json.loads((out / "blog_curves.json").read_text())["refused"]


def test_the_gpt2_tokenizer_without_its_files_is_refused(tiny, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    gpt2 = tmp_path / "gpt2.toml"
    gpt2.write_text(tiny.read_text().replace('tokenizer = "word"', 'tokenizer = "gpt2"'))
    assert blog_run.main(["--config", str(gpt2), *CPU, "--out", str(tmp_path / "out"),
                          "--data", str(tmp_path / "nothing")]) == 2
    assert (f"error: the gpt2 tokenizer's files are not in {tmp_path / 'nothing'}/gpt2/"
            "tiktoken_cache") in capsys.readouterr().out


@pytest.mark.slow
def test_a_probe_too_slow_for_the_budget_refuses_before_the_runs(tiny, tmp_path, capsys):
    work = tmp_path / "work"
    assert blog_run.main(["--config", str(tiny), *CPU, "--out", str(tmp_path / "out"),
                          "--work", str(work), "--steps", "100000", "--budget", "60",
                          "--curves-seconds", "10"]) == 2
    found = capsys.readouterr().out
    assert "probe: setup" in found and "steps need about" in found
    assert list(work.iterdir()) == []  # the probe's scratch directory is gone, no run began


@pytest.mark.slow
def test_training_past_the_budget_stops_and_measures_what_it_wrote(tiny, tmp_path):
    """A declared rate far too fast: exp 1 is interrupted at its deadline, exp 2 never starts,
    and the curve covers exp 1's snapshots so far."""
    out, work = tmp_path / "out", tmp_path / "work"
    assert blog_run.main(["--config", str(tiny), *CPU, "--out", str(out), "--work", str(work),
                          "--steps", "100000", "--rate", "1e9", "--budget", "14",
                          "--curves-seconds", "8"]) == 0
    log = (out / "blog_run.log").read_text()
    assert "exp 1: stopped for time" in log and not (work / "exp2").exists()
    with open(out / "blog_curves.csv") as f:
        steps = [int(r["step"]) for r in csv.DictReader(f)]
    assert steps[0] == 0 and len(steps) >= 2 and max(steps) < 100000


def test_coarse_to_fine_covers_every_step_once():
    steps = list(range(0, 17000, 1000))
    order = blog_run.coarse_to_fine(steps)
    assert sorted(order) == steps and order[:3] == [0, 16000, 8000]
