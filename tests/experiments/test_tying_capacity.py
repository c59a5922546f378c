"""experiments/tying_capacity: the languages have the intended exact relations, and the price
and the share pair tied, untied and control members by seed."""

from __future__ import annotations

import importlib.util
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from dhwt.languages import compute_truth
from dhwt.languages.language import language_from_spec

HERE = Path(__file__).parents[2] / "experiments" / "tying_capacity"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"tying_capacity_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


languages = _module("languages")
analyse = _module("analyse")


@pytest.mark.parametrize("kind, objective, found", [
    ("sem", "mlm", "sem only"), ("control", "mlm", None), ("sem", "clm", "sem only"),
    ("cnd", "clm", "cnd only"), ("control", "clm", None), ("ratio", "clm", "sem only")])
@pytest.mark.parametrize("k", [1, 4])
def test_the_violations_are_the_k_pairs(kind, objective, found, k):
    truth = compute_truth(language_from_spec(
        languages.spec(kind, k, tail=objective == "clm"), "t"), objective)
    violations = {(p.first, p.second): p.kind for p in truth.pairs() if not p.dh}
    expected = {} if found is None else {(f"s{j}a", f"s{j}b"): found for j in range(k)}
    assert violations == expected
    assert len(truth.symbols) == (5 if objective == "clm" else 3) * k


@pytest.mark.parametrize("kind, objective, ratio", [
    ("sem", "mlm", -math.log(9)), ("sem", "clm", -math.log(9)), ("cnd", "clm", 0.0),
    ("control", "clm", 0.0)])
def test_each_pair_has_its_ratio_in_every_context_that_predicts_it(kind, objective, ratio):
    k = 4
    truth = compute_truth(language_from_spec(
        languages.spec(kind, k, tail=objective == "clm"), "t"), objective)
    for j in range(k):
        log_ratio = truth.log_ratio(f"s{j}a", f"s{j}b")
        predicted = np.isfinite(log_ratio)
        assert predicted.sum() == k  # the K contexts x_m (masked: x_m [MASK]) predict every pair
        np.testing.assert_allclose(log_ratio[predicted], ratio, atol=1e-9)


def test_the_ratio_kind_has_the_drawn_ratio_in_each_context():
    k = 4
    truth = compute_truth(language_from_spec(languages.spec("ratio", k), "t"), "clm")
    q = languages.ratios(k)
    assert len(np.unique(np.round(q, 9))) == k * k  # no two contexts share a ratio
    for j in range(k):
        log_ratio = truth.log_ratio(f"s{j}a", f"s{j}b")
        predicted = np.isfinite(log_ratio)
        # the K contexts x_m in the order of their first occurrence; compare as sets
        np.testing.assert_allclose(np.sort(log_ratio[predicted]),
                                   np.sort(np.log(q[:, j] / (1 - q[:, j]))), atol=1e-9)


@pytest.mark.parametrize("kind", ["cnd", "ratio"])
def test_a_masked_cnd_or_ratio_language_is_refused(kind):
    with pytest.raises(ValueError, match=kind):
        languages.spec(kind, 4, tail=False)


def test_the_price_pairs_members_by_seed():
    tied = {0: 0.30, 1: 0.50, 2: 0.10}
    untied = {2: 0.05, 0: 0.10, 1: 0.45}
    price = analyse.paired(tied, untied)
    assert list(price) == [0, 1, 2]
    np.testing.assert_allclose(list(price.values()), [0.20, 0.05, 0.05])
    with pytest.raises(ValueError, match="seeds differ"):
        analyse.paired(tied, {0: 0.1, 1: 0.2})


def test_the_share_subtracts_the_control_of_the_same_cell_seed_by_seed():
    def cell(language, price, d=2, bias=False):
        return {"language": language, "objective": language.split("-")[1], "k": 4, "d": d,
                "decay": 0.1, "bias": bias, "price": price}
    cells = analyse.analyse([
        cell("sem-clm", {0: 0.30, 1: 0.10}),
        cell("control-clm", {1: 0.04, 0: 0.01}),
        cell("control-clm", {0: 9.0, 1: 9.0}, d=4),
        cell("control-clm", {0: 9.0, 1: 9.0}, bias=True),
        cell("control-mlm", {0: 9.0, 1: 9.0})])
    np.testing.assert_allclose(cells[0]["share"], [0.29, 0.06])
    assert all(c["share"] is None for c in cells[1:])


