"""The `dhwt` group and its entry point: options given once, Ctrl-C and user errors as one
line (`error: ...`, exit 2; 130 for Ctrl-C), `--debug` anywhere."""

from __future__ import annotations

import sys
from collections import Counter

import click

from dhwt.errors import LINE, DhwtError, Interrupted, shorten


class _OnceEach:
    """Refuses a single-valued option given more than once (click would keep the last silently:
    `--seeds 1 --seeds 2` would train seed 2 alone). Options that take several values (multiple,
    count) may repeat; eager ones (--help, --version) act before anything else."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        _, _, order = self.make_parser(ctx).parse_args(args=list(args))  # a dry run: the order
        counts = Counter(p for p in order if isinstance(p, click.Option) and not p.multiple
                         and not p.count and not p.is_eager)
        for option, n in counts.items():
            if n > 1:
                names = " / ".join(f"'{name}'" for name in option.opts + option.secondary_opts)
                raise click.UsageError(f"Option {names} given {n} times; it holds one value: "
                                       "give it once", ctx)
        return super().parse_args(ctx, args)


class _Command(_OnceEach, click.Command):
    """A dhwt command (see _OnceEach)."""


class _Group(_OnceEach, click.Group):
    """The dhwt group; its commands are _Command. Ctrl-C reaches main() as click's Abort
    without the blank line click would print first (main ends the terminal's "^C" line)."""

    command_class = _Command

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise click.exceptions.Abort() from exc


@click.group(cls=_Group,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="dhwt")
@click.option("--debug", is_flag=True,
              help="Show full tracebacks instead of one-line errors (also after the command).")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """dhwt: token embeddings, tying, and the distributional hypothesis.

    \b
    Typical flow:
      dhwt synth --grammar parity                         # a language and its exact truth
      dhwt train --grammar parity --tie-schedule untie@5000 --steps 10000 --out runs/u5k
      dhwt analyze runs/u5k --out reports/u5k              # pair closeness over training
      dhwt study experiments/exor_small.toml --out runs/exor-small   # all of it, from one TOML
      dhwt verify-theorems                                # the theorems of proofs/, checked

    Every command explains itself: dhwt COMMAND --help.
    """
    ctx.obj = {"debug": debug}


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning user errors into `error: ...` and exit code 2."""
    args, debug = _debug_first(sys.argv[1:] if argv is None else argv)
    try:
        code = cli.main(args=args, prog_name="dhwt", standalone_mode=False)
    except DhwtError as exc:
        if debug:
            raise
        click.echo(f"error: {shorten(exc, LINE)}", err=True)
        sys.exit(2)
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:
        cause = exc if isinstance(exc, Interrupted) else exc.__cause__
        if isinstance(cause, EOFError):  # click's Abort wraps EOFError too: a bug, not Ctrl-C
            raise cause from None
        if isinstance(cause, Interrupted):  # the command says what it kept
            message = str(cause)
        elif _command_of(args).strip() in ("synth", "train"):
            message = "interrupted; nothing was written"  # before a run could keep anything
        else:
            message = "interrupted"
        newline = "\n" if sys.stderr.isatty() else ""  # after the terminal's "^C", not a blank line
        click.echo(f"{newline}error: {message}", err=True)
        if not debug:  # objects the interrupt left half-built (a ZipFile) complain when freed
            sys.unraisablehook = _ignore
        sys.exit(130)
    except OSError as exc:  # a full disk or a path that cannot be written: say which, briefly
        if debug:
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        click.echo(f"error: {shorten(f'{exc.strerror or exc}{where}', LINE)}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        if debug:
            raise
        message = shorten(exc.format_message(), LINE)
        click.echo(f"error: {message} (see `dhwt {_command_of(args)}--help`)", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


def _ignore(unraisable: object) -> None:
    """An unraisable exception's report, dropped: after Ctrl-C the one error line says it all."""


def _debug_first(args: list[str]) -> tuple[list[str], bool]:
    """(args with --debug moved before the command, whether it was given): --debug belongs to
    the group, and a user may well add it after the command (`dhwt knn --debug A B`). Arguments
    after `--` are left as they are."""
    end = args.index("--") if "--" in args else len(args)
    head = [a for a in args[:end] if a != "--debug"]
    debug = len(head) < end
    return (["--debug"] if debug else []) + head + args[end:], debug


def _command_of(args: list[str]) -> str:
    """The subcommand named in `args`, with a trailing space, or '' when there is none."""
    names = [a for a in args if not a.startswith("-")]
    return f"{names[0]} " if names and names[0] in cli.commands else ""
