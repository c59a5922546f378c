"""`dhwt synth`: a grammar's language with its exact ground truth, the dataset written where
asked (dhwt.languages.synthesis.synthesize), rendered by dhwt.report.synth_report (the summary
text, or the JSON document)."""

from __future__ import annotations

from dhwt.languages.synthesis import SynthOptions, synthesize
from dhwt.report.output import Output, rendered
from dhwt.report.synth_report import document, summary_text

__all__ = ["SynthOptions", "synth_command"]


def synth_command(grammar: str, out: str | None, options: SynthOptions,
                  as_json: bool = False) -> Output:
    """What `dhwt synth` prints: the summary, or (`as_json`) the JSON document."""
    result = synthesize(grammar, options.assignments, out,
                        valid_fraction=options.valid_fraction,
                        test_fraction=options.test_fraction, seed=options.seed,
                        overwrite=options.overwrite)
    return rendered(result, as_json, summary_text, document)
