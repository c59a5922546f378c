"""Frequency buckets: tokens sorted by count and cut into groups of equal size, rarest first,
the one grouping of every "by frequency" table (`dhwt corpus-dh`, `dhwt diagnose`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dhwt.errors import DhwtError


def check_counts(counts: object, where: str) -> np.ndarray:
    """Token counts as a float64 vector, or DhwtError: one finite, non-negative number per
    token (the one check of every command that takes counts).

    Examples:
        >>> check_counts([3, 0, 1], "counts.npy").tolist()
        [3.0, 0.0, 1.0]
        >>> check_counts([3, -1], "counts.npy")
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: counts.npy: token counts must be one finite, non-negative ...
    """
    values = np.asarray(counts, np.float64)
    if values.ndim != 1 or not np.isfinite(values).all() or (values < 0).any():
        raise DhwtError(f"{where}: token counts must be one finite, non-negative number per "
                        "token")
    return values


def frequency_groups(counts: np.ndarray, buckets: int) -> list[np.ndarray]:
    """Positions into counts, sorted by count (ties by position) and cut into `buckets` groups
    of equal size (np.array_split, rarest first; fewer groups when there are fewer tokens, none
    when there are none). A group of tokens of one count joins the group before when that holds
    the same one count (a count held by many tokens is one group, not several that read the
    same, e.g. "1" and "1").

    Examples:
        >>> [g.tolist() for g in frequency_groups(np.array([5, 1, 9, 3]), 2)]
        [[1, 3], [0, 2]]
        >>> [g.tolist() for g in frequency_groups(np.array([1, 1, 1, 1, 1, 2, 7, 8]), 4)]
        [[0, 1, 2, 3], [4, 5], [6, 7]]
        >>> frequency_groups(np.array([]), 2)
        []
    """
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1:
        raise DhwtError(f"buckets must be an integer >= 1, got {buckets!r}")
    order = np.argsort(counts, kind="stable")
    groups: list[np.ndarray] = []
    for group in np.array_split(order, min(buckets, len(order))) if len(order) else []:
        values = np.unique(counts[group])
        if groups and len(values) == 1 and set(counts[groups[-1]]) == {values[0]}:
            groups[-1] = np.concatenate([groups[-1], group])
        else:
            groups.append(group)
    return groups


def count_span(low: float, high: float, text=lambda count: f"{count:,.0f}") -> str:
    """A group's count range as a label: '1' for one count, '2-5' for several; `text` writes
    one count.

    Examples:
        >>> count_span(1, 1), count_span(2, 1500)
        ('1', '2-1,500')
    """
    return text(low) if low == high else f"{text(low)}-{text(high)}"


def frequency_buckets(counts: np.ndarray, values: Sequence[np.ndarray],
                      buckets: int) -> list[dict]:
    """Tokens sorted by count (ties by position) and cut into `buckets` groups of equal size
    (frequency_groups, rarest first): per group its count range, size and the mean of each of
    `values` (per-token arrays aligned with counts).

    Examples:
        >>> frequency_buckets(np.array([5, 1, 9, 3]), [np.array([1.0, 0.0, 1.0, 0.5])], 2)
        [{'bucket': 1, 'tokens': 2, 'count_min': 1.0, 'count_max': 3.0, 'means': [0.25]},
         {'bucket': 2, 'tokens': 2, 'count_min': 5.0, 'count_max': 9.0, 'means': [1.0]}]
    """
    out = []
    for i, group in enumerate(frequency_groups(counts, buckets)):
        out.append({"bucket": i + 1, "tokens": len(group),
                    "count_min": float(counts[group].min()),
                    "count_max": float(counts[group].max()),
                    "means": [float(v[group].mean()) for v in values]})
    return out
