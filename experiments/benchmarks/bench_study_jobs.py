"""A study's groups as parallel jobs: wall time of `dhwt study --jobs 1` over `--jobs 2` on a
study of 4 equal groups, measured side by side in one run (target: >= 1.8x on 2 cores).

The study: the paper's EXor model (transformer d 4) on 4-bit parity, 4 runs of --seeds seeds
each that differ only in their seeds, with `group = false`, so that each run is one job of the
same size. Both sides go through submitit's local executor (a process per job, started the same
way), so the ratio is what the second core buys, not a difference of code paths; each side
builds its own dataset and writes its own report. The run directories of the two sides are
checked to be equal (what tests/reliability/test_study_jobs.py checks on a smaller study).

Prints the CPU (lscpu's model name, and its cores and threads per core: two logical CPUs that
are one core's hyperthreads cannot give 2x) and each side's seconds.

    .venv/bin/python experiments/benchmarks/bench_study_jobs.py [--steps 8000] [--seeds 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from dhwt import load_run
from dhwt.commands.study import study_results
from dhwt.config.study import StudyConfig
from dhwt.training.study_jobs import JobSettings

TARGET = 1.8
STUDY = """
[study]
name = "bench-jobs"
group = false

[data]
grammar = "parity"
set = {{ n_bits = 4 }}

[train]
steps = {steps}
eval_every = {every}
snapshot_every = {every}
checkpoint_every = {every}
{runs}"""


def cpu() -> str:
    """lscpu's model name, CPUs, cores per socket and threads per core."""
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown CPU (no lscpu)"
    fields = dict(line.split(":", 1) for line in lines.splitlines() if ":" in line)
    get = lambda key: fields.get(key, "?").strip()  # noqa: E731
    return (f"{get('Model name')}; {get('CPU(s)')} CPUs, {get('Core(s) per socket')} cores per "
            f"socket, {get('Thread(s) per core')} threads per core")


def study_text(steps: int, seeds: int) -> str:
    runs = "".join(f'\n[[runs]]\nname = "r{i}"\nseeds = "{1 + i * seeds}-{(i + 1) * seeds}"\n'
                   for i in range(4))
    return STUDY.format(steps=steps, every=max(1, steps // 4), runs=runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8000, help="steps of every run")
    parser.add_argument("--seeds", type=int, default=5, help="seeds of every run")
    args = parser.parse_args()
    print(f"CPU: {cpu()}; this process may use {len(os.sched_getaffinity(0))} of them")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "study.toml"
        path.write_text(study_text(args.steps, args.seeds))
        seconds = {}
        for jobs in (1, 2):
            out = Path(tmp) / f"jobs{jobs}"
            start = time.perf_counter()
            study_results(StudyConfig.from_toml(path), out, jobs=JobSettings(jobs=jobs))
            seconds[jobs] = time.perf_counter() - start
            print(f"--jobs {jobs}: {seconds[jobs]:.1f} s (4 runs of {args.seeds} seeds, "
                  f"{args.steps} steps)")
        same = all(load_run(Path(tmp) / "jobs1" / "runs" / f"r{i}").snapshot_files[args.steps]
                   .read_bytes() == load_run(Path(tmp) / "jobs2" / "runs" / f"r{i}")
                   .snapshot_files[args.steps].read_bytes() for i in range(4))
        ratio = seconds[1] / seconds[2]
        print(f"--jobs 2 is {ratio:.2f}x --jobs 1 (target >= {TARGET} on 2 cores: "
              f"{'met' if ratio >= TARGET else 'not met'}); last embeddings equal: {same}")


if __name__ == "__main__":
    main()
