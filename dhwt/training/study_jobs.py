"""A study's groups as jobs of submitit, the job library ML research uses for SLURM:
`dhwt study FILE --jobs N` (its local executor: processes on this machine) or `--executor slurm`
(one SLURM job per group, submitted with sbatch). Both go through one code path, submitit's
Executor, so what the tests run with the local executor is what a cluster runs.

    local   at most N jobs at once (--jobs N; default: one per core), each a process that
            submitit starts, with C // N torch threads (at least 1) on the C cores this process
            may use, and the GPUs it sees (its CUDA_VISIBLE_DEVICES, where submitit would set
            none for a job that asks for no GPU). A run's training uses the threads of its
            config (`threads`, default 1: they change how floats are rounded, so a run trains
            the same in a job or not).
    slurm   each job asks for one task on one node, with the settings given: partition, time
            limit (minutes), CPUs per task (the job's torch threads) and GPUs per node; at most
            N jobs queued or running at once (--jobs N; default: every group that is ready).

A job waits for the jobs of the runs its runs start from (init_from); the others start as soon
as a slot is free. The jobs' files (submitit's pickles, each job's log JOB_0_log.out and
JOB_0_log.err, and the local executor's controllers.log) go to the study's jobs/ folder, where
the study lies: on a cluster, a file system the nodes share (with file locks: each job locks
its runs, dhwt.directories). A job that fails stops the study: no other job starts, those
running finish, and the first failure is one error line naming its runs; the same command then
resumes what is left. Ctrl-C cancels the jobs (they resume from their last checkpoint).

A job about to be preempted or to reach its time limit gets SLURM's signal (USR2: submitit asks
for it 90 s before the limit) and submitit calls its `checkpoint` (`_Attempt`): its training
stops where it is, its runs' locks go with its process, and submitit requeues it with the same
work, which resumes from the runs' newest checkpoint (dhwt.training.study.train_study_group), so the study goes on
without a new command, the steps since that checkpoint trained again. Checkpoints are written
atomically: one the signal cut short is not there, and the one before it is the newest. A job
is requeued at most --slurm-requeues times (default JOB_REQUEUES, submitit's max_num_timeout,
which counts time limits only; here preemptions count too); once more fails the study with one
line, and the same command resumes it.

submitit is an optional extra (pip install 'dhwt[cluster]'), imported only here, when a study
asks for jobs.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from dhwt.defaults import EXECUTORS, JOB_REQUEUES
from dhwt.errors import DhwtError, Interrupted, brief
from dhwt.filenames import CONTROLLERS_LOG

#: The local executor's time limit per job: none to speak of (submitit's default is 2 minutes).
LOCAL_TIMEOUT_MIN = 60 * 24 * 365
#: Seconds between two looks at the running jobs (a SLURM job's state comes from sacct, which
#: submitit asks at most once a minute).
POLL_S = {"local": 0.2, "slurm": 10.0}


@dataclass(frozen=True)
class JobSettings:
    """Where a study's groups run: `executor` "local" or "slurm", at most `jobs` at once (None:
    see the module docstring), and a SLURM job's `partition`, `time` (minutes), `cpus` (per
    task) and `gpus` (per node), each None for the cluster's default, and how many times a job
    is requeued at most (`requeues`; None: JOB_REQUEUES)."""

    executor: str = "local"
    jobs: int | None = None
    partition: str | None = None
    time: int | None = None
    cpus: int | None = None
    gpus: int | None = None
    requeues: int | None = None

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise DhwtError(f"executor must be one of {list(EXECUTORS)}, got {self.executor!r}")
        given = [f"--slurm-{name}" for name in ("partition", "time", "cpus", "gpus", "requeues")
                 if getattr(self, name) is not None]
        if given and self.executor != "slurm":
            raise DhwtError(f"{given[0]} is a setting of SLURM jobs; give it with --executor "
                            "slurm")

    def threads(self) -> int | None:
        """Each local job's torch threads: the cores this process may use, shared by the jobs
        (at least 1); None on SLURM, where a job takes the CPUs it is given."""
        if self.executor != "local":
            return None
        return max(1, _cores() // (self.jobs or _cores()))

    def limit(self, waiting: int) -> int:
        """How many jobs may run at once when `waiting` wait to start."""
        if self.jobs is not None:
            return self.jobs
        return _cores() if self.executor == "local" else max(waiting, 1)

    def most_requeues(self) -> int:
        """How many times a job is requeued at most (preempted, or out of time)."""
        return JOB_REQUEUES if self.requeues is None else self.requeues


def job_parameters(settings: JobSettings, name: str) -> dict[str, Any]:
    """The parameters of submitit's AutoExecutor.update_parameters for `settings`' jobs, named
    `name`.

    Examples:
        >>> job_parameters(JobSettings("slurm", partition="gpu", time=90, gpus=1), "dhwt-exor")
        {'name': 'dhwt-exor', 'nodes': 1, 'tasks_per_node': 1, 'slurm_partition': 'gpu', \
'timeout_min': 90, 'gpus_per_node': 1}
        >>> job_parameters(JobSettings("local", jobs=2), "dhwt-exor")["timeout_min"] \
