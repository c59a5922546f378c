"""`dhwt verify-theorems`: runs dhwt.theory.runner (the checks of proofs/), and prints the table
or the JSON document."""

from __future__ import annotations

from collections.abc import Callable

from dhwt.report.json_document import json_text
from dhwt.theory.runner import document, verify, verify_theorems


def verify_theorems_command(only: str | None, full: bool, seed: int, as_json: bool = False,
                            echo: Callable[[str], None] = print) -> int:
    """Run the selected checks and echo the table (or the JSON document); the exit code."""
    if not as_json:
        return verify_theorems(only=only, full=full, seed=seed, echo=echo)
    result = verify(only, full, seed)
    echo(json_text(document(result)))
    return result.code