def test_the_declared_rule():
    assert analyse.decide(np.array([0.020, 0.021, 0.019, 0.020])) == "pays"
    assert analyse.decide(np.array([0.0001, -0.0001, 0.0002, 0.0])) == "equivalent"
    assert analyse.decide(np.array([0.02, -0.02, 0.03, -0.01])) == "undecided"
    assert analyse.predicted("sem-clm", 16, 4, bias=True) == "equivalent"
    assert analyse.predicted("cnd-clm", 16, 4, bias=True) == "pays"
    assert analyse.predicted("ratio-clm", 16, 8, bias=True) == "pays"
    assert analyse.predicted("sem-mlm", 4, 4, bias=False) == "equivalent"
    assert analyse.holm([0.01, 0.04, 0.03]) == [True, False, False]


@pytest.mark.slow
def test_a_cell_is_read_with_its_price_movement_and_t4s_bound(tmp_path):
    """A tiny sem cell and its control, trained: the bound at the tied rows lies between 0 and
    B(0), the pair's merged-row price (its contexts' weight 1/4 of the causal tokens, times
    kl(0.1 || 0.5)); the control has no bound (its pair's ratio is 1). A cell copied without
    its data (gpu.sh's) is read the same, its truth computed."""
    run = _module("run")
    for language in ("sem-clm", "control-clm"):
        run.train_cell(tmp_path, language, 1, 2, 0.1, False, seeds=2, steps=20, every=10)
    sem = analyse.read_cell(run.cell_dir(tmp_path, "sem-clm", 1, 2, 0.1, False))
    control = analyse.read_cell(run.cell_dir(tmp_path, "control-clm", 1, 2, 0.1, False))
    merged = 0.25 * (0.1 * math.log(0.1 / 0.5) + 0.9 * math.log(0.9 / 0.5))
    bound = sem["closeness"]["bound"]
    assert bound.shape == (2,) and np.all(bound >= 0) and np.all(bound <= merged + 1e-9)
    assert np.all(sem["closeness"]["delta"] > 0) and np.all(sem["closeness"]["h"] > 0)
    assert control["closeness"] is None
    assert sem["price_moved"].shape == (2,) and np.all(sem["price_moved"] >= 0)
    shutil.rmtree(run.cell_dir(tmp_path, "sem-clm", 1, 2, 0.1, False) / "data")
    again = analyse.read_cell(run.cell_dir(tmp_path, "sem-clm", 1, 2, 0.1, False))
    # truth.json keeps 12 digits of the Bayes optimum
    assert again["bayes"] == pytest.approx(sem["bayes"], abs=1e-11)
    assert again["price"] == pytest.approx(sem["price"], abs=1e-11)
    np.testing.assert_array_equal(again["input"], sem["input"])


