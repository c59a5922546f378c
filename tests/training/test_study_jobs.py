"""`dhwt study` on a job engine, what needs no job process: the SLURM jobs it would submit
(submitit's sbatch script, built without a cluster), the settings it refuses, a run another
process trains, and `--steps M` (in this process: an extension of each group as one ensemble,
equal to `train` of the group with resume). The jobs themselves:
tests/reliability/test_study_jobs.py."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
import torch

from dhwt.training.runner import train_group, train_run
from dhwt.commands.study import study_results
from dhwt.config.study import StudyConfig
from dhwt.training.study import Group, train_study_group
from dhwt.training.study_jobs import JobSettings, job_parameters, make_executor
from dhwt.config import TrainConfig
from dhwt.directories import lock
from dhwt.errors import DhwtError
from dhwt.runs.snapshots import read_snapshot
from tests.test_study import STUDY


def one_error(code, out, err):
    return code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1


#: STUDY with three seeds a run: here a run extended in its group rounds apart from the run
#: extended alone, so a run's bytes say which trained it.
GROUP_STUDY = STUDY.replace('seeds = "1-2"', 'seeds = "1-3"')


@pytest.fixture
def study_file(tmp_path):
    path = tmp_path / "study.toml"
    path.write_text(STUDY)
    return path


def test_slurm_jobs_ask_for_what_the_user_set(tmp_path, monkeypatch):
    """The sbatch script submitit writes for a job (nothing is submitted): one task on one node,
    with the partition, time, CPUs and GPUs given, and the job's name."""
    slurm = pytest.importorskip("submitit.slurm.slurm")
    monkeypatch.setattr(slurm.SlurmExecutor, "affinity", classmethod(lambda cls: 2))  # srun here
    settings = JobSettings("slurm", partition="gpu", time=90, cpus=4, gpus=1)
    script = make_executor(settings, tmp_path / "jobs", "dhwt-tiny")._executor \
        ._make_submission_file_text("python -m submitit.core._submit jobs", "0")
    for line in ("--partition=gpu", "--time=90", "--cpus-per-task=4", "--gpus-per-node=1",
                 "--nodes=1", "--ntasks-per-node=1", "--job-name=dhwt-tiny"):
        assert f"#SBATCH {line}\n" in script
    unset = make_executor(JobSettings("slurm"), tmp_path / "jobs", "dhwt-tiny")._executor \
        ._make_submission_file_text("python", "0")
    assert "--partition" not in unset and "--gpus-per-node" not in unset  # the cluster's own


def test_local_jobs_share_the_cores_and_have_no_time_limit(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))  # 8 cores here
    assert [JobSettings(jobs=n).threads() for n in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]
    assert JobSettings().threads() == 1 and JobSettings().limit(waiting=3) == 8
    assert JobSettings("slurm").threads() is None and JobSettings("slurm").limit(waiting=3) == 3
    assert job_parameters(JobSettings(jobs=2), "x")["timeout_min"] >= 60 * 24 * 365


def test_submitits_own_timeout_cap_is_slurm_requeues(tmp_path, monkeypatch):
    """submitit stops requeuing a job that timed out more than its max_num_timeout times; it is
    --slurm-requeues, which also counts preemptions, so that it is never the lower cap."""
    slurm = pytest.importorskip("submitit.slurm.slurm")
    monkeypatch.setattr(slurm.SlurmExecutor, "affinity", classmethod(lambda cls: 2))
    for requeues, expected in ((None, 3), (0, 0), (7, 7)):
        settings = JobSettings("slurm", requeues=requeues)
        assert make_executor(settings, tmp_path, "x")._executor.max_num_timeout == expected
    assert make_executor(JobSettings(jobs=1), tmp_path, "x")._executor.max_num_timeout == 3


def test_slurm_where_there_is_none_is_one_line(tmp_path, cli, study_file, monkeypatch):
    slurm = pytest.importorskip("submitit.slurm.slurm")
    monkeypatch.setattr(slurm.SlurmExecutor, "affinity", classmethod(lambda cls: -1))  # no srun
    code, out, err = cli(["study", study_file, "--out", tmp_path / "out", "--executor", "slurm"])
    assert one_error(code, out, err)
    assert "--executor slurm submits with SLURM, which this machine does not have" in err
    assert not (tmp_path / "out").exists()  # checked before anything is written


