"""The options several commands share, declared once: --k, --metric, --seed, --device and
--json (each command gives its own help: what the option means there); and `emit`, how every
command's Output is printed (and its exit code returned)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from dhwt import defaults

if TYPE_CHECKING:
    from dhwt.report.output import Output

Decorator = Callable[[Callable[..., object]], Callable[..., object]]


def k_option(help_text: str) -> Decorator:
    """--k: neighbours per token; None gives the default, capped for small vocabularies."""
    return click.option("--k", type=int,
                        help=f"{help_text}  [default: {defaults.DEFAULT_K}, capped at "
                             "(tokens - 1) // 2 for small vocabularies]")


def metric_option(help_text: str) -> Decorator:
    """--metric: the KNN metric (dhwt.defaults.METRICS), inner product by default."""
    return click.option("--metric", type=click.Choice(defaults.METRICS), default="ip",
                        show_default=True, help=help_text)


def seed_option(help_text: str, default: int = 0) -> Decorator:
    return click.option("--seed", type=int, default=default, show_default=True, help=help_text)


def device_option(help_text: str, default: str | None = "cpu") -> Decorator:
    """--device: cpu, cuda, cuda:N or auto (None: the help says the default)."""
    return click.option("--device", default=default, show_default=default is not None,
                        metavar="cpu|cuda|cuda:N|auto", help=help_text)


def json_option(help_text: str) -> Decorator:
    """--json, as `as_json`: print the command's JSON document (dhwt.report.json_document)."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def emit(output: Output) -> int:
    """Print a command's Output: the note naming what was written (on stderr under --json, so
    that stdout holds the document alone), then the text; return its exit code."""
    if output.note is not None:
        click.echo(output.note, err=output.as_json)
    if output.text is not None:
        click.echo(output.text)
    return output.code
