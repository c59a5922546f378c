"""`dhwt verify-theorems`: the checks of proofs/ run by dhwt.theory.runner, rendered by
dhwt.report.verify_theorems_report (the table, or the JSON document); exit code 1 when a check
failed."""

from __future__ import annotations

from dhwt.report import verify_theorems_report
from dhwt.report.output import Output, rendered
from dhwt.theory.runner import verify


def verify_theorems_command(only: str | None, full: bool, seed: int,
                            as_json: bool = False) -> Output:
    """What `dhwt verify-theorems` prints: the table of the selected checks, or (`as_json`) the
    JSON document; its code is 1 when a check failed."""
    result = verify(only, full, seed)
    return rendered(result, as_json, verify_theorems_report.text, verify_theorems_report.document,
                    code=result.code)
