"""The `dhwt` command line: a thin face over the package. It parses, calls, and prints; no logic.
One module per command (its options and help), shared options declared once (options), the
group and the entry point `main` (group). Every module of this package but those two registers
its command when imported, and all are imported here: a new command is a new module.

Every error a user can cause surfaces as one line `error: <message>` on stderr with exit code 2
(`--debug` shows the traceback instead).
"""

from importlib import import_module
from pkgutil import iter_modules

from dhwt.cli.group import cli, main

for _module in iter_modules(__path__):
    import_module(f"{__name__}.{_module.name}")

__all__ = ["cli", "main"]