@pytest.mark.slow
def test_a_cell_trained_segment_by_segment_ends_as_one_run_and_stops_by_its_criterion(
        tmp_path):
    """converge.py's schedule does not depend on the run's length: a cell extended 10 steps at a
    time to its stop ends with the population fits of one run trained there at once;
    stopped.json holds the criterion read off the last fifth of its steps, and a stopped cell is
    not trained again. Every segment trains the cell as one ensemble, so on the CPU the two
    agree bit for bit."""
    import json

    from dhwt.languages import load_task
    from dhwt.runs import load_run
    from dhwt.training.runner import train_group

    converge = _module("converge")
    found = converge.converge_cell(tmp_path / "grid", "control-clm", 1, 2, 0.1, False, seeds=2,
                                   segment=10, min_steps=20, cap=40, every=5)
    where = tmp_path / "grid" / "control-clm-k1-d2-wd0.1-nobias"
    assert json.loads((where / "stopped.json").read_text()) == found
    assert found["stopped"] in ("criterion", "cap") and found["step"] in (20, 30, 40)
    assert (found["stopped"] == "cap") == (found["step"] == 40 and not found["price_met"])
    assert found["window"] == [int(0.8 * found["step"]) // 5 * 5, found["step"]]
    timed = [json.loads(line)["steps"] for line in
             (where / "segments.jsonl").read_text().splitlines()]
    assert timed == list(range(10, found["step"] + 1, 10))  # each segment once
    once = tmp_path / "once"
    task = load_task(where / "data", "clm")
    runs = converge.configs(once, "clm", 2, 0.1, False, 2, "cpu", found["step"], 10, 5, 40)
    train_group([(config.replace(data=str(where / "data")), run) for config, run in runs], task,
                overwrite=True)

    def fits(run):
        return [(r["step"], r["seed"], r["loss"]) for r in load_run(run).metrics()
                if r["split"] == "population"]

    for name in ("tied", "untied"):
        assert fits(where / name) == fits(once / name)
    assert converge.converge_cell(tmp_path / "grid", "control-clm", 1, 2, 0.1, False, seeds=2,
                                  segment=10, min_steps=20, cap=40, every=5) is None


@pytest.mark.slow
@pytest.mark.parametrize("left", ["configs rewritten", "one run extended"])
def test_a_cell_stopped_mid_extension_continues_as_one_ensemble(tmp_path, monkeypatch, left):
    """A process stopped while it extended a cell from 20 to 30 steps, after dhwt rewrote the
    tied run's config.toml (the untied run's still of 20 steps), or after an earlier
    converge.py extended the tied run alone (the untied run not yet): converge.py trains the
    cell to its 30 steps, bit for bit as the cell trained there at once where the group is
    extended as one (to float tolerance where the tied run was extended alone)."""
    import json

    from dhwt.config import TrainConfig
    from dhwt.languages import load_task
    from dhwt.runs import load_run
    from dhwt.training.runner import train_group, train_run

    converge = _module("converge")
    cell = dict(language="control-clm", k=1, d=2, decay=0.1, bias=False, seeds=2, segment=10,
                min_steps=30, cap=30, every=5)
    where = tmp_path / "stopped" / "control-clm-k1-d2-wd0.1-nobias"

    def stop_at_30(runs, task, **options):
        if runs[0][0].optim.steps == 30:
            raise KeyboardInterrupt
        return train_group(runs, task, **options)

    monkeypatch.setattr(converge, "train_group", stop_at_30)
    with pytest.raises(KeyboardInterrupt):
        converge.converge_cell(tmp_path / "stopped", **cell)
    monkeypatch.setattr(converge, "train_group", train_group)
    tied = TrainConfig.from_toml(where / "tied" / "config.toml").replace(steps=30)
    if left == "configs rewritten":
        (where / "tied" / "config.toml").write_text(tied.to_toml())
    else:
        train_run(tied, load_task(where / "data", "clm"), where / "tied", resume=True)
    found = converge.converge_cell(tmp_path / "stopped", **cell)
    once = tmp_path / "once"
    runs = converge.configs(once, "clm", 2, 0.1, False, 2, "cpu", 30, 10, 5, 30)
    train_group([(config.replace(data=str(where / "data")), run) for config, run in runs],
                load_task(where / "data", "clm"))

    def fits(run):
        return [(r["step"], r["seed"], r["loss"]) for r in load_run(run).metrics()
                if r["split"] == "population"]

    for run in ("tied", "untied"):
        expected, got = fits(once / run), fits(where / run)
        if left == "configs rewritten":
            assert got == expected
        else:
            assert [f[:2] for f in got] == [f[:2] for f in expected]
            assert [f[2] for f in got] == pytest.approx([f[2] for f in expected], rel=1e-5,
                                                        abs=1e-6)
    assert found["step"] == 30
    assert [json.loads(line)["steps"] for line in
            (where / "segments.jsonl").read_text().splitlines()] == [10, 20, 30]


class _Metrics:
    """A run whose metrics are population fits at steps 0, 100, ..., `last` of two seeds."""

    def __init__(self, loss, last=1000):
        self._loss, self._last = loss, last

    def metrics(self):
        return [{"split": "population", "step": step, "seed": seed, "loss": self._loss(step, seed)}
                for step in range(0, self._last + 1, 100) for seed in (0, 1)]


def test_the_smoothed_excess_averages_the_last_evaluations(monkeypatch):
    """--mean-of M: a member's excess at the last step (and at 80% of it) is the mean of the M
    evaluations ending there; M = 1 is the evaluation itself."""
    import dhwt.runs

    monkeypatch.setattr(dhwt.runs, "load_run", lambda run: _Metrics(
        lambda step, seed: 1.0 + step / 1000 + seed + (0.5 if step == 1000 else 0.0)))
    last, early = analyse.excess_by_seed(Path("run"), bayes=1.0)
    assert last == pytest.approx({0: 1.5, 1: 2.5}) and early == pytest.approx({0: 0.8, 1: 1.8})
    last, early = analyse.excess_by_seed(Path("run"), bayes=1.0, mean_of=3)
    # steps 800, 900, 1,000: (0.8 + 0.9 + 1.5) / 3; steps 600, 700, 800: 0.7
    assert last == pytest.approx({0: 3.2 / 3, 1: 3.2 / 3 + 1})
    assert early == pytest.approx({0: 0.7, 1: 1.7})


def test_the_early_excess_is_read_where_the_criterions_window_opens(monkeypatch):
    """Evaluations off 80% of the last step (1,100: 880): both read the last one before it,
    800, not the nearest, 900."""
    import dhwt.runs

    assert analyse.window_start(list(range(0, 1101, 100))) == 800
    assert analyse.window_start(list(range(0, 1001, 100))) == 800
    monkeypatch.setattr(dhwt.runs, "load_run", lambda run: _Metrics(
        lambda step, seed: 1.0 + step / 1000 + seed, last=1100))
    _, early = analyse.excess_by_seed(Path("run"), bayes=1.0)
    assert early == pytest.approx({0: 0.8, 1: 1.8})


def test_the_second_criterion_reads_each_seeds_price_averaged_over_evaluations(
        tmp_path, monkeypatch):
    """converge.py --mean-of M: a seed's price averaged over the last M evaluations against its
    average over the M ending at 80% of the steps; one spike fails the first criterion (the
    range) and moves the mean by spike / M."""
    import json

    converge = _module("converge")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "truth.json").write_text(json.dumps(
        {"objectives": {"clm": {"bayes_cross_entropy_nats": 0.0}}}))
    spike = {(900, 1): 0.004}
    runs = {"tied": lambda step, seed: 0.1 + spike.get((step, seed), 0.0) - step * 1e-7,
            "untied": lambda step, seed: 0.05}
    monkeypatch.setattr(converge, "population", lambda run, bayes: {
        step: {seed: runs[run.name](step, seed) for seed in (0, 1)}
        for step in range(0, 1001, 100)})
    found = converge.criterion(tmp_path, "clm")
    assert found["window"] == [800, 1000] and not found["price_met"]
    assert found["seeds_price_met"] == 1 and "mean_of" not in found
    found = converge.criterion(tmp_path, "clm", mean_of=5)
    # seed 0: the mean of steps 600-1,000 is 200 steps x 1e-7 below that of 400-800;
    # seed 1: the spike / 5 above that
    assert found["price_shift_max"] == pytest.approx(0.004 / 5 - 2e-5)
    assert found["shift_met"] and found["seeds_shift_met"] == 2 and found["mean_of"] == 5


