"""Frequency buckets: a count is never split between buckets, and each bucket's label is its
count range, a single count written once."""

from __future__ import annotations

import numpy as np

from dhwt.analysis.diagnosis import frequency_buckets as diagnose_buckets
from dhwt.analysis.frequency import count_span, frequency_buckets, frequency_groups


def zipf_like_counts() -> np.ndarray:
    """60 tokens seen once, then 40 of distinct larger counts, shuffled."""
    counts = np.r_[np.ones(60), np.arange(2, 42)]
    return np.random.default_rng(0).permutation(counts)


def test_groups_keep_each_count_whole_and_cover_every_token():
    counts = zipf_like_counts()
    groups = frequency_groups(counts, 5)
    assert sorted(np.concatenate(groups).tolist()) == list(range(100))
    spans = [(counts[g].min(), counts[g].max()) for g in groups]
    assert all(high < low for (_, high), (low, _) in zip(spans, spans[1:]))  # disjoint ranges
    assert len(groups[0]) == 60 and set(counts[groups[0]]) == {1.0}  # every count-1 token
    assert [len(g) for g in groups[1:]] == [20, 20]  # the cuts at 80 and 100 fall on no tie


def test_groups_without_ties_are_equal_size():
    counts = np.arange(12, 0, -1)
    assert [len(g) for g in frequency_groups(counts, 3)] == [4, 4, 4]
    assert frequency_groups(np.array([]), 3) == []


def test_labels_are_unique_and_a_single_count_is_written_once():
    counts = zipf_like_counts()
    rows = frequency_buckets(counts, [np.zeros(100)], 5)
    labels = [count_span(r["count_min"], r["count_max"]) for r in rows]
    assert labels == ["1", "2-21", "22-41"]
    diagnosed = diagnose_buckets(np.zeros(101), np.arange(101), np.r_[0, counts])
    assert [b.label for b in diagnosed] == ["never seen", "1", "2-21", "22-41"]
