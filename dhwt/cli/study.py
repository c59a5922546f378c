"""`dhwt study`: its options and help; what it does is dhwt.commands.study."""

from __future__ import annotations

from functools import partial

import click

from dhwt import defaults
from dhwt.cli.group import cli
from dhwt.cli.options import json_option


@cli.command("study", context_settings={"max_content_width": 100})
@click.argument("study_file", metavar="STUDY.toml", type=click.Path(dir_okay=False))
@click.option("--out", required=True, metavar="DIR", type=click.Path(file_okay=False),
              help="Study directory: study.toml, data/ (grammar studies), runs/NAME/, "
                   "analysis/NAME/ (text studies), figures/, report.md and report.html "
                   "(the same report as one self-contained page).")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing study directory instead of continuing it (only a study "
                   "dhwt made that holds none of the study's inputs and nothing dhwt did not "
                   "write).")
@click.option("--steps", type=int, metavar="M",
              help="Then continue every run to M steps (as `dhwt train --resume --steps M`, "
                   "a group's runs as one ensemble), and analyse and report again.")
@click.option("--jobs", type=click.IntRange(min=1), metavar="N",
              help="Train the groups as jobs, at most N at once (local: processes on this "
                   "machine).  [default: local, one per core; slurm, every group that is "
                   "ready]")
@click.option("--executor", type=click.Choice(defaults.EXECUTORS),
              help="Where jobs run: local processes, or SLURM jobs (sbatch), both through "
                   "submitit (pip install 'dhwt[cluster]').  [default: local with --jobs]")
@click.option("--slurm-partition", metavar="NAME", help="SLURM jobs' partition.")
@click.option("--slurm-time", type=click.IntRange(min=1), metavar="MINUTES",
              help="SLURM jobs' time limit.")
@click.option("--slurm-cpus", type=click.IntRange(min=1), metavar="N",
              help="SLURM jobs' CPUs (cpus per task; the job's torch threads).")
@click.option("--slurm-gpus", type=click.IntRange(min=0), metavar="N",
              help="SLURM jobs' GPUs per node (runs with device = \"cuda\").")
@click.option("--slurm-requeues", type=click.IntRange(min=0), metavar="N",
              help="How many times a SLURM job preempted or out of time is requeued; it "
                   f"resumes from its last checkpoint.  [default: {defaults.JOB_REQUEUES}]")
@json_option("Print the study's numbers as one JSON document (a grammar study: final fit and "
             "closeness of every run; a text study: each analysis) instead of the line.")
def study_cmd(study_file: str, out: str, overwrite: bool, as_json: bool, steps: int | None,
              jobs: int | None, executor: str | None, slurm_partition: str | None,
              slurm_time: int | None, slurm_cpus: int | None, slurm_gpus: int | None,
              slurm_requeues: int | None) -> None:
    """Run a whole study: build the dataset, train every run, analyse, report.

    \b
    STUDY.toml (examples in experiments/, format in the docstring of dhwt/config/study.py):
      [study]     name, description (for the report), group (default true)
      [data]      a grammar (built-in name or path), or a corpus with tokenizer and seq_len
      [train]     settings shared by every run (the keys of a run's config.toml)
      [[runs]]    a name and what differs, e.g. tie_schedule = "untie@5000"
      [analysis]  pairs, measure (grammar studies only)

    A grammar study's report compares pair closeness in the input and output matrices with the
    pairs' exact relations, and accuracy with the Bayes optimum. A text study's report gives
    loss and valid / test perplexity, and analysis/NAME/ per run KNN match between its members
    over training and the DH diagnostic. A run may start from another: init_from = "NAME" (an
    earlier run of the study) or a path with a / (a relative one is taken from DIR, so
    "../other/runs/NAME" is a run of a study written beside this one).

    Runs that differ only in tie_schedule and seeds train as one ensemble (the EXor grid of
    tied and untied x 5 seeds: one batched computation of 10 members), each run directory the
    same, to float tolerance, as the run trained alone. group = false in [study] trains them one
    after another (for models whose combined ensemble would not fit in memory).

    Killed half-way? Run the same command again: finished runs are kept, interrupted ones resume
    from their last checkpoint. Added a [[runs]] table to the file? The same command trains only
    the new run (changing [data], [train] or an existing run needs --overwrite). --steps M
    continues a finished (or unfinished) study: every run to M steps, then a new report.

    --jobs N trains the groups (and runs alone) as N parallel jobs, each after the runs it
    starts from; --executor slurm submits each as a SLURM job with the --slurm-* settings. Both
    go through submitit; the jobs' logs are in DIR/jobs/. The dataset is built before and the
    report written after them, here. A failed job stops the study with one line naming its
    runs; the same command resumes what is left, and refuses while a run is still being trained
    by a job of an earlier one. Runs train with the threads of their config (`threads`,
    default 1: it changes rounding); a local job's other work gets cores // N torch threads.
    A SLURM job about to be preempted or to reach its --slurm-time is requeued (at most
    --slurm-requeues times) and resumes from its runs' last checkpoint, without a new command;
    once more stops the study with one line, and the same command resumes it.

    \b
    Examples:
      dhwt study experiments/exor_small.toml --out runs/exor-small
      dhwt study experiments/exor_small.toml --out runs/exor-small --jobs 2
      dhwt study experiments/exor_small.toml --out runs/exor-small --steps 20000
      dhwt study exor.toml --out /shared/exor --executor slurm --slurm-partition cpu \\
          --slurm-time 120 --slurm-cpus 4
      DHWT_DATA=../shared/data dhwt study experiments/wikitext/butterfly.toml \\
          --out runs/wt2-butterfly
    """
    from dhwt.commands.study import study_command
    from dhwt.training.study_jobs import JobSettings

    settings = None
    if jobs is not None or executor is not None or any(
            v is not None for v in (slurm_partition, slurm_time, slurm_cpus, slurm_gpus,
                                    slurm_requeues)):
        settings = JobSettings(executor or "local", jobs, slurm_partition, slurm_time,
                               slurm_cpus, slurm_gpus, slurm_requeues)
    click.echo(study_command(study_file, out, overwrite, as_json, steps=steps, jobs=settings,
                             say=partial(click.echo, err=True)))
