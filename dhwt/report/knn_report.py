"""The report of `dhwt knn` (dhwt.analysis.knn_result): the lines it prints, its JSON
document, and the per-token CSV."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dhwt.analysis.knn_result import KnnComparison
from dhwt.directories import atomic_path
from dhwt.errors import DhwtError

MEANING = {"jaccard": "|A∩B|/|A∪B|", "overlap": "|A∩B|/k"}
#: The first line of the per-token CSV, by which an earlier one is known (`is_per_token`).
HEADER = "token,intersection,jaccard,overlap,weight"


def text(result: KnnComparison) -> str:
    """The lines `dhwt knn` prints."""
    match, chance, options = result.match, result.chance, result.options
    n = len(match.tokens)
    subset = f"{n} tokens from {options.tokens_file}" if options.tokens_file else f"all {n} tokens"
    average = f"weighted by {options.weights_file}" if options.weights_file else "plain mean"
    lines = [f"A: {result.a}", f"B: {result.b}",
             f"k = {match.k}{result.k_note}, metric {match.metric}, self excluded, ties to the "
             f"lower token id; {subset}, {average}"]
    names = ("jaccard", "overlap") if options.score == "both" else (options.score,)
    for name in names:
        line = f"{name:8s} {getattr(match, 'mean_' + name):.4f}   ({MEANING[name]})"
        if chance is not None:
            line += (f"   chance {getattr(chance, 'mean_' + name):.4f} (norm-matched random "
                     f"directions, seed {options.seed})")
        lines.append(line)
    if options.per_token:
        lines.append(f"per-token scores: {options.per_token}")
    return "\n".join(lines)


def document(result: KnnComparison) -> dict:
    """The result as JSON-ready data: the means of both scores, and of the chance level."""
    match, chance, options = result.match, result.chance, result.options
    return {
        "a": result.a, "b": result.b, "k": match.k, "metric": match.metric,
        "tokens": len(match.tokens), "tokens_file": options.tokens_file,
        "weights_file": options.weights_file, "mean_jaccard": match.mean_jaccard,
        "mean_overlap": match.mean_overlap,
        "chance": None if chance is None else {
            "mean_jaccard": chance.mean_jaccard, "mean_overlap": chance.mean_overlap,
            "seed": options.seed, "of": "norm-matched random directions"},
        "per_token": options.per_token,
    }


def write_per_token(path: str, result: KnnComparison) -> None:
    """CSV HEADER, then a row per token, written whole or not at all (atomic_path)."""
    match = result.match
    rows = np.column_stack([match.tokens, match.intersection, match.jaccard, match.overlap,
                            match.weights])
    try:
        with atomic_path(path) as tmp:
            np.savetxt(tmp, rows, delimiter=",", fmt=["%d", "%d", "%.6f", "%.6f", "%.9g"],
                       header=HEADER, comments="")
    except OSError as exc:
        raise DhwtError(f"cannot write {path}: {exc.strerror}") from None


def is_per_token(path: Path) -> bool:
    """Whether the file `path` is a per-token CSV of `dhwt knn` (its first line is HEADER): the
    only file --per-token replaces."""
    try:
        with open(path, "rb") as file:
            return file.readline(len(HEADER) + 2).rstrip(b"\r\n") == HEADER.encode()
    except OSError:  # unreadable: not known to be one
        return False
