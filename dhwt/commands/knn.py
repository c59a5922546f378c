"""`dhwt knn A B`: KNN Match Similarity of two matrices on disk, with its chance baseline."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dhwt.analysis.knn import KnnMatch, chance_baseline, choose_k, knn_match, select_tokens
from dhwt.analysis.matrices import load_matrix, read_tokens, read_weights
from dhwt.config.device import resolve_device
from dhwt.errors import DhwtError

SCORES = ("both", "jaccard", "overlap")


@dataclass(frozen=True)
class KnnOptions:
    """Everything `dhwt knn` can be asked (see its --help); k None: the default, capped for
    small vocabularies (dhwt.analysis.knn.default_k)."""

    k: int | None = None
    metric: str = "ip"
    score: str = "both"
    tokens_file: str | None = None
    weights_file: str | None = None
    side_a: str = "input"
    side_b: str = "input"
    member_a: int = 0
    member_b: int = 0
    baseline: bool = True
    seed: int = 0
    per_token: str | None = None
    device: str = "cpu"


def knn_command(a_spec: str, b_spec: str, options: KnnOptions) -> str:
    """Compute the KNN match of two matrices (and its chance baseline); return the report text
    and write per-token scores to options.per_token (CSV) when asked."""
    if options.score not in SCORES:
        raise DhwtError(f"score must be one of {', '.join(SCORES)}, got {options.score!r}")
    a = load_matrix(a_spec, side=options.side_a, member=options.member_a)
    b = load_matrix(b_spec, side=options.side_b, member=options.member_b)
    if a.values.shape[0] != b.values.shape[0]:
        raise DhwtError(f"A has {a.values.shape[0]} rows and B has {b.values.shape[0]}; KNN "
                        "match compares the same tokens in both, so the row counts must be equal")
    tokens = read_tokens(options.tokens_file) if options.tokens_file else None
    weights = read_weights(options.weights_file) if options.weights_file else None
    k, k_note = choose_k(options.k, len(select_tokens(tokens, a.values.shape[0])))
    kwargs = {"tokens": tokens, "weights": weights, "progress": None,
              "device": str(resolve_device(options.device))}
    match = knn_match(a.values, b.values, k, options.metric, **kwargs)
    chance = None
    if options.baseline:
        chance = chance_baseline(a.values, b.values, k, options.metric,
                                 generator=np.random.default_rng(options.seed), **kwargs)
    if options.per_token:
        write_per_token(options.per_token, match)
    return report(a.label, b.label, match, chance, options, k_note=k_note)


def report(a_label: str, b_label: str, match: KnnMatch, chance: KnnMatch | None,
           options: KnnOptions, *, k_note: str = "") -> str:
    """The lines `dhwt knn` prints; k_note says why k is what it is (see choose_k)."""
    n = len(match.tokens)
    subset = f"{n} tokens from {options.tokens_file}" if options.tokens_file else f"all {n} tokens"
    average = f"weighted by {options.weights_file}" if options.weights_file else "plain mean"
    lines = [f"A: {a_label}", f"B: {b_label}",
             f"k = {match.k}{k_note}, metric {match.metric}, self excluded, ties to the lower "
             f"token id; {subset}, {average}"]
    names = ("jaccard", "overlap") if options.score == "both" else (options.score,)
    meaning = {"jaccard": "|A∩B|/|A∪B|", "overlap": "|A∩B|/k"}
    for name in names:
        line = f"{name:8s} {getattr(match, 'mean_' + name):.4f}   ({meaning[name]})"
        if chance is not None:
            line += (f"   chance {getattr(chance, 'mean_' + name):.4f} (norm-matched random "
                     f"directions, seed {options.seed})")
        lines.append(line)
    if options.per_token:
        lines.append(f"per-token scores: {options.per_token}")
    return "\n".join(lines)


def write_per_token(path: str, match: KnnMatch) -> None:
    """CSV token,intersection,jaccard,overlap,weight; written to a temp file, then renamed."""
    out = Path(path)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    rows = np.column_stack([match.tokens, match.intersection, match.jaccard, match.overlap,
                            match.weights])
    try:
        np.savetxt(tmp, rows, delimiter=",", fmt=["%d", "%d", "%.6f", "%.6f", "%.9g"],
                   header="token,intersection,jaccard,overlap,weight", comments="")
        os.replace(tmp, out)
    except OSError as exc:
        raise DhwtError(f"cannot write {path}: {exc.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)
