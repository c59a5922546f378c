"""Frequency buckets: no two buckets read the same; a bucket of one count is labelled by that
count once ("1", not "1-1")."""

from __future__ import annotations

import numpy as np

from dhwt.analysis.diagnosis import overlap_buckets as diagnose_buckets
from dhwt.analysis.frequency import count_span, frequency_buckets, frequency_groups


def counts_with(ones: int) -> np.ndarray:
    """`ones` tokens seen once, then 100 - ones tokens of distinct larger counts, shuffled."""
    counts = np.r_[np.ones(ones), np.arange(2, 102 - ones)]
    return np.random.default_rng(0).permutation(counts)


def labels(counts: np.ndarray, buckets: int = 5) -> list[str]:
    rows = frequency_buckets(counts, [np.zeros(len(counts))], buckets)
    return [count_span(r["count_min"], r["count_max"]) for r in rows]


def test_buckets_of_one_repeated_count_are_one_bucket():
    counts = counts_with(60)  # equal-size cuts at 20 and 40 fall inside the 60 ones
    groups = frequency_groups(counts, 5)
    assert sorted(np.concatenate(groups).tolist()) == list(range(100))
    assert [len(g) for g in groups] == [60, 20, 20]
    assert labels(counts) == ["1", "2-21", "22-41"]
    assert labels(counts_with(50)) == ["1", "1-11", "12-31", "32-51"]  # 40 ones, then 10 more


def test_buckets_without_ties_are_equal_size():
    assert [len(g) for g in frequency_groups(np.arange(12, 0, -1), 3)] == [4, 4, 4]
    assert labels(counts_with(0)) == ["2-21", "22-41", "42-61", "62-81", "82-101"]
    assert frequency_groups(np.array([]), 3) == []


def test_diagnose_labels_its_buckets_the_same_way():
    counts = np.r_[0, counts_with(60)]
    diagnosed = diagnose_buckets(np.zeros(101), np.arange(101), counts)
    assert [b.label for b in diagnosed] == ["never seen", "1", "2-21", "22-41"]
