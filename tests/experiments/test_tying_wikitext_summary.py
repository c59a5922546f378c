"""experiments/tying_wikitext/word_gpu_summary.py: runs of one name in several studies join by
seed, and every comparison pairs the seeds both runs have."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from dhwt.commands.study import study_results
from dhwt.config.study import StudyConfig
from dhwt.runs import load_run

HERE = Path(__file__).parents[2] / "experiments" / "tying_wikitext"
spec = importlib.util.spec_from_file_location("word_gpu_summary", HERE / "word_gpu_summary.py")
summary = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = summary  # dataclasses look their module up
spec.loader.exec_module(summary)

STUDY = """
[study]
name = "tiny {name}"

[data]
grammar = "parity"
set = {{ n_bits = 3 }}
valid_fraction = 0.25

[train]
objective = "clm"
d_model = 8
n_heads = 2
d_ff = 16
seeds = {seeds}
steps = 20
lr = 1e-2
eval_every = 10
snapshot_every = 20
checkpoint_every = 20

[[runs]]
name = "untied"
tie_schedule = "untied"

[[runs]]
name = "tied"
tie_schedule = "tied"
{extra}"""

EXTRA = """
[[runs]]
name = "untied-d4"
tie_schedule = "untied"
d_model = 4
d_ff = 8
seeds = [1, 2, 3]

