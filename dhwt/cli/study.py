"""`dhwt study`: its options and help; what it does is dhwt.commands.study."""

from __future__ import annotations

import click

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
                   "dhwt made that holds none of the study's inputs).")
@json_option("Print the study's numbers as one JSON document (a grammar study: final fit and "
             "closeness of every run; a text study: each analysis) instead of the line.")
def study_cmd(study_file: str, out: str, overwrite: bool, as_json: bool) -> None:
    """Run a whole study: build the dataset, train every run, analyse, report.

    \b
    STUDY.toml (examples in experiments/, format in the docstring of dhwt/commands/study.py):
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
    the new run (changing [data], [train] or an existing run needs --overwrite).

    \b
    Examples:
      dhwt study experiments/exor_small.toml --out runs/exor-small
      DHWT_DATA=../shared/data dhwt study experiments/wikitext/butterfly.toml \\
          --out runs/wt2-butterfly
    """
    from dhwt.commands.study import study_command

    click.echo(study_command(study_file, out, overwrite, as_json))
