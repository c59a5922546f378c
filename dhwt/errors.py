"""The one exception a user can cause. The CLI prints it as `error: <message>` with exit code 2."""

from __future__ import annotations

from collections.abc import Callable, Iterable

#: Items of a collection a message shows before '... (N in all)'.
SHOWN = 5

#: Characters of a quoted text (a token, a library's message about a user's file) in a message.
QUOTED = 200

#: Characters of a whole message as the CLI prints it.
LINE = 1_000


class DhwtError(Exception):
    """Bad input or an impossible request: a message meant for the user, never a bug.

    Examples:
        >>> from dhwt.languages import load_language
        >>> load_language("parity", {"n_bits": 0})
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: 'n_bits' must be an integer from 1 to 30, got int 0
    """


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGINT) during work that kept something: a KeyboardInterrupt whose message says
    what was kept and how to go on. The CLI prints it as `error: <message>`, exit code 130."""


def brief(items: Iterable[object], show: Callable[[object], str] = repr,
          limit: int = SHOWN) -> str:
    """The first `limit` items joined by ', ', then '... (N in all)' when there are more: a
    message names a collection without growing with it (a vocabulary may hold 50,000 tokens).

    Examples:
        >>> brief(["0a", "0b"])
        "'0a', '0b'"
        >>> brief(range(50_257), str)
        '0, 1, 2, 3, 4, ... (50,257 in all)'
    """
    items = list(items)
    head = ", ".join(shorten(show(item)) for item in items[:limit])
    return head if len(items) <= limit else f"{head}, ... ({len(items):,} in all)"


def shorten(text: object, limit: int = QUOTED) -> str:
    """`text` as one line (each run of whitespace one space) of at most `limit` characters,
    cut in the middle: a message quotes what a user's file holds (a 2 MB tensor name, a
    library's message that repeats the file's bytes) without growing with it, and keeps both
    ends (a path's file name, a message's advice).

    Examples:
        >>> shorten("cannot parse   line 3")
        'cannot parse line 3'
        >>> shorten("x" * 50 + "tail", 20)
        'xxxxxxxx ... xxxtail'
    """
    line = " ".join(str(text).split())
    if len(line) <= limit:
        return line
    keep = limit - len(_CUT)
    return f"{line[:keep - keep // 2]}{_CUT}{line[len(line) - keep // 2:]}"


_CUT = " ... "


def reason(exc: BaseException) -> str:
    """What a library's exception says, for a message about the user's file: the first line of
    its text, shortened (the rest is often advice about the library), or its type's name when
    it has no text.

    Examples:
        >>> reason(ValueError("bad header\\nsee the docs"))
        'bad header'
        >>> reason(EOFError())
        'EOFError'
    """
    return shorten(next((line for line in str(exc).splitlines() if line.strip()),
                        type(exc).__name__))


def counted(n: int, noun: str) -> str:
    """A count and its noun, plural unless the count is 1 (thousands separated).

    Examples:
        >>> counted(1, "class string"), counted(1024, "symbol string")
        ('1 class string', '1,024 symbol strings')
    """
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"
