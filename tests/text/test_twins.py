"""Twin planting: the planted truth (sem, cnd, log-ratio per objective) equals a brute-force
computation on a small corpus, where the planted corpus's distribution is enumerated exactly
(every choice of twin at every occurrence, with its probability, as exact fractions), and the
transform's draws follow that distribution (exact binomial intervals, level 1 - 1e-6)."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest

from dhwt.analysis.intervals import clopper_pearson
from dhwt.text.twins import MARKER, plant_twins

VOCAB = ("x", "y", "z", "<eos>")
STREAM = np.array([0, 1, 0, 2, 3, 1, 0, 3])  # x thrice, y twice: the two most frequent
MASKED = "?"


def plantings(kind: str, p: Fraction) -> dict[tuple[str, ...], Fraction]:
    """Every planted stream of STREAM (twins of x and y) with its exact probability."""
    where = [i for i, t in enumerate(STREAM) if VOCAB[t] in ("x", "y")]
    q = p if kind == "sem" else Fraction(1, 2)
    streams: dict[tuple[str, ...], Fraction] = defaultdict(Fraction)
    for choice in itertools.product((False, True), repeat=len(where)):
        words, prob = [VOCAB[t] for t in STREAM], Fraction(1)
        for i, to_b in zip(where, choice):
            prob *= q if to_b else 1 - q
            if to_b:
                words[i] += "#twin"
        if kind == "cnd":
            words = [w for word in words for w in ((word, MARKER) if word.endswith("#twin")
                                                   else (word,))]
        streams[tuple(words)] += prob
    return streams


def conditionals(streams, objective: str) -> dict[tuple[str, ...], dict[str, Fraction]]:
    """p(. | context) for every context of positive probability: a causal context is a prefix
    (the next token is predicted), a masked one is a stream with one position shown as MASKED."""
    joint: dict[tuple[str, ...], dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    for words, prob in streams.items():
        for j, word in enumerate(words):
            context = words[:j] if objective == "clm" else words[:j] + (MASKED,) + words[j + 1:]
            joint[context][word] += prob
    return {c: {w: v / sum(d.values()) for w, v in d.items()} for c, d in joint.items()}


def brute_relations(streams, objective: str, a: str, b: str) -> dict[str, object]:
    """sem, cnd and the log-ratio of (a, b), by the definitions of proofs/README.md."""
    cond = conditionals(streams, objective)
    cnd = all(d.get(a, 0) == d.get(b, 0) for d in cond.values())
    ratios = {d.get(a, 0) / d[b] if d.get(b, 0) else math.inf
              for d in cond.values() if d.get(a, 0) or d.get(b, 0)}
    sem = True
    for context, dist in cond.items():
        for i, word in enumerate(context):
            if word in (a, b):
                swapped = context[:i] + ({a: b, b: a}[word],) + context[i + 1:]
                sem &= cond.get(swapped) == dist
    ratio = next(iter(ratios)) if len(ratios) == 1 else None
    log_ratio = None if ratio in (None, 0, math.inf) else math.log(ratio)
    return {"sem": sem, "cnd": cnd, "log_ratio": log_ratio}


@pytest.mark.parametrize("kind, p", [("sem", Fraction(1, 2)), ("sem", Fraction(1, 10)),
                                     ("sem", Fraction(7, 10)), ("cnd", Fraction(1, 2))])
@pytest.mark.parametrize("objective", ["mlm", "clm"])
def test_planted_truth_equals_the_brute_force_relations(kind, p, objective):
    ids = {"train": STREAM, "valid": STREAM[:2], "test": STREAM[:2]}
    truth = plant_twins(ids, VOCAB, 2, p=float(p), kind=kind, seed=0).truth
    streams = plantings(kind, p)
    assert [(q["a"], q["b"]) for q in truth["pairs"]] == [("x", "x#twin"), ("y", "y#twin")]
    for pair in truth["pairs"]:
        brute = brute_relations(streams, objective, pair["a"], pair["b"])
        stated = pair["relations"][objective]
        assert (stated["sem"], stated["cnd"]) == (brute["sem"], brute["cnd"])
        if brute["log_ratio"] is None:
            assert stated["log_ratio"] is None
        else:
            assert stated["log_ratio"] == pytest.approx(brute["log_ratio"], rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("kind, p", [("sem", 0.1), ("sem", 0.5), ("cnd", 0.5)])
def test_the_draws_follow_the_planted_distribution_and_the_counts_are_the_corpus(kind, p):
    rng = np.random.default_rng(3)
    vocab = tuple(f"w{i}" for i in range(20)) + ("<eos>",)
    ids = {s: rng.integers(0, 21, n) for s, n in (("train", 20000), ("valid", 500),
                                                   ("test", 500))}
    planted = plant_twins(ids, vocab, 3, p=p, kind=kind, seed=11)
    counts = np.bincount(ids["train"], minlength=21)
    top = [i for i in np.argsort(-counts, kind="stable") if vocab[i] != "<eos>"][:3]
    assert [q["a"] for q in planted.truth["pairs"]] == [vocab[i] for i in top]
    marker = planted.vocab.index(MARKER) if kind == "cnd" else None
    for split in ("train", "valid", "test"):
        out = planted.ids[split]
        kept = out if marker is None else out[out != marker]
        twin_ids = {len(vocab) + k: i for k, i in enumerate(top)}
        assert np.array_equal(np.array([twin_ids.get(int(t), int(t)) for t in kept]),
                              ids[split])  # b stands where a stood; nothing else moves
        if marker is not None:  # the marker follows every b and nothing else
            after = out[1:][np.isin(out[:-1], list(twin_ids))]
            assert (after == marker).all() and (out == marker).sum() == len(after)
        for k, pair in enumerate(planted.truth["pairs"]):
            a, b = pair["ids"]
            assert pair["count"][split] == [int((out == a).sum()), int((out == b).sum())]
    n_a, n_b = np.sum([q["count"]["train"] for q in planted.truth["pairs"]], axis=0)
    low, high = clopper_pearson(int(n_b), int(n_a + n_b), 1 - 1e-6)
    assert low <= (p if kind == "sem" else 0.5) <= high


def test_planting_is_seeded():
    ids = {"train": STREAM, "valid": STREAM, "test": STREAM}
    one, two, other = (plant_twins(ids, VOCAB, ["x"], p=0.5, kind="sem", seed=s)
                       for s in (4, 4, 5))
    assert all(np.array_equal(one.ids[s], two.ids[s]) for s in ids)
    assert any(not np.array_equal(one.ids[s], other.ids[s]) for s in ids)
