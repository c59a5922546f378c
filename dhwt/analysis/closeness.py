"""How close pairs of symbols sit in an embedding matrix, over the snapshots of a run.

Three measures per pair (rows a, b of one matrix):
- raw Euclidean distance ||a - b||, as the paper's code records it;
- normalised distance: the raw distance divided by a per-snapshot baseline, the mean distance
  over `baseline_pairs` (weight decay shrinks every row, so raw distances alone mislead; the
  baseline should fit the question: e.g. pairs of symbols from different classes, leaving out
  symbols that are never predicted, which drift far away in an output matrix);
- cosine similarity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dhwt.runs.snapshots import Snapshot
from dhwt.errors import DhwtError, brief

Pair = tuple[str, str]


@dataclass(frozen=True)
class Closeness:
    """Pair closeness of one matrix side ("input" or "output") over snapshots.

    Arrays are indexed [snapshot, member, pair].
    """

    side: str
    steps: np.ndarray  # (T,)
    seeds: tuple[int, ...]
    pairs: tuple[Pair, ...]
    raw: np.ndarray  # (T, S, P)
    normalised: np.ndarray  # (T, S, P)
    cosine: np.ndarray  # (T, S, P)


def pair_closeness(
    snapshots: Sequence[Snapshot],
    side: str,
    pairs: Sequence[Pair],
    baseline_pairs: Sequence[Pair],
) -> Closeness:
    """Raw, normalised and cosine closeness of `pairs` in the `side` matrix of every snapshot.

    Examples:
        >>> import numpy as np
        >>> from dhwt.runs.snapshots import Snapshot
        >>> def snapshot(step, rows):  # one tied member; rows of 0a, 0b, 1a
        ...     matrix = np.array([rows], dtype=np.float32)
        ...     return Snapshot(step, True, (1,), ("0a", "0b", "1a"), matrix, matrix)
        >>> snapshots = [snapshot(0, [[3, 0], [0, 4], [3, 10]]),
        ...              snapshot(10, [[3, 0], [6, 0], [3, 5]])]
        >>> close = pair_closeness(snapshots, "input", [("0a", "0b")], [("0a", "1a")])
        >>> close.raw.shape  # (snapshots, members, pairs)
        (2, 1, 1)
        >>> close.raw.ravel().tolist(), close.normalised.ravel().tolist()  # baseline 10, then 5
        ([5.0, 3.0], [0.5, 0.6])
        >>> close.cosine.ravel().tolist()
        [0.0, 1.0]
    """
    if side not in ("input", "output"):
        raise DhwtError(f"side must be 'input' or 'output', got {side!r}")
    if not snapshots:
        raise DhwtError("no snapshots to analyse")
    if not pairs or not baseline_pairs:
        raise DhwtError("pair_closeness needs at least one pair and one baseline pair")
    vocab = snapshots[0].vocab
    index = {token: i for i, token in enumerate(vocab)}
    for a, b in (*pairs, *baseline_pairs):
        if a == b:
            raise DhwtError(f"the pair {a}:{b} is one symbol twice; a pair is two symbols")
        for token in (a, b):
            if token not in index:
                raise DhwtError(f"symbol {token!r} is not in the vocabulary ({brief(vocab)})")
    rows = np.stack([getattr(s, side) for s in snapshots]).astype(np.float64)  # (T, S, V, d)

    def diff(pair_list: Sequence[Pair]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ia = [index[a] for a, _ in pair_list]
        ib = [index[b] for _, b in pair_list]
        return rows[:, :, ia], rows[:, :, ib], rows[:, :, ia] - rows[:, :, ib]

    a, b, d = diff(pairs)
    raw = np.linalg.norm(d, axis=-1)
    baseline = np.linalg.norm(diff(baseline_pairs)[2], axis=-1).mean(axis=-1, keepdims=True)
    norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    cosine = np.einsum("tspd,tspd->tsp", a, b) / np.where(norms > 0, norms, np.nan)
    return Closeness(
        side=side,
        steps=np.array([s.step for s in snapshots]),
        seeds=snapshots[0].seeds,
        pairs=tuple(tuple(p) for p in pairs),
        raw=raw,
        normalised=raw / baseline,
        cosine=cosine,
    )
