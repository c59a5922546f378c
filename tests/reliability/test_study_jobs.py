"""`dhwt study --jobs N`: the groups trained as processes of submitit's local executor (the code
path a SLURM cluster runs) write the run directories the study writes in one process, in the
order init_from asks; a job killed mid-run fails the study with one line, and the same command
resumes it bit for bit; a job preempted or out of time (SLURM's signal, USR2) is requeued and
resumes in the same command, at most --slurm-requeues times; a second `dhwt study` on the study
while its jobs run is refused.

Every study here is written at one path (tmp/out) and compared after the other is moved aside,
since a run's config.toml records where its data and init_from run lie."""

from __future__ import annotations

import os
import re
import signal
import time
from functools import partial

import pytest

from dhwt.commands.study import study_results
from dhwt.config.study import StudyConfig
from dhwt.training.study_jobs import Job, JobSettings, run_jobs
from dhwt.directories import foreign, holder
from dhwt.errors import DhwtError
from dhwt.runs.checkpoints import list_checkpoints
from dhwt.runs.run import is_finished
from tests.test_study import STUDY as GROUP_STUDY

# three groups: a and b differ in lr (two ensembles), c starts from a's last step
pytestmark = pytest.mark.long  # minutes each: `make test-long` runs them

STUDY = """
[study]
name = "jobs"

[data]
grammar = "parity"
set = { n_bits = 3 }
valid_fraction = 0.25

[train]
seeds = "1-2"
steps = 20
eval_every = 10
snapshot_every = 10
checkpoint_every = 10

[[runs]]
name = "a"
lr = 1e-2

[[runs]]
name = "b"
lr = 2e-2

[[runs]]
name = "c"
lr = 1e-2
init_from = "a"
"""
RUNS = ("a", "b", "c")


def _study(tmp_path, text=STUDY):
    path = tmp_path / "study.toml"
    path.write_text(text)
    return StudyConfig.from_toml(path)


def _assert_same_runs(rundirs, expected, actual):
    for name in RUNS:
        rundirs.assert_identical_runs(expected / "runs" / name, actual / "runs" / name)


@pytest.mark.slow
def test_two_jobs_write_the_run_directories_one_job_writes(tmp_path, rundirs):
    """And --steps with jobs extends every run as the study in one process does."""
    out = tmp_path / "out"
    study_results(_study(tmp_path), out, jobs=JobSettings(jobs=1))
    out.rename(tmp_path / "one")
    study_results(_study(tmp_path), out, jobs=JobSettings(jobs=2))
    _assert_same_runs(rundirs, tmp_path / "one", out)
    assert len(list((out / "jobs").glob("*_0_result.pkl"))) == 3  # one job per group
    assert foreign(out, "study") == []  # jobs/ is dhwt's: --overwrite replaces the study
    study_results(_study(tmp_path), out, steps=30, jobs=JobSettings(jobs=2))
    assert len(list((out / "jobs").glob("*_0_result.pkl"))) == 6  # one job per group again
    out.rename(tmp_path / "jobs")
    (tmp_path / "one").rename(out)
    study_results(_study(tmp_path), out, steps=30)
    _assert_same_runs(rundirs, out, tmp_path / "jobs")
    assert (out / "runs" / "c" / "embeddings" / "step_0000030.safetensors").is_file()


@pytest.mark.slow
def test_steps_with_jobs_extends_a_group_in_one_job(tmp_path, rundirs):
    """A study of one group (tests/test_study.py: tied and untie) extended by --steps with jobs:
    one job extends both runs, as the study in one process does."""
    out = tmp_path / "out"
    study_results(_study(tmp_path, GROUP_STUDY), out)
    study_results(_study(tmp_path, GROUP_STUDY), out, steps=30, jobs=JobSettings(jobs=2))
    assert len(list((out / "jobs").glob("*_0_result.pkl"))) == 1
    out.rename(tmp_path / "jobs")
    study_results(_study(tmp_path, GROUP_STUDY), out)
    study_results(_study(tmp_path, GROUP_STUDY), out, steps=30)
    for name in ("tied", "untie"):
        rundirs.assert_identical_runs(out / "runs" / name, tmp_path / "jobs" / "runs" / name)