== LOCAL_TIMEOUT_MIN
        True
    """
    if settings.executor == "local":
        return {"name": name, "timeout_min": LOCAL_TIMEOUT_MIN,
                "local_setup": [_same_gpus()]}
    given = {"slurm_partition": settings.partition, "timeout_min": settings.time,
             "cpus_per_task": settings.cpus, "gpus_per_node": settings.gpus}
    return {"name": name, "nodes": 1, "tasks_per_node": 1,
            **{key: value for key, value in given.items() if value is not None}}


def _same_gpus() -> str:
    """The shell line that gives a local job the GPUs this process sees: submitit's local
    executor sets CUDA_VISIBLE_DEVICES to the GPUs a job asks for (none by default), and its
    `local_setup` lines run after that, in the job's shell."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return "unset CUDA_VISIBLE_DEVICES"
    return f"export CUDA_VISIBLE_DEVICES={shlex.quote(visible)}"


def check_jobs(settings: JobSettings) -> Any:
    """The submitit module, once `settings`' jobs can run here; DhwtError if submitit is not
    installed, or SLURM is asked for where it is not. A study checks this before it writes
    anything."""
    try:
        import submitit
    except ImportError:
        raise DhwtError("a study's jobs (--jobs, --executor) run through submitit: pip install "
                        "'dhwt[cluster]'") from None
    if settings.executor == "slurm" and submitit.SlurmExecutor.affinity() <= 0:
        raise DhwtError("--executor slurm submits with SLURM, which this machine does not have "
                        "(no srun found); run the study on a machine of the cluster")
    return submitit


def make_executor(settings: JobSettings, folder: Path, name: str) -> Any:
    """submitit's executor for `settings`, its files in `folder` (check_jobs first)."""
    executor = check_jobs(settings).AutoExecutor(
        folder=folder, cluster=settings.executor,
        **{f"{settings.executor}_max_num_timeout": settings.most_requeues()})
    executor.update_parameters(**job_parameters(settings, name))
    return executor


@dataclass(frozen=True)
class Job:
    """What one job trains: `work` (called in the job), the `names` of its runs, and the names
    of the runs that must have finished before it starts (`after`)."""

    work: Callable[[], None]
    names: tuple[str, ...]
    after: frozenset[str] = field(default_factory=frozenset)


def run_jobs(jobs: Sequence[Job], settings: JobSettings, folder: Path, name: str) -> None:
    """Run `jobs` through submitit's executor for `settings` (files in `folder`, jobs named
    `name`), each once its `after` runs have finished; return when all have finished, or raise
    one DhwtError naming the runs of the first that failed, once no job is running."""
    executor = make_executor(settings, folder, name)
    local = settings.executor == "local"
    waiting, running = list(jobs), {}
    finished: set[str] = set()
    failures: list[str] = []
    poll = POLL_S[settings.executor]
    try:
        while waiting or running:
            ready = [job for job in waiting if job.after <= finished] if not failures else []
            for job in ready[:max(0, settings.limit(len(waiting)) - len(running))]:
                with _stderr_into(folder / CONTROLLERS_LOG) if local else nullcontext():
                    attempt = _Attempt(job.work, settings.threads(), settings.most_requeues())
                    running[executor.submit(attempt)] = job
                waiting.remove(job)
            if not running:
                break  # what still waits starts from a run that failed
            time.sleep(poll)
            for handle in [h for h in running if h.done()]:
                job = running.pop(handle)
                problem = _failure(handle)
                if problem is None:
                    finished.update(job.names)
                else:
                    failures.append(f"job {handle.job_id} of {_runs(job.names)} {problem}")
    except BaseException:
        _cancel(running, wait=local)
        raise
    if failures:
        more = f" ({len(failures) - 1} more failed; logs in {folder})" if failures[1:] else ""
        raise DhwtError(failures[0] + more)
    assert not waiting, "a job waits for a run that no job trains"


