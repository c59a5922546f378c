"""The pieces of exact enumeration (padding, integer keys of string rows), and the limit that
keeps it affordable.

Every language here has finite support, so its ground truth is computed exactly by listing every
symbol-level string with its probability (dhwt.languages.language.symbol_strings). The work of the semantic-equivalence check grows like
the number of (context, position) pairs, bounded by the sum over symbol strings of length^2;
specs above MAX_WORK are refused before anything is enumerated.
"""

from __future__ import annotations

import numpy as np

from dhwt.errors import DhwtError

#: Largest sum over symbol strings of length^2 (context positions to check) that is enumerated.
#: EXor with N bits and the paper's 2+2 variants needs 4^N (N+1)^2: N=9 (26M) fits, N=10 does not.
MAX_WORK = 50_000_000

#: Pad value in integer string arrays (class ids or symbol ids) past the end of a string.
PAD = -1


def check_size(n_symbol_strings: int, work: int) -> None:
    """Refuse a spec whose exact enumeration would blow up (counts are exact Python ints)."""
    if work > MAX_WORK:
        raise DhwtError(
            f"exact ground truth would enumerate {n_symbol_strings:,} symbol strings "
            f"({work:,} context positions to check); the limit is {MAX_WORK:,}: use fewer or "
            "shorter strings, or fewer variants"
        )


def group_arange(counts: np.ndarray) -> np.ndarray:
    """For groups of the given sizes laid end to end: each element's index within its group."""
    starts = np.cumsum(counts) - counts
    return np.arange(int(counts.sum())) - np.repeat(starts, counts)


def row_keys(rows: np.ndarray, n_ids: int) -> np.ndarray:
    """One sortable key per row of an array of ids in [0, n_ids) or PAD, so rows can be
    deduplicated with np.unique and looked up with np.searchsorted; equal keys mean equal rows.
    Rows are read as numbers in base n_ids + 1 when that fits in int64 (fast to sort and
    search), else as their bytes (big-endian uint16, compared like strings). Keys are only
    comparable between calls with the same n_ids and row width."""
    shifted = rows.astype(np.int64) + 1  # PAD (-1) -> 0
    weights = key_weights(rows.shape[1], n_ids)
    if weights is not None:
        return shifted @ weights
    if n_ids >= 0xFFFF:
        raise ValueError("row_keys takes fewer than 65535 ids")
    coded = np.ascontiguousarray(shifted.astype(">u2"))
    return coded.view(np.dtype((np.void, 2 * rows.shape[1]))).ravel()


def key_weights(width: int, n_ids: int) -> np.ndarray | None:
    """Place values of the integer keys of row_keys (id + 1 at position j counts
    weights[j] times), or None when rows that wide are keyed by their bytes instead."""
    base = n_ids + 1
    if base**width >= 2**63:
        return None
    return base ** np.arange(width - 1, -1, -1, dtype=np.int64)