def test_a_grid_with_no_finished_cell_says_so_in_one_line(tmp_path, monkeypatch):
    """A grid whose cells were all killed before they stopped (no stopped.json) is reported,
    not drawn: the figures have nothing to plot."""
    cell = tmp_path / "control-clm-k64-d4-wd0.1-nobias"
    (cell / "untied").mkdir(parents=True)
    (cell / "segments.jsonl").write_text('{"steps": 1000, "seconds": 64.6}\n')
    monkeypatch.setattr("sys.argv", ["analyse.py", str(tmp_path), "--name", "never-written"])
    with pytest.raises(SystemExit, match="none of the 1 cells in .* has finished"):
        analyse.main()
    assert not (HERE / "results-never-written.md").exists()


def test_the_figures_draw_a_grid_with_panels_missing(tmp_path):
    """Cells of one setting and one objective, a control without its kind: every figure is
    drawn (empty panels stay empty)."""
    cells = analyse.analyse([
        {"language": "control-clm", "objective": "clm", "k": 16, "d": 4, "decay": 0.1,
         "bias": True, "price": {0: 0.01, 1: 0.02},
         "curve": (np.array([0, 100, 200]), np.zeros((3, 2))),
         "stopped": {"step": 200, "stopped": "cap"}}])
    analyse.figure(cells, tmp_path / "price.png")
    analyse.share_figure(cells, tmp_path / "share.png")
    analyse.steps_figure(cells, tmp_path / "steps.png")
    assert all((tmp_path / f"{name}.png").stat().st_size > 0
               for name in ("price", "share", "steps"))