def test_without_submitit_jobs_name_the_extra(tmp_path, cli, study_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit fails
    code, out, err = cli(["study", study_file, "--out", tmp_path / "out", "--jobs", "2"])
    assert one_error(code, out, err) and "pip install 'dhwt[cluster]'" in err


@pytest.mark.parametrize("args, message", [
    (["--slurm-partition", "gpu"], "--slurm-partition is a setting of SLURM jobs; give it with "
                                   "--executor slurm"),
    (["--jobs", "2", "--slurm-time", "60"], "--slurm-time is a setting of SLURM jobs"),
    (["--jobs", "0"], "--jobs"),
    (["--executor", "pbs"], "--executor"),
    (["--jobs", "2", "--slurm-requeues", "2"], "--slurm-requeues is a setting of SLURM jobs"),
    (["--executor", "slurm", "--slurm-requeues", "-1"], "'--slurm-requeues': -1 is not in the "
                                                        "range x>=0"),
    (["--steps", "10"], "cannot continue the study with steps = 10: run 'tied' is configured for "
                        "20 steps, and --steps may extend a study's runs, not shorten them"),
])
def test_bad_job_settings_are_one_line_before_anything_is_written(tmp_path, cli, study_file,
                                                                   args, message):
    code, out, err = cli(["study", study_file, "--out", tmp_path / "out", *args])
    assert one_error(code, out, err) and message in err, err
    assert not (tmp_path / "out").exists()


def _session_not_ended(run):
    """What a kill during training leaves of the run's record: its newest session not ended."""
    sessions = json.loads((run / "sessions.json").read_text())
    sessions[-1].update(end_utc=None, to_step=None)
    (run / "sessions.json").write_text(json.dumps(sessions))


def _kill_after_step_10(run):
    """What a kill after a run's checkpoint of step 10 leaves: no report, nothing of step 20."""
    (run / "report.md").unlink()
    (run / "checkpoints" / "step_0000020.pt").unlink()
    (run / "embeddings" / "step_0000020.safetensors").unlink()


def test_a_requeued_job_resumes_its_group_or_starts_it_again(tmp_path, study_file):
    """What a job requeued after preemption or its time limit runs: train_study_group again, on the
    group it was submitted with (a fresh one here). The group resumes from its newest
    checkpoint, or, stopped before each of its runs had one, starts again; its runs equal the
    study's."""
    out = tmp_path / "out"
    study_results(StudyConfig.from_toml(study_file), out)
    runs = [out / "runs" / name for name in ("tied", "untie")]
    last = {run: (run / "embeddings" / "step_0000020.safetensors").read_bytes() for run in runs}
    group = Group(tuple((TrainConfig.from_toml(run / "config.toml"), run) for run in runs),
                  False, out / "data")
    for run in runs:
        _kill_after_step_10(run)
    kept = (runs[0] / "embeddings" / "step_0000010.safetensors").stat().st_ino
    train_study_group(group)
    assert (runs[0] / "embeddings" / "step_0000010.safetensors").stat().st_ino == kept  # resumed
    for run in runs:
        assert (run / "embeddings" / "step_0000020.safetensors").read_bytes() == last[run]
    shutil.rmtree(runs[1] / "checkpoints")  # stopped before every run had its first: anew
    train_study_group(group)
    for run in runs:
        assert (run / "embeddings" / "step_0000020.safetensors").read_bytes() == last[run]
        assert (run / "checkpoints" / "step_0000020.pt").is_file()


def test_a_run_another_process_trains_is_refused_before_any_job(tmp_path, study_file):
    """A job of an earlier `dhwt study` still training a run (its study command gone): the
    study refuses at once, naming the run, and starts no job."""
    out = tmp_path / "out"
    study_results(StudyConfig.from_toml(study_file), out)
    _kill_after_step_10(out / "runs" / "untie")
    with lock(out / "runs" / "untie"):  # as a job's process holds it
        with pytest.raises(DhwtError, match=r"run 'untie' of .* is being trained by process "
                                            r"\d+ \(a job of an earlier `dhwt study`\?\); run "
                                            "the same command again when it has ended"):
            study_results(StudyConfig.from_toml(study_file), out, jobs=JobSettings(jobs=2))
    assert not (out / "jobs").exists()


@pytest.mark.slow
def test_steps_extends_each_group_as_one_ensemble(tmp_path, study_file):
    """--steps 30 extends the study's group (tied and untie) as `train` of the group with resume
    does, bit for bit; each run equals, to float tolerance, the run extended on its own."""
    study_file.write_text(GROUP_STUDY)
    out = tmp_path / "out"
    study_results(StudyConfig.from_toml(study_file), out)
    alone, group = tmp_path / "alone", []
    for name in ("tied", "untie"):
        shutil.copytree(out / "runs" / name, alone / name)
        shutil.copytree(out / "runs" / name, tmp_path / "group" / name)
        config = TrainConfig.from_toml(alone / name / "config.toml").replace(steps=30)
        train_run(config, None, alone / name, resume=True)
        group.append((config, tmp_path / "group" / name))
    train_group(group, None, resume=True)
    report = study_results(StudyConfig.from_toml(study_file), out, steps=30).report.read_text()
    for name in ("tied", "untie"):
        run = out / "runs" / name
        assert TrainConfig.from_toml(run / "config.toml").optim.steps == 30
        for part in ("embeddings/step_0000030.safetensors", "metrics.jsonl"):
            assert (run / part).read_bytes() == (tmp_path / "group" / name / part).read_bytes()
        snapshot = "embeddings/step_0000030.safetensors"
        for key in ("input", "output"):
            torch.testing.assert_close(getattr(read_snapshot(run / snapshot), key),
                                       getattr(read_snapshot(alone / name / snapshot), key),
                                       rtol=1e-4, atol=1e-5)
        expected = [json.loads(line) for line in (alone / name / "metrics.jsonl").open()]
        for x, y in zip(expected, [json.loads(line) for line in (run / "metrics.jsonl").open()],
                        strict=True):
            assert (y["step"], y["seed"], y["split"]) == (x["step"], x["seed"], x["split"])
            assert y["loss"] == pytest.approx(x["loss"], rel=1e-5, abs=1e-6)
    assert "`tied` (`tied`, 30 steps" in report and "`untie` (`untie@10`, 30 steps" in report
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("*.safetensors")}
    study_results(StudyConfig.from_toml(study_file), out)  # the study file's 20 steps: nothing to train
    study_results(StudyConfig.from_toml(study_file), out, steps=30)  # reached already
    assert stamps == {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("*.safetensors")}
    with pytest.raises(DhwtError, match="run 'tied' is configured for 30 steps"):
        study_results(StudyConfig.from_toml(study_file), out, steps=25)