def _wait_for(condition, proc, what, timeout=180.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the study ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_killed_job_fails_the_study_in_one_line_and_the_same_command_resumes_it(
        tmp_path, spawn, cli, rundirs):
    text = STUDY.replace("steps = 20", "steps = 400").replace("eval_every = 10",
                                                              "eval_every = 100")
    out = tmp_path / "out"
    study_results(_study(tmp_path, text), out)  # the reference, in one process, uninterrupted
    out.rename(tmp_path / "reference")
    study_file = tmp_path / "study.toml"
    proc = spawn(["study", study_file, "--out", out, "--jobs", "2"])
    run = out / "runs" / "a"
    _wait_for(lambda: holder(run) is not None and len(
        list_checkpoints(run / "checkpoints")) >= 2, proc, "a checkpoint of run a")
    code, stdout, err = cli(["study", study_file, "--out", out, "--jobs", "2"])
    assert code == 2 and stdout == "" and err.count("\n") == 1
    assert re.fullmatch(r"error: study directory .*out is being written by process \d+\n", err)
    pid = int(holder(run).split()[-1])  # the job's process, which holds its run's lock
    os.kill(pid, signal.SIGKILL)
    stdout, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and stdout == "" and err.count("\n") == 1, err
    assert re.fullmatch(r"error: job \d+ of run 'a' ended without finishing \(killed, or out of "
                        r"time; log: .*_0_log\.err\); the same command resumes it\n", err), err
    assert not (out / "runs" / "c").exists()  # it waits for a
    assert is_finished(out / "runs" / "b")  # the job running beside it finished
    code, stdout, err = cli(["study", study_file, "--out", out, "--jobs", "2"])
    assert code == 0 and stdout.startswith("study report: "), err
    _assert_same_runs(rundirs, tmp_path / "reference", out)


@pytest.mark.slow
def test_a_preempted_job_is_requeued_and_resumes_in_the_same_command(tmp_path, spawn, rundirs):
    """SLURM's signal before preemption or the time limit (USR2, to the job's process; submitit
    handles it as on a cluster): the job is requeued, resumes its runs from their newest
    checkpoint, and the study finishes as an uninterrupted one, bit for bit."""
    text = STUDY.replace("steps = 20", "steps = 400").replace("eval_every = 10",
                                                              "eval_every = 100")
    out = tmp_path / "out"
    study_results(_study(tmp_path, text), out)  # the reference, in one process, uninterrupted
    out.rename(tmp_path / "reference")
    proc = spawn(["study", tmp_path / "study.toml", "--out", out, "--jobs", "2"])
    run = out / "runs" / "a"
    _wait_for(lambda: holder(run) is not None and len(
        list_checkpoints(run / "checkpoints")) >= 2, proc, "a checkpoint of run a")
    pid = int(holder(run).split()[-1])  # the job's process, which holds its run's lock
    kept = (run / "embeddings" / "step_0000010.safetensors").stat().st_ino
    os.kill(pid, signal.SIGUSR2)
    stdout, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and stdout.startswith("study report: "), err
    _assert_same_runs(rundirs, tmp_path / "reference", out)
    assert (run / "embeddings" / "step_0000010.safetensors").stat().st_ino == kept  # resumed
    logs = "".join(p.read_text() for p in (out / "jobs").glob("*_0_log.out"))
    assert logs.count("Requeued job") == 1


def _signal_itself(record):
    """A job's work that notes its process and gets SLURM's signal before preemption."""
    with record.open("a") as file:
        file.write(f"{os.getpid()}\n")
    os.kill(os.getpid(), signal.SIGUSR2)
    time.sleep(60)


@pytest.mark.slow
def test_a_job_preempted_once_more_than_slurm_requeues_allows_fails_in_one_line(
        tmp_path, monkeypatch):
    monkeypatch.setattr("dhwt.training.study_jobs.JOB_REQUEUES", 1)  # local jobs: the default
    record = tmp_path / "pids.txt"
    with pytest.raises(DhwtError) as info:
        run_jobs([Job(partial(_signal_itself, record), ("a",))], JobSettings(jobs=1),
                 tmp_path / "jobs", "test")
    assert re.fullmatch(r"job \d+ of run 'a' ended without finishing \(preempted, or out of "
                        r"time\) after 1 requeues, the most --slurm-requeues allows \(log: "
                        r".*jobs/\d+_0_log\.err\); the same command resumes it", str(info.value))
    assert len(set(record.read_text().split())) == 2  # the job, then once requeued


@pytest.mark.slow
def test_a_failed_job_is_one_line_naming_its_runs_and_no_job_starts_after_it(tmp_path):
    """A DhwtError in a job is its message; any other exception the last line of its traceback
    and its log. Nothing starts once a job has failed (what waits for it, nor anything else)."""
    missing = tmp_path / "missing.toml"
    jobs = [Job(partial(StudyConfig.from_toml, missing), ("a", "b")), Job(partial(int, "x"), ("c",)),
            Job(partial(print), ("d",), after=frozenset({"a"}))]
    with pytest.raises(DhwtError) as info:
        run_jobs(jobs, JobSettings(jobs=1), tmp_path / "one", "test")
    assert re.fullmatch(rf"job \d+ of runs 'a', 'b' failed: study file {missing} does not exist",
                        str(info.value))
    assert len(list((tmp_path / "one").glob("*_submitted.pkl"))) == 1
    with pytest.raises(DhwtError) as info:
        run_jobs(jobs[1:2], JobSettings(jobs=1), tmp_path / "two", "test")
    assert re.fullmatch(r"job \d+ of run 'c' failed: ValueError: invalid literal for int\(\) "
                        r"with base 10: 'x' \(log: .*two/\d+_0_log\.err\)", str(info.value))


@pytest.mark.slow
@pytest.mark.parametrize("visible", [None, "3,5"])
def test_a_local_job_sees_the_gpus_the_study_sees(visible, tmp_path, monkeypatch):
    """submitit's local executor sets CUDA_VISIBLE_DEVICES to the GPUs a job asks for (none by
    default), which hid the GPU from every job of `--jobs N` on a GPU machine (found on an H100);
    a job sees what the study command sees, set or not."""
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    seen = tmp_path / "seen.txt"
    work = lambda: seen.write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "unset"))  # noqa: E731
    run_jobs([Job(work, ("a",))], JobSettings(jobs=1), tmp_path / "jobs", "test")
    assert seen.read_text() == (visible or "unset")


