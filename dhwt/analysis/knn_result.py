"""What `dhwt knn A B` computes: the KNN Match Similarity of two matrices on disk, with its
chance level, as a typed result (dhwt.report.knn_report renders it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dhwt.analysis.knn import KnnMatch, chance_baseline, choose_k, knn_match, select_tokens
from dhwt.analysis.matrices import load_matrix, read_tokens, read_weights
from dhwt.checks import Boolean, Choice, Integer, Text, check_fields
from dhwt.config.device import DEVICE, resolve_device
from dhwt.defaults import KNN_SCORES as SCORES
from dhwt.defaults import METRICS
from dhwt.errors import DhwtError

#: A file the options name.
FILE = Text("a file path")


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

    CONSTRAINTS = {"k": [Integer(1), None], "metric": [Choice(METRICS)],
                   "score": [Choice(SCORES)], "tokens_file": [FILE, None],
                   "weights_file": [FILE, None],
                   "side_a": [Text("input, output or a tensor name")],
                   "side_b": [Text("input, output or a tensor name")],
                   "member_a": [Integer(0)], "member_b": [Integer(0)], "baseline": [Boolean()],
                   "seed": [Integer(0)], "per_token": [FILE, None],
                   "device": [DEVICE]}

    def __post_init__(self) -> None:
        check_fields(self, self.CONSTRAINTS)


@dataclass(frozen=True, eq=False)
class KnnComparison:
    """The KNN match of the matrices labelled `a` and `b` (per token and averaged), and of
    norm-matched random directions drawn with default_rng(options.seed) (None: not asked);
    k_note says why k is what it is (choose_k)."""

    a: str
    b: str
    match: KnnMatch
    chance: KnnMatch | None
    k_note: str
    options: KnnOptions


def compare(a_spec: str, b_spec: str, options: KnnOptions) -> KnnComparison:
    """Load A and B (files or run snapshots, dhwt.analysis.matrices.load_matrix) and compare
    their neighbourhoods."""
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
    return KnnComparison(a.label, b.label, match, chance, k_note, options)
