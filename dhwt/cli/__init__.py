"""The `dhwt` command line: a thin face over the package. It parses, calls, and prints; no logic.
One module per command (its options and help), shared options declared once (options), the
group and the entry point `main` (group).

Every error a user can cause surfaces as one line `error: <message>` on stderr with exit code 2
(`--debug` shows the traceback instead).
"""

from dhwt.cli import (  # noqa: F401 (each module registers its command)
    analyze, corpus_dh, diagnose, export, knn, study, synth, train, verify_theorems)
from dhwt.cli.group import cli, main

__all__ = ["cli", "main"]
