"""Runs trained as one ensemble (one `train` call over several runs): each run directory equals
the run trained alone, a killed group resumes bit for bit, and one run of a group resumes on its
own."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from dhwt.runs.snapshots import read_snapshot
from dhwt.errors import DhwtError
from dhwt.config import TrainConfig
from dhwt.training.runner import train_group, train_run
from dhwt.runs.checkpoints import latest_checkpoint, list_checkpoints
from dhwt.runs.run import is_finished

COMMON = dict(steps=240, eval_every=40, snapshot_every=80, checkpoint_every=80, lr=1e-2,
              lr_period=100, batch_size=8, grad_clip=0.5)
#: The steps the group is extended to (from COMMON's 240).
EXTENDED = 320
#: Every kind of member: tied throughout, untied throughout, untied later, tied later (by "out").
SCHEDULES = {"tied": ("tied", [3, 5]), "untied": ("untied", [3]),
             "late": ("untie@100", [5, 7]), "retie": ("untied,tie@130:out", [9])}


@pytest.fixture(scope="module")
def task(make_task):
    return make_task()


def _runs(root, steps=COMMON["steps"]):
    return [(TrainConfig(tie_schedule=schedule, seeds=seeds, **{**COMMON, "steps": steps}),
             root / name) for name, (schedule, seeds) in SCHEDULES.items()]


def _close(name, a, b):
    """Weights (or their optimizer state) equal to float tolerance, except the attention's key
    bias (rows d..2d of in_proj_bias): softmax ignores it, so its gradient is zero up to
    rounding, which AdamW (eps 1e-12) scales to full steps: it follows the rounding of the
    computation, not the training (the value never reaches an output)."""
    if name == "blocks.0.in_proj_bias" and a.dim():
        d = a.shape[-1] // 3
        a, b = (torch.cat([x[..., :d], x[..., 2 * d:]], -1) for x in (a, b))
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def _metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]


@pytest.fixture(scope="module")
def alone(task, tmp_path_factory):
    """Each run of the group trained on its own."""
    root = tmp_path_factory.mktemp("alone")
    for config, run_dir in _runs(root):
        train_run(config, task, run_dir)
    return root


@pytest.fixture(scope="module")
def grouped(task, tmp_path_factory):
    """The same runs trained as one ensemble, uninterrupted."""
    root = tmp_path_factory.mktemp("grouped")
    results = train_group(_runs(root), task)
    assert [r.run_dir for r in results] == [d for _, d in _runs(root)]
    return root


@pytest.mark.parametrize("name", SCHEDULES)
def test_each_run_of_a_group_equals_the_run_trained_alone(name, alone, grouped):
    _assert_equal_runs(alone / name, grouped / name)


def _assert_equal_runs(solo, group):
    """The run directory `group` (trained in a group) equals `solo` (trained alone) to float
    tolerance: config.toml, every metric line, snapshot and the last checkpoint."""
    assert (solo / "config.toml").read_text() == (group / "config.toml").read_text()
    a, b = _metrics(solo), _metrics(group)
    assert [(r["step"], r["member"], r["seed"], r["split"], r["tied"]) for r in a] == \
           [(r["step"], r["member"], r["seed"], r["split"], r["tied"]) for r in b]
    for x, y in zip(a, b):
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-5, abs=1e-6)
        assert y["gap"] == pytest.approx(x["gap"], rel=1e-4, abs=1e-5)
    snaps = sorted(p.name for p in (solo / "embeddings").iterdir())
    assert snaps == sorted(p.name for p in (group / "embeddings").iterdir())
    for snap in snaps:
        s, g = read_snapshot(solo / "embeddings" / snap), read_snapshot(group / "embeddings" / snap)
        assert (s.tied, s.seeds) == (g.tied, g.seeds)
        for key in ("input", "output"):
            torch.testing.assert_close(getattr(g, key), getattr(s, key), rtol=1e-4, atol=1e-5)
    (_, s), (_, g) = (latest_checkpoint(d / "checkpoints") for d in (solo, group))
    assert s["model"].keys() == g["model"].keys()  # a tied run's has no output matrix
    for key in s["model"]:
        _close(key, g["model"][key], s["model"][key])
    assert s["optimizer_params"] == g["optimizer_params"]
    assert s["optimizer"]["param_groups"] == g["optimizer"]["param_groups"]
    names = [n for group in s["optimizer_params"] for n in group]
    for i, state in s["optimizer"]["state"].items():
        for key, value in state.items():
            _close(names[i], g["optimizer"]["state"][i][key], value)
    for stream in ("data", "draw"):
        assert all(torch.equal(x, y) for x, y in zip(s["rng"][stream], g["rng"][stream]))
    assert is_finished(group)


def test_a_killed_group_resumes_bit_for_bit(
        task, grouped, tmp_path, interrupt_at, assert_same):
    interrupt_at(200)  # after the checkpoints of step 160
    runs = _runs(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        train_group(runs, task)
    # a kill while the checkpoints of step 160 were written: the last run has only step 80
    newest = list_checkpoints(runs[-1][1] / "checkpoints")[-1]
    assert newest.name == "step_0000160.pt"
    newest.unlink()
    train_group(runs, task, resume=True)  # from step 80, the newest step all four hold
    for config, run_dir in runs:
        _, a = latest_checkpoint(run_dir / "checkpoints")
        _, b = latest_checkpoint(grouped / run_dir.name / "checkpoints")
        for part in ("model", "optimizer", "rng", "optimizer_params"):
            assert_same(a[part], b[part])
        assert (run_dir / "metrics.jsonl").read_text() == \
               (grouped / run_dir.name / "metrics.jsonl").read_text()
        for snap in (grouped / run_dir.name / "embeddings").iterdir():
            assert (run_dir / "embeddings" / snap.name).read_bytes() == snap.read_bytes()


def test_one_run_of_a_killed_group_resumes_alone(task, alone, tmp_path, interrupt_at):
    interrupt_at(120)  # after the checkpoints of step 80
    runs = _runs(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        train_group(runs, task)
    config, run_dir = runs[2]  # untie@100: the group's untied rows exist, this run's are unused
    _, state = latest_checkpoint(run_dir / "checkpoints")
    assert "embeddings.untied_output" not in state["model"]
    train_run(config, task, run_dir, resume=True)
    _, a = latest_checkpoint(run_dir / "checkpoints")
    _, b = latest_checkpoint(alone / run_dir.name / "checkpoints")
    for key in b["model"]:
        _close(key, a["model"][key], b["model"][key])


def test_a_group_is_refused_when_its_runs_differ_in_more_than_tying_or_seeds(task, tmp_path):
    runs = [(TrainConfig(**COMMON), tmp_path / "a"),
            (TrainConfig(**{**COMMON, "lr": 2e-2}), tmp_path / "b")]
    with pytest.raises(DhwtError, match="agree on everything but tie_schedule and seeds"):
        train_group(runs, task)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_group_without_a_common_checkpoint_step_is_refused(task, tmp_path, interrupt_at):
    interrupt_at(120)
    runs = _runs(tmp_path)[:2]
    with pytest.raises(KeyboardInterrupt):
        train_group(runs, task)
    for path in list_checkpoints(runs[0][1] / "checkpoints")[-1:]:
        path.unlink()  # run 0 keeps step 0 only, run 1 keeps 0 and 80 ...
    for path in list_checkpoints(runs[1][1] / "checkpoints")[:1]:
        path.unlink()  # ... and loses step 0
    with pytest.raises(DhwtError, match="no checkpoint of a common step; resume each"):
        train_group(runs, task, resume=True)


def test_a_nan_in_one_run_stops_the_group_naming_that_run(task, tmp_path):
    blowup = dict(steps=50, lr=1e30, lr_schedule="constant", lr_min=0.0, eval_every=1,
                  checkpoint_every=1)
    runs = [(TrainConfig(tie_schedule=schedule, seeds=[3], **blowup), tmp_path / schedule)
            for schedule in ("tied", "untied")]
    with pytest.raises(DhwtError, match=r"became (nan|inf) at step \d+ \(member seed 3 of \S+"
                                        r"(tied|untied)\); last good checkpoint: \S+\.pt \(and "
                                        r"that step in the group's other runs\)$") as info:
        train_group(runs, task)
    step = int(str(info.value).split(" at step ")[1].split()[0])
    for _, run_dir in runs:  # both runs keep finite checkpoints of one step before the nan
        _, state = latest_checkpoint(run_dir / "checkpoints")
        assert state["step"] <= step
        assert all(torch.isfinite(v).all() for v in state["model"].values())
    steps = {latest_checkpoint(d / "checkpoints")[1]["step"] for _, d in runs}
    assert len(steps) == 1


@pytest.fixture(scope="module")
def extended(task, grouped, tmp_path_factory):
    """The group trained uninterrupted to 240 steps, then extended to EXTENDED as one
    ensemble."""
    root = tmp_path_factory.mktemp("extended") / "runs"
    shutil.copytree(grouped, root)
    results = train_group(_runs(root, EXTENDED), task, resume=True)
    assert [(r.step, r.start, r.touched) for r in results] == [(EXTENDED, 240, True)] * 4
    return root


@pytest.mark.parametrize("name", SCHEDULES)
def test_a_group_extended_as_one_ensemble_equals_each_run_extended_alone(name, task, grouped,
                                                                         extended, tmp_path):
    solo = tmp_path / name
    shutil.copytree(grouped / name, solo)
    config = next(c for c, d in _runs(tmp_path, EXTENDED) if d == solo)
    train_run(config, task, solo, resume=True)
    _assert_equal_runs(solo, extended / name)
    assert latest_checkpoint(extended / name / "checkpoints")[1]["step"] == EXTENDED
    assert is_finished(extended / name)


@pytest.mark.parametrize("alone, message", [
    (EXTENDED, "cannot extend {0} as part of a group: {1} has finished its 320 steps already; "
               "resume {0} on its own with --steps"),
    (280, "cannot extend {0} and {1} as one group: they are configured for 240 and 280 steps; "
          "resume each on its own with --steps")])
def test_a_group_is_extended_only_as_a_whole_from_one_step(task, grouped, tmp_path, alone,
                                                            message):
    """A run of the group extended on its own first, to the group's new steps (the group's
    extension would extend the others only) or short of them (it would rewind that run to the
    others' step): refused, and nothing is written."""
    shutil.copytree(grouped, tmp_path, dirs_exist_ok=True)
    runs = _runs(tmp_path, EXTENDED)
    train_run(runs[1][0].replace(steps=alone), task, runs[1][1], resume=True)
    before = _stamps(tmp_path)
    with pytest.raises(DhwtError) as info:
        train_group(runs, task, resume=True)
    assert str(info.value) == message.format(runs[0][1], runs[1][1])
    assert _stamps(tmp_path) == before


def _stamps(root):
    """When each file under `root` was last written, but the runs' lock files."""
    return {p: p.stat().st_mtime_ns for p in root.rglob("[!.]*") if p.is_file()}


def test_a_group_stopped_while_its_extension_rewrote_the_configs_is_extended_by_the_same_call(
        task, grouped, extended, tmp_path, interrupt_at, assert_same):
    """A stop inside the group's extension after run 0's and run 1's config.toml were rewritten
    (their records end at step 240, so neither has finished): the same call extends every run
    again (stopped again at step 300), and then ends bit for bit where the uninterrupted
    extension did."""
    shutil.copytree(grouped, tmp_path, dirs_exist_ok=True)
    runs = _runs(tmp_path, EXTENDED)
    for config, run_dir in runs[:2]:
        (run_dir / "config.toml").write_text(config.to_toml())
    assert [is_finished(d) for _, d in runs] == [False, False, True, True]
    interrupt_at(300)
    with pytest.raises(KeyboardInterrupt):
        train_group(runs, task, resume=True)
    assert not any(is_finished(d) for _, d in runs)
    train_group(runs, task, resume=True)
    for _, run_dir in runs:
        _, a = latest_checkpoint(run_dir / "checkpoints")
        _, b = latest_checkpoint(extended / run_dir.name / "checkpoints")
        for part in ("model", "optimizer", "rng", "optimizer_params"):
            assert_same(a[part], b[part])
        for name in ("config.toml", "metrics.jsonl"):
            assert (run_dir / name).read_text() == (extended / run_dir.name / name).read_text()
        for snap in (extended / run_dir.name / "embeddings").iterdir():
            assert (run_dir / "embeddings" / snap.name).read_bytes() == snap.read_bytes()
        assert is_finished(run_dir)
