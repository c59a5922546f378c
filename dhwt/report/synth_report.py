"""What `dhwt synth` shows of a dhwt.languages.synthesis.Synthesis: the summary text (the language,
its classes, and per objective which pairs of symbols are semantically / conditionally
equivalent, where the distributional hypothesis holds, which symbols are never predicted, and
the Bayes optimum; what was written) and the JSON document of the same, every symbol pair's
relations with how far it is from each."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dhwt.errors import counted
from dhwt.languages.language import OBJECTIVES, Language, symbol_strings
from dhwt.languages.splits import SPLITS
from dhwt.languages.synthesis import Synthesis
from dhwt.languages.truth import GroundTruth, PairRelation

TITLES = {"mlm": "masked LM (mlm)", "clm": "causal LM (clm)"}
KINDS = (
    ("sem and cnd", "sem and cnd (DH holds)"),
    ("sem only", "sem, not cnd (DH violated)"),
    ("cnd only", "cnd, not sem (DH violated)"),
)


def format_summary(language: Language, truths: dict[str, GroundTruth],
                   train: np.ndarray | None = None,
                   train_optimum: dict[str, tuple[float, float]] | None = None) -> str:
    """Several lines of text describing `language` and its exact ground truth; with
    `train_optimum` (Synthesis.train_optimum: the Bayes optimum of a train split, `train`, that
    holds half the strings or fewer) that optimum too: a model fitting those strings alone can
    beat the language's optimum on them, so the language's is not what its training loss tends
    to."""
    n_symbol_strings = len(symbol_strings(language)[1])
    lengths = sorted(set(language.lengths.tolist()))
    length = (f"length {lengths[0]}" if len(lengths) == 1
              else f"lengths {lengths[0]}-{lengths[-1]}")
    lines = [
        f"language {language.name} (family {language.family})",
        *([f"  {language.spec['description']}"] if language.spec.get("description") else []),
        f"  {counted(len(language.probs), 'class string')}, "
        f"{counted(n_symbol_strings, 'symbol string')}, {length}",
        "classes (variant: probability):",
    ]
    if language.split is not None:
        sizes = ", ".join(f"{name} {int((language.split == i).sum())}"
                          for i, name in enumerate(SPLITS))
        lines.insert(-1, f"  split fixed by the language: {sizes} (the split options do not "
                         "apply)")
    width = max(len(c.name) for c in language.classes)
    for cls in language.classes:
        variants = "  ".join(f"{v}: {p:.4g}" for v, p in zip(cls.variants, cls.probs))
        note = "" if cls.maskable else "  (never masked)"
        lines.append(f"  {cls.name:<{width}}  {variants}{note}")
    if train_optimum:
        lines.append(f"  train split: {train.sum():,} of {counted(len(train), 'class string')} "
                     f"(probability {language.probs[train].sum():.4g}), at most half the "
                     "language: its own Bayes optimum follows the language's below")
    for objective in OBJECTIVES:
        beside = [_train_line(*train_optimum[objective])] if train_optimum else []
        lines += _objective_lines(truths[objective], beside)
    return "\n".join(lines)


def summary_text(result: Synthesis) -> str:
    """What `dhwt synth` prints."""
    summary = format_summary(result.language, result.truths, result.train,
                             result.train_optimum)
    if result.out is None:
        return f"{summary}\n(no --out given: nothing written)"
    sizes = ", ".join(f"{name} {n}" for name, n in result.sizes.items())
    how = "the language's own split" if result.seed is None else f"seed {result.seed}"
    return f"{summary}\nwrote {result.out}: spec.toml, vocab.json, strings.npz, truth.json " \
           f"(strings: {sizes}; {how})"


def _train_line(accuracy: float, cross_entropy: float) -> str:
    """The Bayes optimum over the training strings alone, reweighted to sum to 1."""
    return (f"  Bayes optimum, train split only: accuracy {accuracy:.4f}, cross-entropy "
            f"{cross_entropy:.4f} nats")


def _objective_lines(truth: GroundTruth, beside: list[str]) -> list[str]:
    """The lines of one objective; `beside` follows its Bayes optimum."""
    lines = [
        f"{TITLES[truth.objective]}: vocab {' '.join(truth.vocab)}",
        f"  Bayes optimum: accuracy {truth.bayes_accuracy:.4f}, cross-entropy "
        f"{truth.bayes_cross_entropy:.4f} nats (unigram baseline: accuracy "
        f"{truth.marginal_accuracy:.4f}, {truth.marginal_entropy:.4f} nats)",
        *beside,
    ]
    pairs = truth.pairs()
    vacuous = set(truth.never_predicted) | set(truth.never_in_context)
    for kind, title in KINDS:
        chosen = [p for p in pairs if p.kind == kind]
        text = ", ".join(_pair_text(p, vacuous) for p in chosen) or "none"
        lines.append(f"  {title + ':':<28}{text}")
    neither = sum(p.kind == "neither" for p in pairs)
    lines.append(f"  {'neither (DH holds):':<28}{neither} of {len(pairs)} pairs")
    if truth.never_predicted:
        lines.append(f"  never predicted: {', '.join(truth.never_predicted)} (p = 0 in every "
                     "context, so conditionally equivalent to each other only vacuously)")
    if truth.never_in_context:
        lines.append(f"  never in a context: {', '.join(truth.never_in_context)} (semantically "
                     "equivalent to others only vacuously)")
    return lines


def _pair_text(pair: PairRelation, vacuous: set[str]) -> str:
    text = f"{pair.first}~{pair.second}"
    if pair.kind == "sem only":
        text += f" (cnd off by max |log p1/p2| {pair.cnd_log:.3g}, max |p1-p2| {pair.cnd_abs:.3g})"
    if pair.kind == "cnd only":
        text += f" (sem off by max TV {pair.sem_tv:.3g})"
    if {pair.first, pair.second} & vacuous:
        text += " [vacuous]"
    return text


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