@dataclass(frozen=True)
class _Attempt:
    """What a job runs: `work` with `threads` torch threads (None: the CPUs the job is given).
    submitit's Checkpointable protocol: when the job is preempted or out of time, submitit calls
    `checkpoint` and requeues the job with the submission it returns, the same work, which
    resumes its runs (the module docstring); at most `requeues` times, of which `requeued` are
    done."""

    work: Callable[[], None]
    threads: int | None
    requeues: int
    requeued: int = 0

    def __call__(self) -> str | None:
        """How the job failed (after "job N of run 'a' "), else None."""
        from submitit import JobEnvironment
        from submitit.core.utils import UncompletedJobError

        torch.set_num_threads(self.threads or _cores())
        try:
            self.work()
        except (DhwtError, Interrupted) as exc:
            return f"failed: {exc}"
        except UncompletedJobError:  # preempted or out of time once more than `requeues` allows
            return (f"ended without finishing (preempted, or out of time) after {self.requeued} "
                    f"requeues, the most --slurm-requeues allows (log: "
                    f"{JobEnvironment().paths.stderr}); the same command resumes it")
        return None

    def checkpoint(self) -> Any:
        """The submission that requeues this job (its work resumes from its runs' newest
        checkpoint), or None once it has been requeued `requeues` times."""
        from submitit.helpers import DelayedSubmission

        if self.requeued == self.requeues:
            return None
        return DelayedSubmission(replace(self, requeued=self.requeued + 1))


def _failure(handle: Any) -> str | None:
    """How the finished job `handle` failed (what its _Attempt says: a DhwtError, or requeued
    too often; the last line of its traceback; or its end without a result: killed, or out of
    time), else None."""
    from submitit.core.utils import FailedJobError, UncompletedJobError

    log = f"log: {handle.paths.stderr}"
    try:
        message = handle.result()
    except FailedJobError as exc:  # its traceback, then where its logs are
        trace = str(exc).split("\n----------------------\n")
        lines = trace[1].strip().splitlines() if len(trace) > 1 else [str(exc)]
        return f"failed: {lines[-1].strip()} ({log})"
    except UncompletedJobError:
        return (f"ended without finishing (killed, or out of time; {log}); the same command "
                "resumes it")
    return message


def _cancel(running: dict[Any, Job], wait: bool) -> None:
    """Cancel the jobs in `running` (they resume from their last checkpoint) and, if `wait`
    (local jobs), wait up to 30 s for them to end, so that their runs are free again."""
    for handle in running:
        handle.cancel(check=False)
    deadline = time.monotonic() + 30
    while wait and time.monotonic() < deadline and not all(h.done() for h in running):
        time.sleep(0.1)


@contextmanager
def _stderr_into(path: Path) -> Iterator[None]:
    """This process's stderr (file descriptor 2) into `path` meanwhile: the controller process
    that submitit's local executor starts for a job inherits it, and prints a KeyboardInterrupt
    traceback there when the job is cancelled (Ctrl-C), which must not reach the terminal
    beside the study's one error line."""
    sys.stderr.flush()
    saved = os.dup(2)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        os.dup2(log, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log)


def _runs(names: Sequence[str]) -> str:
    """'run 'a'' or 'runs 'a', 'b''."""
    return f"run {names[0]!r}" if len(names) == 1 else f"runs {brief(names)}"


def _cores() -> int:
    """The CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this system (macOS)
        return os.cpu_count() or 1