@pytest.mark.slow
@pytest.mark.parametrize("steps", [None, 30])
def test_a_group_stopped_while_extended_is_continued_as_one_ensemble(tmp_path, study_file,
                                                                      steps):
    """A study's group stopped during --steps 30, in training (the tied run wrote its checkpoint
    of step 30, the untie run not yet) or (steps 30) while the extension rewrote the config.toml
    (the tied run's says 30 steps, its report removed; the untie run's is of 20 steps,
    finished): the study command continues the group as one ensemble, bit for bit."""
    study_file.write_text(GROUP_STUDY)
    out = tmp_path / "out"
    study_results(StudyConfig.from_toml(study_file), out)
    shutil.copytree(out, tmp_path / "before")
    study_results(StudyConfig.from_toml(study_file), out, steps=30)
    parts = [f"{name}/{part}" for name in ("tied", "untie")
             for part in ("embeddings/step_0000030.safetensors", "metrics.jsonl", "config.toml")]
    reference = {part: (out / "runs" / part).read_bytes() for part in parts}
    runs = out / "runs"
    if steps is None:  # killed in training: no session ended, no report written
        for name in ("tied", "untie"):
            _session_not_ended(runs / name)
            (runs / name / "report.md").unlink()
        (runs / "untie" / "checkpoints" / "step_0000030.pt").unlink()
        (runs / "untie" / "embeddings" / "step_0000030.safetensors").unlink()
    else:
        shutil.rmtree(out)
        (tmp_path / "before").rename(out)
        config = TrainConfig.from_toml(runs / "tied" / "config.toml").replace(steps=30)
        (runs / "tied" / "config.toml").write_text(config.to_toml())
        (runs / "tied" / "report.md").unlink()
    study_results(StudyConfig.from_toml(study_file), out, steps=steps)
    assert {part: (runs / part).read_bytes() for part in parts} == reference


@pytest.mark.slow
def test_steps_extends_alone_the_runs_of_a_group_that_stand_at_different_steps(tmp_path,
                                                                               study_file):
    """A run of the study's group extended on its own (dhwt train --resume --steps 30) stands
    at other steps than the rest of its group: --steps 40 extends each run alone, as
    `dhwt train --resume --steps 40` of each does."""
    out = tmp_path / "out"
    study_results(StudyConfig.from_toml(study_file), out)
    tied = out / "runs" / "tied"
    train_run(TrainConfig.from_toml(tied / "config.toml").replace(steps=30), None, tied, resume=True)
    alone = tmp_path / "alone"
    for name in ("tied", "untie"):
        shutil.copytree(out / "runs" / name, alone / name)
        config = TrainConfig.from_toml(alone / name / "config.toml").replace(steps=40)
        train_run(config, None, alone / name, resume=True)
    study_results(StudyConfig.from_toml(study_file), out, steps=40)
    for name in ("tied", "untie"):
        for part in ("embeddings/step_0000040.safetensors", "metrics.jsonl", "config.toml"):
            assert (out / "runs" / name / part).read_bytes() == (alone / name / part).read_bytes()


def test_a_study_killed_while_extending_continues_to_the_extended_steps(tmp_path, study_file):
    """Killed during --steps 30 (a run's config.toml says 30, its report is still of step 20):
    the study command, with --steps or without, finishes the extension."""
    out = tmp_path / "out"
    study_results(StudyConfig.from_toml(study_file), out, steps=30)
    reference = (out / "runs" / "untie" / "embeddings" / "step_0000030.safetensors").read_bytes()
    run = out / "runs" / "untie"
    (run / "checkpoints" / "step_0000030.pt").unlink()
    (run / "embeddings" / "step_0000030.safetensors").unlink()
    study_results(StudyConfig.from_toml(study_file), out)
    assert (run / "embeddings" / "step_0000030.safetensors").read_bytes() == reference