@pytest.mark.slow
@pytest.mark.parametrize("to", ["command", "terminal"])
def test_ctrl_c_stops_the_jobs_and_the_same_command_continues(to, tmp_path, spawn, cli):
    """SIGINT to the study command alone (it cancels its jobs), or to its process group, as a
    terminal's Ctrl-C (its jobs' processes get it too): it waits for its jobs to end and says
    how to go on in one line; their runs are free again.

    Runs a and b alone, 4,000 steps each: they train side by side for about 20 s here (at 400
    steps, about 2 s: CI once saw the study end before both were running)."""
    pair = STUDY.split('\n[[runs]]\nname = "c"')[0]
    study_file = tmp_path / "study.toml"
    study_file.write_text(pair.replace("steps = 20", "steps = 4000").replace("every = 10",
                                                                            "every = 200"))
    out = tmp_path / "out"
    proc = spawn(["study", study_file, "--out", out, "--jobs", "2"], start_new_session=True)
    _wait_for(lambda: all(holder(out / "runs" / name) is not None for name in ("a", "b")),
              proc, "the jobs of runs a and b")
    if to == "command":
        proc.send_signal(signal.SIGINT)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and stdout == "", err
    assert err == (f"error: interrupted; the same `dhwt study` command continues {out} (finished "
                   "runs are kept, interrupted ones resume from their last checkpoint)\n")
    assert all(holder(out / "runs" / name) is None for name in ("a", "b"))
    code, stdout, err = cli(["study", study_file, "--out", out, "--jobs", "2"])
    assert code == 0 and stdout.startswith("study report: "), err
