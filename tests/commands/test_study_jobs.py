"""`dhwt study` on a job engine, what needs no job process: the SLURM jobs it would submit
(submitit's sbatch script, built without a cluster), the settings it refuses, a run another
process trains, and `--steps M` (in this process: an extension of every run, equal to `dhwt
train --resume --steps M` of each). The jobs themselves: tests/reliability/test_study_jobs.py."""

from __future__ import annotations

import shutil
import sys

import pytest

from dhwt.commands import train
from dhwt.commands.study import Group, load_study, run_study, train_group
from dhwt.commands.study_jobs import JobSettings, job_parameters, make_executor
from dhwt.config import TrainConfig
from dhwt.directories import lock
from dhwt.errors import DhwtError
from tests.test_study import STUDY


def one_error(code, out, err):
    return code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1


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
    monkeypatch.setattr("dhwt.commands.study_jobs._cores", lambda: 8)
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


def _kill_after_step_10(run):
    """What a kill after a run's checkpoint of step 10 leaves: no report, nothing of step 20."""
    (run / "report.md").unlink()
    (run / "checkpoints" / "step_0000020.pt").unlink()
    (run / "embeddings" / "step_0000020.safetensors").unlink()


def test_a_requeued_job_resumes_its_group_or_starts_it_again(tmp_path, study_file):
    """What a job requeued after preemption or its time limit runs: train_group again, on the
    group it was submitted with (a fresh one here). The group resumes from its newest
    checkpoint, or, stopped before each of its runs had one, starts again; its runs equal the
    study's."""
    out = tmp_path / "out"
    run_study(load_study(study_file), out)
    runs = [out / "runs" / name for name in ("tied", "untie")]
    last = {run: (run / "embeddings" / "step_0000020.safetensors").read_bytes() for run in runs}
    group = Group(tuple((TrainConfig.from_toml(run / "config.toml"), run) for run in runs),
                  False, out / "data")
    for run in runs:
        _kill_after_step_10(run)
    kept = (runs[0] / "embeddings" / "step_0000010.safetensors").stat().st_ino
    train_group(group)
    assert (runs[0] / "embeddings" / "step_0000010.safetensors").stat().st_ino == kept  # resumed
    for run in runs:
        assert (run / "embeddings" / "step_0000020.safetensors").read_bytes() == last[run]
        (run / "report.md").unlink()
    shutil.rmtree(runs[1] / "checkpoints")  # stopped before every run had its first: anew
    train_group(group)
    for run in runs:
        assert (run / "embeddings" / "step_0000020.safetensors").read_bytes() == last[run]
        assert (run / "checkpoints" / "step_0000020.pt").is_file()


def test_a_run_another_process_trains_is_refused_before_any_job(tmp_path, study_file):
    """A job of an earlier `dhwt study` still training a run (its study command gone): the
    study refuses at once, naming the run, and starts no job."""
    out = tmp_path / "out"
    run_study(load_study(study_file), out)
    _kill_after_step_10(out / "runs" / "untie")
    with lock(out / "runs" / "untie"):  # as a job's process holds it
        with pytest.raises(DhwtError, match=r"run 'untie' of .* is being trained by process "
                                            r"\d+ \(a job of an earlier `dhwt study`\?\); run "
                                            "the same command again when it has ended"):
            run_study(load_study(study_file), out, jobs=JobSettings(jobs=2))
    assert not (out / "jobs").exists()


@pytest.mark.slow
def test_steps_extends_every_run_as_train_resume_steps_does(tmp_path, study_file):
    out = tmp_path / "out"
    run_study(load_study(study_file), out)
    alone = tmp_path / "alone"  # each run extended on its own by dhwt train --resume --steps
    for name in ("tied", "untie"):
        shutil.copytree(out / "runs" / name, alone / name)
        config = TrainConfig.from_toml(alone / name / "config.toml").replace(steps=30)
        train(config, None, alone / name, resume=True)
    report = run_study(load_study(study_file), out, steps=30).read_text()
    for name in ("tied", "untie"):
        run = out / "runs" / name
        assert TrainConfig.from_toml(run / "config.toml").optim.steps == 30
        assert (run / "embeddings" / "step_0000030.safetensors").read_bytes() == \
            (alone / name / "embeddings" / "step_0000030.safetensors").read_bytes()
        assert (run / "metrics.jsonl").read_bytes() == (alone / name / "metrics.jsonl").read_bytes()
    assert "`tied` (`tied`, 30 steps" in report and "`untie` (`untie@10`, 30 steps" in report
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("*.safetensors")}
    run_study(load_study(study_file), out)  # the study file's 20 steps: nothing to train
    run_study(load_study(study_file), out, steps=30)  # reached already
    assert stamps == {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("*.safetensors")}
    with pytest.raises(DhwtError, match="run 'tied' is configured for 30 steps"):
        run_study(load_study(study_file), out, steps=25)


def test_a_study_killed_while_extending_continues_to_the_extended_steps(tmp_path, study_file):
    """Killed during --steps 30 (a run's config.toml says 30, its report is still of step 20):
    the study command, with --steps or without, finishes the extension."""
    out = tmp_path / "out"
    run_study(load_study(study_file), out, steps=30)
    reference = (out / "runs" / "untie" / "embeddings" / "step_0000030.safetensors").read_bytes()
    run = out / "runs" / "untie"
    (run / "checkpoints" / "step_0000030.pt").unlink()
    (run / "embeddings" / "step_0000030.safetensors").unlink()
    run_study(load_study(study_file), out)
    assert (run / "embeddings" / "step_0000030.safetensors").read_bytes() == reference
