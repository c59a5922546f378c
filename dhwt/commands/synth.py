"""`dhwt synth`: joins dhwt.languages.synth (the language, its truth, the dataset written) and
its renderings (the summary text, or dhwt.report.synth_report's JSON document)."""

from __future__ import annotations

from collections.abc import Sequence

from dhwt.languages.synth import summary_text, synthesize
from dhwt.report.json_document import json_text
from dhwt.report.synth_report import document


def synth_command(grammar: str, assignments: Sequence[str], out: str | None, *,
                  valid_fraction: float, test_fraction: float, seed: int, overwrite: bool,
                  as_json: bool = False) -> str:
    """What `dhwt synth` prints: the summary, or (`as_json`) the JSON document."""
    result = synthesize(grammar, assignments, out, valid_fraction=valid_fraction,
                        test_fraction=test_fraction, seed=seed, overwrite=overwrite)
    return json_text(document(result)) if as_json else summary_text(result)
