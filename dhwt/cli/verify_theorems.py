"""`dhwt verify-theorems`: its options and help; what it does is dhwt.commands.verify_theorems."""

from __future__ import annotations

import click

from dhwt.cli.group import cli
from dhwt.cli.options import emit, json_option, seed_option


@cli.command("verify-theorems", context_settings={"max_content_width": 100})
@click.option("--full", is_flag=True,
              help="Also run the long empirical checks (models trained with dhwt.training on "
                   "EXor; minutes, not seconds).")
@click.option("--only", metavar="T1,T2,...",
              help="Run only these theorems (comma-separated, of T1 T2 T3 T4 T5).  [default: all]")
@seed_option("Seed of every random instance and training run (each check derives its own "
             "generator from it and its name).")
@json_option("Print the checks as a JSON document (one record per check) instead of the table; "
             "the exit code is the same.")
def verify_theorems_cmd(full: bool, only: str | None, seed: int, as_json: bool) -> int:
    """Check the theorems of proofs/ symbolically, numerically and against trained models.

    \b
    Prints one line per check: theorem, kind (symbolic | numeric | empirical), check,
    prediction, measured value, PASS/FAIL. Exit code 0 when nothing failed, 1 when a check
    failed, 2 for bad options. Default mode takes well under a minute on 2 CPU cores.

    \b
    Examples:
      dhwt verify-theorems
      dhwt verify-theorems --only T1,T4 --seed 3
      dhwt verify-theorems --full
    """
    from dhwt.commands.verify_theorems import verify_theorems_command

    return emit(verify_theorems_command(only, full, seed, as_json))
