"""What the similarity section of a runs report computes: which members are compared, which
tokens count, the curves over training (dhwt.analysis.knn_curves), and the options `dhwt
analyze` exposes for it (dhwt.report.runs_similarity_report renders the result).

Tokens seen in training come from a count vector (one count per token id): a file given by the
user, or the run's token counts (Run.token_counts_file), which the trainer writes for tasks that
can count their training tokens (text).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dhwt.analysis.frequency import check_counts
from dhwt.analysis.knn import choose_k
from dhwt.analysis.matrices import read_weights
from dhwt.analysis.knn_curves import (SimilarityCurves, Source, parse_measures,
                                      similarity_curves)
from dhwt.checks import Boolean, Choice, Integer, Text, check_fields
from dhwt.config.schedule import TieSchedule
from dhwt.defaults import CURVE_SCORES as SCORES
from dhwt.defaults import METRICS, TOKEN_CHOICES
from dhwt.errors import DhwtError, brief
from dhwt.runs.run import load_run


@dataclass(frozen=True)
class SimilarityOptions:
    """What `dhwt analyze` computes beside closeness and loss (see its --help).

    measures: comma list of dhwt.analysis.knn_curves.MEASURES, or "none"; members: "all" or
    comma-separated member indices (0-based, in each run's seed order); tokens: "all" or "seen"
    (count > 0 in the counts); counts: a file of one count per token id (else
    RUN_DIR/token_counts.npy); weighted: average weighted by the counts; k None: the default,
    capped for small vocabularies (dhwt.analysis.knn.default_k).
    """

    measures: str = "knn"
    k: int | None = None
    metric: str = "ip"
    members: str = "all"
    tokens: str = "all"
    counts: str | None = None
    weighted: bool = False
    chance: bool = True
    seed: int = 0
    score: str = "overlap"

    CONSTRAINTS = {
        "measures": [Text("similarity measures", lambda text: text == "none" or
                          parse_measures(text))],
        "k": [Integer(1), None], "metric": [Choice(METRICS)],
        "members": [Text("member indices", lambda text: text == "all" or _indices(text))],
        "tokens": [Choice(TOKEN_CHOICES)], "counts": [Text("a file path"), None],
        "weighted": [Boolean()], "chance": [Boolean()], "seed": [Integer(0)],
        "score": [Choice(SCORES)]}

    def __post_init__(self) -> None:
        check_fields(self, self.CONSTRAINTS)


@dataclass(frozen=True, eq=False)
class RunsSimilarity:
    """The similarity of runs' embedding spaces over training: curves (None where skipped, with
    `skipped` saying why; nothing asked: both None), k_note why k is what it is, tokens_note
    which tokens count, each source member's tie schedule and run name."""

    options: SimilarityOptions
    curves: SimilarityCurves | None = None
    skipped: str | None = None
    k_note: str = ""
    tokens_note: str = ""
    schedules: Mapping[str, TieSchedule] | None = None
    run_of: Mapping[str, str] | None = None


def runs_similarity(runs: Mapping[str, Path], options: SimilarityOptions) -> RunsSimilarity:
    """Compute the curves for `runs` (name -> dir).

    Skipped, saying why, when there is nothing to compare or the vocabulary is not larger than
    an explicit k."""
    if options.measures == "none":
        return RunsSimilarity(options)
    measures = parse_measures(options.measures)
    sources = select_sources(runs, options.members)
    counts = None
    if options.tokens == "seen" or options.weighted:
        counts = token_counts(runs, options.counts)
    first = load_run(next(iter(runs.values())))
    vocab = first.embeddings(first.steps[0]).input.shape[1]
    if counts is not None and len(counts) != vocab:
        raise DhwtError(f"the token counts hold {len(counts)} values; the runs have {vocab} "
                        "tokens")
    tokens = np.flatnonzero(counts > 0) if options.tokens == "seen" else None
    n = vocab if tokens is None else len(tokens)
    k, k_note = choose_k(options.k, n)
    if n <= k:
        why = ("no token was seen in training (every count is 0)" if tokens is not None and not n
               else f"{n} tokens, not more than k = {k}{k_note} neighbours")
        return RunsSimilarity(options, skipped=why)
    result = similarity_curves(
        sources, k=k, metric=options.metric, measures=measures, tokens=tokens,
        weights=counts if options.weighted else None, chance=options.chance, seed=options.seed,
        pairs=len(sources) >= 2, progress=None)
    if not result.curves:
        return RunsSimilarity(options, skipped="one member and it was tied at every snapshot "
                                               "(nothing to compare)")
    note = (f" seen in training (count > 0) of {vocab}"
            if options.tokens == "seen" else "")
    note += ", weighted by training counts" if options.weighted else ""
    schedules = {s.name: load_run(s.run).config.tying.tie_schedule for s in sources}
    run_of = {s.name: name for s in sources for name, run in runs.items() if Path(run) == s.run}
    return RunsSimilarity(options, result, None, k_note, note, schedules, run_of)


def select_sources(runs: Mapping[str, Path], members: str) -> list[Source]:
    """One Source per chosen member of every run, named by seed (and run when several)."""
    chosen = None if members == "all" else _indices(members)
    sources = []
    for name, run in runs.items():
        first = load_run(run)
        seeds = first.embeddings(first.steps[0]).seeds
        for m in range(len(seeds)) if chosen is None else chosen:
            if m >= len(seeds):
                raise DhwtError(f"{run} holds {len(seeds)} members (seeds "
                                f"{brief(seeds, str)}); member {m} does not exist")
            label = f"seed{seeds[m]}" if len(runs) == 1 else f"{name}/seed{seeds[m]}"
            sources.append(Source(label, Path(run), m))
    return sources


def _indices(text: str) -> list[int]:
    try:
        values = [int(t) for t in text.split(",")]
    except ValueError:
        values = [-1]
    if any(v < 0 for v in values) or len(set(values)) < len(values):
        raise DhwtError(f"bad --members {text!r}: give 'all' or distinct member indices "
                        "(0-based) joined by commas, e.g. 0,1")
    return values


def token_counts(runs: Mapping[str, Path], counts_file: str | None) -> np.ndarray:
    """One training count per token id: from counts_file, else the first run's
    token_counts.npy; DhwtError naming both ways when neither exists."""
    if counts_file is not None:
        return check_counts(read_weights(counts_file, "token counts"), counts_file)
    files = [load_run(run).token_counts_file for run in runs.values()]
    for path in files:
        if path.is_file():
            return check_counts(read_weights(str(path), "token counts"), str(path))
    raise DhwtError(f"tokens seen in training need counts: {files[0]} does not exist "
                    "(the trainer writes it for text tasks); give --counts FILE with one count "
                    "per token id")


