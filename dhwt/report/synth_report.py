"""The JSON document of `dhwt synth` (dhwt.languages.synth.Synthesis): the language, its classes,
and per objective the Bayes optimum, every symbol pair's relations with how far it is from each,
the symbols never predicted or never in a context; what was written. The text of the same
result is dhwt.languages.synth.summary_text."""

from __future__ import annotations

import dataclasses
import math

from dhwt.languages.language import symbol_strings
from dhwt.languages.synth import Synthesis
from dhwt.languages.truth import GroundTruth


def document(result: Synthesis) -> dict:
    """The result as JSON-ready data (infinite distances as null)."""
    language = result.language
    return {
        "language": language.name, "family": language.family,
        "description": language.spec.get("description"),
        "class_strings": len(language.probs),
        "symbol_strings": len(symbol_strings(language)[1]),
        "lengths": sorted(set(language.lengths.tolist())),
        "classes": [{"name": c.name, "variants": list(c.variants), "probs": list(c.probs),
                     "maskable": c.maskable} for c in language.classes],
        "train_strings": int(result.train.sum()),
        "train_probability": float(language.probs[result.train].sum()),
        "objectives": {name: _truth(truth) for name, truth in result.truths.items()},
        "written": None if result.out is None else str(result.out),
        "split_sizes": result.sizes, "split_seed": result.seed,
    }


def _truth(truth: GroundTruth) -> dict:
    return {
        "vocab": list(truth.vocab),
        "bayes_accuracy": truth.bayes_accuracy, "bayes_cross_entropy": truth.bayes_cross_entropy,
        "marginal_accuracy": truth.marginal_accuracy,
        "marginal_entropy": truth.marginal_entropy,
        "pairs": [{**{k: _finite(v) for k, v in dataclasses.asdict(p).items()}, "kind": p.kind}
                  for p in truth.pairs()],
        "never_predicted": list(truth.never_predicted),
        "never_in_context": list(truth.never_in_context),
    }


def _finite(value: object) -> object:
    return None if isinstance(value, float) and math.isinf(value) else value