[[runs]]
name = "tied-lr3e-2"
tie_schedule = "tied"
lr = 3e-2
seeds = [1]
"""


@pytest.fixture(scope="module")
def studies(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("tw")
    made = []
    for name, seeds, extra in (("a", "[1, 2]", ""), ("b", "[3]", EXTRA)):
        path = root / f"{name}.toml"
        path.write_text(STUDY.format(name=name, seeds=seeds, extra=extra))
        study_results(StudyConfig.from_toml(path), root / name)
        made.append(root / name)
    return made


def _valid(path: Path, seed: int, step: int) -> float:
    """The valid loss the trainer logged for `seed` at `step`, read from its records."""
    [loss] = [r["loss"] for r in load_run(path).metrics()
              if r["split"] == "valid" and r["seed"] == seed and r["step"] == step]
    return loss


@pytest.mark.slow
def test_runs_of_one_name_join_by_seed_and_pair_by_seed(studies):
    a, b = studies
    runs = {run.name: run for run in summary.read_study(a, b)}
    assert runs["untied"].seeds == runs["tied"].seeds == (1, 2, 3)
    assert runs["tied-lr3e-2"].seeds == (1,)
    pairs = {(run.name, ref.name) for run, ref in summary.comparisons(list(runs.values()))}
    assert pairs == {("tied", "untied"), ("tied", "untied-d4"), ("untied-d4", "untied"),
                     ("tied-lr3e-2", "untied"), ("tied-lr3e-2", "untied-d4")}
    seeds, diff = summary.paired(runs["tied"], runs["untied"], 20)
    expected = [_valid(a / "runs" / "tied", s, 20) - _valid(a / "runs" / "untied", s, 20)
                for s in (1, 2)]
    expected.append(_valid(b / "runs" / "tied", 3, 20) - _valid(b / "runs" / "untied", 3, 20))
    assert seeds == [1, 2, 3]
    np.testing.assert_allclose(diff, expected, rtol=1e-12)
    seeds, diff = summary.paired(runs["tied-lr3e-2"], runs["untied"], 20)
    assert seeds == [1]
    np.testing.assert_allclose(diff, [_valid(b / "runs" / "tied-lr3e-2", 1, 20)
                                      - _valid(a / "runs" / "untied", 1, 20)], rtol=1e-12)


@pytest.mark.slow
def test_against_a_run_adds_every_other_run_of_its_tie_schedule(studies):
    """--against tied: the other tied run against it, paired by the seed both have; a pair
    compared already is not repeated; an unknown name stops the script in one line."""
    runs = {run.name: run for run in summary.read_study(*studies)}
    plain = summary.comparisons(list(runs.values()))
    more = summary.comparisons(list(runs.values()), ("tied",))
    assert more[:len(plain)] == plain
    assert [(run.name, ref.name) for run, ref in more[len(plain):]] == [("tied-lr3e-2", "tied")]
    seeds, diff = summary.paired(runs["tied-lr3e-2"], runs["tied"], 20)
    assert seeds == [1]
    np.testing.assert_allclose(diff, [_valid(studies[1] / "runs" / "tied-lr3e-2", 1, 20)
                                      - _valid(studies[0] / "runs" / "tied", 1, 20)], rtol=1e-12)
    text = "\n".join(summary.best_table(list(runs.values()), 0.02, ("tied",)))
    assert "| tied-lr3e-2 | tied | 20 | 1 |" in text
    again = summary.comparisons(list(runs.values()), ("untied",))  # untied-d4 - untied: once
    assert [(run.name, ref.name) for run, ref in again] == [(run.name, ref.name)
                                                            for run, ref in plain]
    with pytest.raises(SystemExit, match="^error: --against tide: no run of that name"):
        summary.comparisons(list(runs.values()), ("tide",))


@pytest.mark.slow
def test_a_run_at_its_best_evaluation_is_its_lowest_valid_loss_per_seed(studies):
    a, b = studies
    runs = {run.name: run for run in summary.read_study(a, b)}
    low, where = summary.best(runs["untied"], [1, 2, 3], 20)
    for seed, got, step in zip((1, 2, 3), low, where):
        study = a if seed < 3 else b
        logged = {s: _valid(study / "runs" / "untied", seed, s) for s in (10, 20)}
        assert step == min(logged, key=logged.get) and got == pytest.approx(min(logged.values()))
    low, where = summary.best(runs["untied"], [2], 10)  # only the evaluations to step 10
    assert where.tolist() == [10] and low[0] == pytest.approx(_valid(a / "runs" / "untied", 2, 10))
    text = "\n".join(summary.best_table(list(runs.values()), 0.02))
    assert "| tied | untied | 20 | 1, 2, 3 |" in text and "| untied | 1, 2, 3 | 20 |" in text


@pytest.mark.slow
def test_the_script_writes_the_tables_the_csv_and_the_figure(studies, tmp_path, monkeypatch):
    (tmp_path / "figures").mkdir()
    monkeypatch.setattr(sys, "argv", ["x", *map(str, studies), "--stem", "c", "--every", "10",
                                      "--margin", "0.02", "--figure", "differences", "--title",
                                      "tiny", "--out", str(tmp_path)])
    summary.main()
    text = (tmp_path / "results-c.md").read_text()
    assert "| tied | untied | 20 | 1, 2, 3 |" in text and "| tied | untied | 10 | 1, 2, 3 |" in text
    assert "| tied-lr3e-2 | untied | 20 | 1 |" in text
    rates = [line for line in text.splitlines() if line.startswith("| tied | 20 | 1 | ")]
    assert len(rates) == 1 and "0.01: " in rates[0] and "0.03: " in rates[0]  # seed 1 only
    rows = (tmp_path / "results-c.csv").read_text().splitlines()
    assert rows[0] == "run,lr,tie,d_model,seed,step,split,loss"
    assert {row.split(",")[4] for row in rows[1:] if row.startswith("untied,")} == {"1", "2", "3"}
    assert (tmp_path / "figures" / "c.png").stat().st_size > 0
    monkeypatch.setattr(sys, "argv", ["x", *map(str, studies), "--name", "n", "--out",
                                      str(tmp_path)])
    summary.main()  # the word-level defaults: rows every 500 steps, the curves per rate
    assert "| tied | untied | 20 | 1, 2, 3 |" in (tmp_path / "results-word-gpu-n.md").read_text()
    assert (tmp_path / "figures" / "word-gpu-n.png").stat().st_size > 0


@pytest.mark.parametrize("diff, verdict", [
    ([0.10, 0.11, 0.12], "above 0"), ([-0.10, -0.11, -0.12], "below 0"),
    ([0.001, -0.001, 0.0], "within ±0.02"), ([0.05, -0.05, 0.0], "undecided"),
    ([0.01, 0.02], "")])
def test_the_declared_rule(diff, verdict):
    assert summary.verdict(np.array(diff), 0.02) == verdict


def test_the_margin_test_is_the_90_percent_interval():
    # mean 0.003, standard error 0.003 / sqrt(3): 95% [-0.0045, +0.0105] holds 0, 90% is
    # [-0.0021, +0.0081]: inside a margin of 0.009 (the 95% interval is not), not inside 0.008
    diff = np.array([0.0, 0.003, 0.006])
    assert summary.verdict(diff, 0.009) == "within ±0.009"
    assert summary.verdict(diff, 0.008) == "undecided"


@pytest.mark.slow
def test_a_run_still_training_keeps_only_the_steps_every_member_evaluated(studies, tmp_path,
                                                                         capsys):
    """A run whose member 2 has not yet logged step 20 keeps steps 0 and 10; a run with one
    member logged at all is left out, and said so."""
    study = tmp_path / "a"
    shutil.copytree(studies[0], study)
    for run, dropped in (("untied", lambda r: r["seed"] == 2 and r["step"] == 20),
                         ("tied", lambda r: r["seed"] == 2)):
        metrics = study / "runs" / run / "metrics.jsonl"
        lines = metrics.read_text().splitlines()
        metrics.write_text("".join(f"{line}\n" for line in lines
                                   if not dropped(json.loads(line))))
    runs = {run.name: run for run in summary.read_study(study)}
    assert runs["untied"].splits["valid"][0].tolist() == [0, 10]
    assert runs["untied"].splits["valid"][1].shape == (2, 2)
    assert "tied" not in runs and "left out" in capsys.readouterr().err