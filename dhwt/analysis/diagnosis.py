"""The DH diagnostic of one untied model: its input against its output embedding matrix.

For every token (or a seeded sample of query tokens when the vocabulary is large), its exact k
nearest neighbours among all tokens in the input space and in the output space, and their KNN
match; the chance level of the same measure on norm-matched random stand-ins, estimated from a
sample of queries (its interval says how well); linear CKA and the orthogonal Procrustes error
of the two spaces (CKA from float32 Gram products of centred rows, within the bound that
dhwt.analysis.similarity.whole_space states; the Procrustes error evaluated on the rows, 0 for a
copy); the mean match by token-frequency bucket when
counts are given.

Why the chance level is sampled even when the match is exact: it is a baseline, and an estimate
with its interval costs a fraction of a second where the exact one would double the time. The
sampled queries are searched in batches, each in a stand-in of its own drawn as its queries see
it (_chance_neighbours): the same law for each query's neighbours at a fraction of the draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dhwt.analysis.knn import (BLOCK, Neighbours, choose_k, match_neighbours, nearest_neighbours,
                               norm_matched_random, query_stand_in, row_squares)
from dhwt.analysis.frequency import check_counts, count_span, frequency_groups
from dhwt.analysis.knn.sample import Estimate, mean_estimate, sample_queries, sampled_neighbours
from dhwt.analysis.similarity import copy_residue, whole_space
from dhwt.config.schedule import TieHistory, TieSchedule, last_tie, tie_history
from dhwt.defaults import CHANCE_QUERIES
from dhwt.errors import DhwtError

if TYPE_CHECKING:
    from dhwt.runs.snapshots import Snapshot

#: float32 candidates beyond k for the stand-ins: random directions in wide spaces score within
#: the float32 bound of each other, so with the usual 4 some rows fail the certificate and are
#: searched again in float64 (52 of 512 queries of a 131,072 x 4,096 stand-in; none with 32).
CHANCE_SLACK = 32
#: Chance queries per stand-in of their own when they are a sample (_chance_neighbours): its
#: width is this + 1. 128: 512 chance queries of a 50,257 x 768 pair took 1.3x less time than
#: with 64 or 256, 1.9x less than with 32 (loaded Xeon, alternating).
CHANCE_BATCH = 128
#: Rows of the whole-space measures (CKA, Procrustes) in sampled mode: at least this, and 4 d.
WHOLE_ROWS = 8192
#: Frequency buckets of the tokens seen (equal-size groups by count), beside a never-seen one.
BUCKETS = 5


@dataclass(frozen=True)
class Bucket:
    """Query tokens of one frequency group: the least and most counts among them (never seen:
    low = high = 0) and their mean overlap."""

    label: str
    low: float
    high: float
    overlap: Estimate


@dataclass(frozen=True)
class Diagnosis:
    """Input vs output neighbourhoods of one model (see the module doc).

    tokens: the query token ids (all tokens in exact mode); overlap_per_token: |N_in ∩ N_out| / k
    of each query; input / output: the queries' neighbours in each space; whole_rows: how many
    rows CKA and Procrustes used; counts: the queries' token counts when counts were given;
    procrustes: nan when the two widths differ (an orthogonal map needs one width; the KNN
    match and CKA need none)."""

    k: int
    k_note: str
    metric: str
    n_tokens: int
    tokens: np.ndarray
    overlap_per_token: np.ndarray
    jaccard: float
    overlap: Estimate
    chance: Estimate | None
    cka: float
    procrustes: float
    whole_rows: int
    input: Neighbours
    output: Neighbours
    buckets: tuple[Bucket, ...] = ()
    counts: np.ndarray | None = None

    @property
    def sampled(self) -> bool:
        return len(self.tokens) < self.n_tokens


@dataclass(frozen=True)
class Subject:
    """One model diagnosed. diagnosis None: tied (tied_because says how it was recognised;
    tied_since: the step of a run member's last tie switch, None when tied from the start).
    history: how an untied run member came to be untied (None for a checkpoint: not known);
    residue: the copy residue of its two matrices (dhwt.analysis.similarity.copy_residue; None
    where their widths differ)."""

    name: str
    diagnosis: Diagnosis | None
    history: TieHistory | None = None
    residue: float | None = None
    tied_because: str | None = None
    tied_since: int | None = None


def diagnose(e_in: np.ndarray, e_out: np.ndarray, *, k: int | None = None, metric: str = "ip",
             queries: int | None = None, chance_queries: int = CHANCE_QUERIES, seed: int = 0,
             counts: np.ndarray | None = None, progress: bool | None = False,
             device: str = "cpu") -> Diagnosis:
    """Diagnose the pair (e_in, e_out), (V, d_in) and (V, d_out) over the same tokens.

    queries: None for every token (exact), else that many seeded query tokens; chance_queries:
    queries of the chance estimate (0: none); counts: (V,) token counts for frequency buckets;
    device: where the neighbour search runs ("cpu": the symmetric engine of dhwt.analysis.knn
    for all tokens; a GPU: every query against all rows there).

    Examples:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> e = rng.standard_normal((200, 16))
        >>> same = diagnose(e, 3 * e, k=5)          # one space, scaled: every neighbour shared
        >>> same.overlap.mean, round(same.cka, 6)
        (1.0, 1.0)
        >>> apart = diagnose(e, rng.standard_normal((200, 16)), k=5)  # independent: chance
        >>> round(apart.overlap.mean, 3), round(apart.chance.mean, 3)
        (0.028, 0.032)
    """
    if e_in.shape[0] != e_out.shape[0]:
        raise DhwtError(f"the input matrix has {e_in.shape[0]} rows and the output matrix "
                        f"{e_out.shape[0]}; they must hold the same tokens")
    n = e_in.shape[0]
    k, k_note = choose_k(k, n)
    if (queries is None or queries >= n) and device == "cpu":
        ids = np.arange(n)
        near_in = nearest_neighbours(e_in, k, metric, progress=progress, name="input")
        near_out = nearest_neighbours(e_out, k, metric, progress=progress, name="output")
    else:
        ids = sample_queries(n, n if queries is None else queries, seed)
        near_in, near_out = (sampled_neighbours(e, ids, k, metric, progress=progress, name=side,
                                                device=device)
                             for e, side in ((e_in, "input"), (e_out, "output")))
    match = match_neighbours(near_in, near_out, tokens=ids)
    squares = [row_squares(e) for e in (e_in, e_out)]
    chance = None
    if chance_queries:
        chance = _chance(e_in, e_out, squares, k, metric, chance_queries, seed, progress, device)
    rows = (np.arange(n) if len(ids) == n else
            sample_queries(n, max(WHOLE_ROWS, 4 * max(e_in.shape[1], e_out.shape[1])), seed + 2))
    square = e_in.shape[1] == e_out.shape[1]
    whole = (whole_space(e_in[rows], e_out[rows], align=square, float32=True) if len(rows) < n
             else whole_space(e_in, e_out, align=square, float32=True))
    return Diagnosis(
        k=k, k_note=k_note, metric=metric, n_tokens=n, tokens=ids,
        overlap_per_token=match.overlap, jaccard=match.mean_jaccard,
        overlap=mean_estimate(match.overlap, n), chance=chance, cka=whole.cka,
        procrustes=whole.procrustes.error if square else float("nan"),
        whole_rows=len(rows), input=near_in, output=near_out,
        buckets=() if counts is None else overlap_buckets(match.overlap, ids, counts),
        counts=None if counts is None else np.asarray(counts)[ids],
    )


def _chance(e_in: np.ndarray, e_out: np.ndarray, squares: list[np.ndarray], k: int,
            metric: str, queries: int, seed: int, progress: bool | None, device: str) -> Estimate:
    """The KNN match of norm-matched random stand-ins, estimated from `queries` query tokens
    (_chance_neighbours; squares: the rows' squared norms in each space)."""
    n = e_in.shape[0]
    generator = np.random.default_rng([seed, 1])
    ids = sample_queries(n, queries, seed + 1)
    near = [_chance_neighbours(e, np.sqrt(sq), ids, k, metric, generator, progress,
                               f"chance {side}", device)
            for e, sq, side in ((e_in, squares[0], "input"), (e_out, squares[1], "output"))]
    return mean_estimate(match_neighbours(*near, tokens=ids).overlap, n)


def _chance_neighbours(e: np.ndarray, norms: np.ndarray, ids: np.ndarray, k: int, metric: str,
                       generator: np.random.Generator, progress: bool | None, name: str,
                       device: str) -> Neighbours:
    """The exact neighbours of the query rows `ids` in a norm-matched random stand-in of e (row
    norms `norms`). All rows queried, or e at most CHANCE_BATCH + 1 wide: one stand-in
    (norm_matched_random). Else every CHANCE_BATCH queries in a stand-in of their own as they
    see it (query_stand_in, CHANCE_BATCH + 1 wide): each query's neighbours have the same law
    as in one stand-in for all, the batches are independent, and the cost falls from n d normal
    draws and a q n d product (q queries) to n q draws and a q n (CHANCE_BATCH + 1) product, in
    blocks of as many entries as a block of the full search (few calls: each has a cost of its
    own)."""
    settings = dict(slack=CHANCE_SLACK, progress=progress, name=name, device=device)
    n, d = e.shape
    if len(ids) == n or d <= CHANCE_BATCH + 1:
        return sampled_neighbours(norm_matched_random(e, generator), ids, k, metric, **settings)
    batches = [sampled_neighbours(query_stand_in(norms, d, batch, generator), batch, k, metric,
                                  block_size=BLOCK * BLOCK // CHANCE_BATCH, **settings)
               for batch in np.split(ids, range(CHANCE_BATCH, len(ids), CHANCE_BATCH))]
    return Neighbours(metric, np.concatenate([b.indices for b in batches]),
                      np.concatenate([b.scores for b in batches]))


def overlap_buckets(overlap: np.ndarray, tokens: np.ndarray,
                      counts: np.ndarray) -> tuple[Bucket, ...]:
    """Mean overlap of the query tokens never seen, and of the seen ones in BUCKETS equal-size
    groups by count (dhwt.analysis.frequency): an estimate over the queries in each, out of the
    tokens it stands for (all tokens seen, shared in proportion when the queries are a sample).

    Examples:
        >>> import numpy as np
        >>> counts = np.array([0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
        >>> buckets = overlap_buckets(np.linspace(0, 1, 12), np.arange(12), counts)
        >>> [b.label for b in buckets], round(buckets[0].overlap.mean, 3)
        (['never seen', '1-2', '3-4', '5-6', '7-8', '9-10'], 0.045)
    """
    counts = check_counts(counts, "token counts")
    seen = counts[tokens] > 0
    buckets = []
    if (~seen).any():
        buckets.append(Bucket("never seen", 0.0, 0.0,
                              mean_estimate(overlap[~seen], int((counts == 0).sum()))))
    seen_counts, seen_overlap = counts[tokens][seen], overlap[seen]
    share = int((counts > 0).sum()) / max(int(seen.sum()), 1)
    for group in frequency_groups(seen_counts, BUCKETS):
        low, high = float(seen_counts[group].min()), float(seen_counts[group].max())
        population = max(len(group), round(len(group) * share))
        buckets.append(Bucket(count_span(low, high), low, high,
                              mean_estimate(seen_overlap[group], population)))
    return tuple(buckets)


def member_subjects(snap: Snapshot, schedule: TieSchedule, *, counts: np.ndarray | None = None,
                    **settings: object) -> tuple[Subject, ...]:
    """One subject per ensemble member of a run's snapshot `snap`, with its tie history under
    `schedule`: a member tied there is said to be tied and not measured (its input and output
    are one matrix); settings: diagnose's keywords."""
    history = tie_history(schedule, snap.step)
    subjects = []
    for m, seed in enumerate(snap.seeds):
        name = f"seed {seed}"
        if history is None:
            since = last_tie(schedule, snap.step)
            subjects.append(Subject(name, None, tied_since=since, tied_because=(
                f"the tie schedule {str(schedule)!r} " + (
                    "ties it from the start" if since is None else f"tied it at step {since}"))))
            continue
        e_in, e_out = snap.input[m], snap.output[m]
        subjects.append(Subject(name, diagnose(e_in, e_out, counts=counts, **settings), history,
                                residue=copy_residue(e_in, e_out)))
    return tuple(subjects)


def checkpoint_subject(name: str, e_in: np.ndarray, e_out: np.ndarray | None, *,
                       tied_because: str | None = None, counts: np.ndarray | None = None,
                       **settings: object) -> Subject:
    """The subject of a checkpoint's input and output matrices (e_out None: tied, as
    tied_because says); settings: diagnose's keywords."""
    if e_out is None:
        return Subject(name, None, tied_because=tied_because)
    residue = copy_residue(e_in, e_out) if e_in.shape == e_out.shape else None
    return Subject(name, diagnose(e_in, e_out, counts=counts, **settings), residue=residue)
