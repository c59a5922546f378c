"""What a command prints, in one shape for every `dhwt` command (dhwt.commands.NAME returns it,
dhwt.cli.options.emit prints it): the text report or, under --json, the JSON document on stdout,
and the line naming what was written on disk (stderr under --json, so that stdout holds the
document alone), and the exit code."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from dhwt.report.json_document import json_text

R = TypeVar("R")


@dataclass(frozen=True)
class Output:
    """text: the text report or the JSON document (None: nothing but the note); note: the line
    naming what was written (None: nothing was); as_json: whether text is the JSON document;
    code: the exit code (1 when `dhwt verify-theorems` found a failing check)."""

    text: str | None
    note: str | None = None
    as_json: bool = False
    code: int = 0


def rendered(result: R, as_json: bool, text: Callable[[R], str], document: Callable[[R], object],
             note: str | None = None, code: int = 0) -> Output:
    """The Output of `result`: its JSON document (`document`, serialised by
    dhwt.report.json_document) under `as_json`, else its `text`; `note` and the exit `code` as
    given.

    Examples:
        >>> rendered(3, False, str, lambda n: {"n": n}).text
        '3'
        >>> rendered(3, True, str, lambda n: {"n": n}).text
        '{\\n "n": 3\\n}'
    """
    return Output(json_text(document(result)) if as_json else text(result), note, as_json, code)
