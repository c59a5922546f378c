"""The `dhwt` command line: a thin face over the package. It parses, calls, and prints; no logic.

Every error a user can cause surfaces as one line `error: <message>` on stderr with exit code 2
(`--debug` shows the traceback instead).
"""

from __future__ import annotations

import sys

import click

from dhwt.errors import DhwtError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="dhwt")
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """dhwt: token embeddings, tying, and the distributional hypothesis.

    \b
    Typical flow:
      dhwt synth --grammar parity --out data/parity     # a language with exact ground truth
      dhwt train --data data/parity --tie-schedule untie@5000 --steps 10000 --out runs/u5k
    """
    ctx.obj = {"debug": debug}


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning user errors into `error: ...` and exit code 2."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        code = cli.main(args=args, prog_name="dhwt", standalone_mode=False)
    except DhwtError as exc:
        if debug:
            raise
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("error: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        if debug:
            raise
        message = " ".join(exc.format_message().split())
        click.echo(f"error: {message} (see `dhwt {_command_of(args)}--help`)", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


def _command_of(args: list[str]) -> str:
    """The subcommand named in `args`, with a trailing space, or '' when there is none."""
    names = [a for a in args if not a.startswith("-")]
    return f"{names[0]} " if names and names[0] in cli.commands else ""
