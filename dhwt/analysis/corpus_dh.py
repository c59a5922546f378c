"""A model-free estimate of the distributional hypothesis (DH) from counts (issue #18).

No model is trained: the counts N(c, y) of (context c = the previous n tokens, next token y)
define two profiles of every token a, and DH asks whether tokens that act alike as input also
are predicted alike:
- input side (a as the last token of a context): I_a[(u, y)] = p(y | u a), u the n - 1 tokens
  before it (order 1: the next-token distribution p(. | a), "what follows a");
- output side (a as the predicted token): O_a[c] = p(a | c) over the contexts c.

Exact relations at order n (from the definitions of DESIGN.md, read on the order-n contexts):
- a ~cnd b iff O_a = O_b, i.e. N(c, a) = N(c, b) for every context c;
- a ~sem b iff every context holding a at some position j, with that a replaced by b, occurs
  too and predicts the same next-token distribution (and the same with a and b exchanged).
The swap is made at every position of the window, not only the last, because that is the
definition: with order >= the longest string every context is a whole prefix, and the
relations equal the causal ground truth of dhwt.languages.truth. The last position alone (the
profile I_a) can miss a difference that shows later: after `x a` and `x b` the same symbol may
follow while `x a c` and `x b c` are followed by different ones (semantic_distance's example).

A distance measures how far a pair is from each relation, 0 exactly when it holds:
- cnd: the relative L1 distance of the output count columns,
  sum_c |N(c, a) - N(c, b)| / (N(a) + N(b)) in [0, 1];
- sem: the mean total variation between p(. | c) and p(. | c swapped) over every occurrence of a
  or b, weighted by N(c), a missing swapped context counting as 1.
Means, not maxima: with exact counts both are 0 on the same pairs, but on sampled counts a
maximum is ruled by the rarest context's noise. A pair is predicted in a relation when its
distance is at most a tolerance.

Neighbourhoods (Levy, Goldberg & Dagan 2015, "Improving distributional similarity with lessons
learned from word embeddings"): raw count profiles are dominated by frequent tokens, so both
sides are weighted by positive PMI with context-distribution smoothing (the feature marginal
raised to 0.75, which keeps rare features from getting huge PMI), then reduced by truncated SVD
to U_d S_d^(1/2) (the symmetric split of the singular values they recommend over U_d S_d), and
compared by exact cosine k-NN (dhwt.analysis.knn). At order 1 both sides come from the one
bigram matrix B[a, y] = N(a, y): input vectors are its PPMI rows, output vectors its PPMI
columns.

Two null levels of the KNN match (frequency_null has the details):
- chance: norm-matched random directions (under cosine, random neighbour lists, about
  k / (tokens - 1)). It destroys every structure of both spaces, so any shared structure beats it.
- frequency-matched: the output space relabelled by a permutation of the tokens within
  frequency bins. Both spaces keep their geometry, and each token keeps the frequency of its
  output neighbours; what is lost is which token of a bin is which. Frequency alone makes
  neighbourhoods agree (frequent tokens neighbour frequent tokens in both spaces, rare tokens
  have near-empty profiles), and this null keeps that share: the overlap above it is
  agreement of the tokens themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.sparse.linalg import svds
from tqdm import tqdm

from dhwt.analysis.frequency import frequency_groups
from dhwt.analysis.knn import (KnnMatch, Neighbours, chance_baseline, choose_k,
                               match_neighbours, nearest_neighbours)
from dhwt.defaults import NULL_BINS, PERMUTATIONS
from dhwt.errors import DhwtError

BOS = "[BOS]"
#: Context-distribution smoothing of PPMI (Levy, Goldberg & Dagan 2015).
ALPHA = 0.75
#: Matrices with at most this many entries are decomposed densely (exact, deterministic).
DENSE_ENTRIES = 20_000_000
#: Tokens of a stream counted per step of the progress bar.
CHUNK = 1 << 20


@dataclass(frozen=True, eq=False)
class Counts:
    """N(c, y): vocab holds the token names, the last one BOS (padding before a sequence
    starts, never predicted); contexts (n_ctx, order) the token ids of each distinct context,
    sorted by keys (n_ctx,), their numbers in base len(vocab); joint (n_ctx, len(vocab)) CSR
    float64 counts (weights: probabilities for exact expected counts)."""

    vocab: tuple[str, ...]
    order: int
    contexts: np.ndarray
    keys: np.ndarray
    joint: sparse.csr_matrix

    @property
    def bos(self) -> int:
        return len(self.vocab) - 1

    @property
    def place_values(self) -> np.ndarray:
        """(order,) what a token id at each context position adds to the key."""
        return len(self.vocab) ** np.arange(self.order - 1, -1, -1, dtype=np.int64)

    @property
    def token_counts(self) -> np.ndarray:
        """(len(vocab),) how often each token is predicted (its frequency)."""
        return np.asarray(self.joint.sum(axis=0)).ravel()


def check_order(order: object, n_ids: int) -> int:
    """`order` if it is an integer >= 1 for which (context, next token) pairs of n_ids token
    ids (BOS included) fit one int64 key, else DhwtError.

    Examples:
        >>> check_order(3, 50_258)
        3
        >>> check_order(4, 50_258)
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: order 4 is too high for 50,258 token ids: ...
    """
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 1:
        raise DhwtError(f"order must be an integer >= 1, got {order!r}")
    if n_ids ** (int(order) + 1) >= 2**63:
        raise DhwtError(f"order {order} is too high for {n_ids:,} token ids: a context and its "
                        f"next token must fit a 64-bit key; use a lower order")
    return int(order)


def count_strings(rows: np.ndarray, weights: np.ndarray, names: Sequence[str],
                  order: int) -> Counts:
    """Counts of every position of every string: rows (n, L) token ids with -1 past the end,
    weights (n,) per string (probabilities for expected counts, multiplicities for a sample);
    names: the token names, the last one the end token each string ends with. Each string is
    padded with `order` BOS tokens in front; position t (t = 0..length) has context the `order`
    tokens before it and target token t, or the end token at t = length.

    Examples:
        >>> import numpy as np
        >>> rows = np.array([[0, 1], [1, -1]])  # "a b" and "b", each with probability 1/2
        >>> counts = count_strings(rows, np.array([0.5, 0.5]), ("a", "b", "END"), 1)
        >>> [counts.vocab[c] for c in counts.contexts[:, 0]]
        ['a', 'b', '[BOS]']
        >>> counts.joint.toarray()  # rows: contexts a, b, BOS; columns: a, b, END, BOS
        array([[0. , 0.5, 0. , 0. ],
               [0. , 0. , 1. , 0. ],
               [0.5, 0.5, 0. , 0. ]])
    """
    vocab = (*names, BOS)
    order = check_order(order, len(vocab))
    rows = np.asarray(rows, np.int64)
    n, width = rows.shape
    length = (rows >= 0).sum(axis=1)
    padded = np.concatenate([np.full((n, order), len(vocab) - 1), np.maximum(rows, 0),
                             np.zeros((n, 1), np.int64)], axis=1)
    place = len(vocab) ** np.arange(order - 1, -1, -1, dtype=np.int64)
    keys, weight = [], []
    for t in range(width + 1):
        live = t <= length
        context = padded[live, t:t + order] @ place
        target = np.where(t < length[live], padded[live, t + order], len(names) - 1)
        keys.append(context * len(vocab) + target)
        weight.append(np.asarray(weights, np.float64)[live])
    return _from_pair_keys(np.concatenate(keys), np.concatenate(weight), vocab, order)


def count_stream(ids: np.ndarray, names: Sequence[str], order: int, *,
                 progress: bool | None = None) -> Counts:
    """Counts of one token stream (a corpus' train split read as one sequence, as a model
    trained on windows starting anywhere sees it): every token is predicted from the `order`
    tokens before it, BOS standing in before the stream starts. A progress bar (quiet when not
    on a terminal, off with progress=False) counts tokens.

    Examples:
        >>> import numpy as np
        >>> counts = count_stream(np.array([0, 1, 0, 1, 1]), ("a", "b"), 1)
        >>> counts.joint.toarray()  # contexts a, b, BOS; columns a, b, BOS
        array([[0., 2., 0.],
               [1., 1., 0.],
               [1., 0., 0.]])
    """
    vocab = (*names, BOS)
    order = check_order(order, len(vocab))
    ids = np.asarray(ids)
    if len(ids) == 0:
        raise DhwtError("the token stream is empty: nothing to count")
    base = len(vocab)
    place = base ** np.arange(order - 1, -1, -1, dtype=np.int64)
    head = np.full(order, base - 1, np.int64)
    keys, counts = [], []
    with tqdm(total=len(ids), desc="counting", unit="tok", unit_scale=True,
              disable=None if progress is None else not progress) as bar:
        for start in range(0, len(ids), CHUNK):
            stop = min(start + CHUNK, len(ids))
            before = np.asarray(ids[max(start - order, 0):start], np.int64)
            window = np.concatenate([head[:order - len(before)], before,
                                     np.asarray(ids[start:stop], np.int64)])
            context = sum(window[j:j + stop - start] * place[j] for j in range(order))
            unique, count = np.unique(context * base + window[order:], return_counts=True)
            keys.append(unique)
            counts.append(count)
            bar.update(stop - start)
    return _from_pair_keys(np.concatenate(keys), np.concatenate(counts).astype(np.float64),
                           vocab, order)


def _from_pair_keys(pair_keys: np.ndarray, weights: np.ndarray, vocab: tuple[str, ...],
                    order: int) -> Counts:
    """Counts from (context key * len(vocab) + target) keys and their weights (summed)."""
    unique, inverse = np.unique(pair_keys, return_inverse=True)
    summed = np.bincount(inverse, weights=weights)
    unique, summed = unique[summed > 0], summed[summed > 0]  # strings never drawn
    base = len(vocab)
    keys, row = np.unique(unique // base, return_inverse=True)
    joint = sparse.csr_matrix((summed, (row, unique % base)), shape=(len(keys), base))
    contexts = (keys[:, None] // base ** np.arange(order - 1, -1, -1, dtype=np.int64)) % base
    return Counts(vocab, order, contexts, keys, joint)


def sample_weights(probs: np.ndarray, samples: int, seed: int) -> np.ndarray:
    """(n,) how many of `samples` strings drawn independently with probabilities `probs`
    (numpy's default_rng(seed)) are string i.

    Examples:
        >>> w = sample_weights(np.array([0.25, 0.75]), 1000, seed=0)
        >>> int(w.sum()), bool(200 < w[0] < 300)
        (1000, True)
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise DhwtError(f"samples must be an integer >= 1, got {samples!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise DhwtError(f"seed must be a non-negative integer, got {seed!r}")
    drawn = np.random.default_rng(seed).choice(len(probs), size=samples, p=probs / probs.sum())
    return np.bincount(drawn, minlength=len(probs)).astype(np.float64)


# --- profiles ------------------------------------------------------------------------------------

def input_matrix(counts: Counts) -> sparse.csr_matrix:
    """(V, F) N(u a, y): row a = the last token of the context, columns the (u, y) that occur
    (u the order - 1 tokens before a, y the next token), in order of their keys. Row a over
    its sum is the input profile I_a. At order 1 the columns are the next tokens that occur.

    Examples:
        >>> counts = count_stream(np.array([0, 1, 0, 1, 1]), ("a", "b"), 1)
        >>> input_matrix(counts).toarray()  # rows a, b, BOS; columns the next tokens a, b
        array([[0., 2.],
               [1., 1.],
               [1., 0.]])
    """
    joint = counts.joint.tocoo()
    base = len(counts.vocab)
    last = counts.contexts[joint.row, -1]
    before = counts.keys[joint.row] // base  # u: the context without its last token
    columns, column = np.unique(before * base + joint.col, return_inverse=True)
    return sparse.csr_matrix((joint.data, (last, column)), shape=(base, len(columns)))


def output_matrix(counts: Counts) -> sparse.csr_matrix:
    """(V, n_ctx) N(c, a): row a over the contexts; row a divided by N(c) is the output profile
    O_a[c] = p(a | c)."""
    return counts.joint.T.tocsr()


def conditionals(counts: Counts) -> np.ndarray:
    """(n_ctx, V) dense p(y | c) (for small vocabularies: grammars)."""
    joint = counts.joint.toarray()
    return joint / joint.sum(axis=1, keepdims=True)


# --- relations -----------------------------------------------------------------------------------

def semantic_distance(counts: Counts, tokens: Sequence[int],
                      positions: Sequence[int] | None = None) -> np.ndarray:
    """(m, m) distance of the pairs of `tokens` from semantic equivalence (module doc): the
    N(c)-weighted mean total variation between p(. | c) and p(. | c with a swapped for b) over
    every occurrence of a (and of b, swapped for a) at the context positions `positions`
    (default all; [order - 1]: the last, which compares input profiles only), a swapped context
    that never occurs counting 1. 0 where both never occur there.

    Examples:
        >>> rows = np.array([[0, 2, 3], [1, 2, 4]])  # "a c E1", "b c E2": after a and after b
        >>> counts = count_strings(rows, np.array([0.5, 0.5]),  # comes c, but after "a c" and
        ...                        ("a", "b", "c", "E1", "E2", "END"), 3)  # "b c" it differs
        >>> round(float(semantic_distance(counts, [0, 1])[0, 1]), 4)  # 2 of a's 3 contexts differ
        0.6667
        >>> float(semantic_distance(counts, [0, 1], positions=[2])[0, 1])  # not the last position
        0.0
    """
    cond = conditionals(counts)
    mass = np.asarray(counts.joint.sum(axis=1)).ravel()
    tokens = np.asarray(tokens, np.int64)
    index = np.full(len(counts.vocab), -1)
    index[tokens] = np.arange(len(tokens))
    place = counts.place_values
    num, den = np.zeros((2, len(tokens), len(tokens)))
    for j in range(counts.order) if positions is None else positions:
        held = counts.contexts[:, j]
        rows = np.flatnonzero(index[held] >= 0)
        a = index[held[rows]]
        for b, token in enumerate(tokens):
            query = counts.keys[rows] + (token - held[rows]) * place[j]
            at = np.minimum(np.searchsorted(counts.keys, query), len(counts.keys) - 1)
            found = counts.keys[at] == query
            tv = np.where(found, 0.5 * np.abs(cond[rows] - cond[at]).sum(axis=1), 1.0)
            np.add.at(num[:, b], a, mass[rows] * tv)
            np.add.at(den[:, b], a, mass[rows])
    num, den = num + num.T, den + den.T
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def conditional_distance(counts: Counts, tokens: Sequence[int]) -> np.ndarray:
    """(m, m) distance of the pairs of `tokens` from conditional equivalence: the relative L1
    distance sum_c |N(c, a) - N(c, b)| / (N(a) + N(b)) of their output count columns (0 where
    both are never predicted).

    Examples:
        >>> counts = count_stream(np.array([0, 1, 0, 1, 1]), ("a", "b"), 1)
        >>> conditional_distance(counts, [0, 1]).round(3).tolist()  # a: after b, BOS; b: a, a, b
        [[0.0, 0.6], [0.6, 0.0]]
    """
    columns = counts.joint[:, list(tokens)].toarray()
    diff = np.abs(columns[:, :, None] - columns[:, None, :]).sum(axis=0)
    total = columns.sum(axis=0)
    total = total[:, None] + total[None, :]
    return np.divide(diff, total, out=np.zeros_like(diff), where=total > 0)


def dh_violation(sem: np.ndarray, cnd: np.ndarray) -> tuple[float, int, int]:
    """(share, pairs in exactly one relation, pairs in either) over the unordered pairs of two
    (m, m) bool relations: the share is 1 - Jaccard of the two pair sets (0 when no pair is in
    either: nothing violates DH).

    Examples:
        >>> sem = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1]], bool)
        >>> cnd = np.eye(3, dtype=bool)
        >>> dh_violation(sem, cnd)  # the one sem pair is not cnd
        (1.0, 1, 1)
    """
    upper = np.triu(np.ones(sem.shape, bool), 1)
    either = int((upper & (sem | cnd)).sum())
    one = int((upper & (sem != cnd)).sum())
    return (one / either if either else 0.0), one, either


def relation_violations(sem: np.ndarray, cnd: np.ndarray, tolerance: float, top: int,
                        among: np.ndarray | None = None) -> list[tuple[int, int, str, float]]:
    """The `top` unordered pairs of two (m, m) relation distances (semantic_distance,
    conditional_distance) that violate DH as estimated at `tolerance`: in one relation (distance
    <= tolerance) and not in the other, both indices allowed by `among` ((m,) bool, default
    all). Ranked by the departure, the distance from the relation the pair misses (largest
    first; ties: lower indices first): (i, j, the relation it is in, departure).

    Examples:
        >>> sem = np.array([[0, 0, .4], [0, 0, .5], [.4, .5, 0]])
        >>> cnd = np.array([[0, .3, 0], [.3, 0, .2], [0, .2, 0]])
        >>> relation_violations(sem, cnd, 1e-9, 5)  # 0~1 sem not cnd, 0~2 cnd not sem
        [(0, 2, 'cnd', 0.4), (0, 1, 'sem', 0.3)]
    """
    i, j = np.triu_indices(len(sem), 1)
    if among is not None:
        keep = among[i] & among[j]
        i, j = i[keep], j[keep]
    in_sem, in_cnd = sem[i, j] <= tolerance, cnd[i, j] <= tolerance
    one = np.flatnonzero(in_sem != in_cnd)
    departure = np.where(in_sem, cnd[i, j], sem[i, j])[one]
    order = one[np.lexsort((j[one], i[one], -departure))][:top]
    return [(int(i[t]), int(j[t]), "sem" if in_sem[t] else "cnd",
             float(cnd[i[t], j[t]] if in_sem[t] else sem[i[t], j[t]])) for t in order]


def precision_recall(predicted: np.ndarray, true: np.ndarray) -> tuple[float | None,
                                                                       float | None]:
    """(precision, recall) of the predicted unordered pairs of an (m, m) bool relation against
    the true ones; None where undefined (nothing predicted / nothing true).

    Examples:
        >>> true = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1]], bool)
        >>> precision_recall(np.ones((3, 3), bool), true)  # 3 pairs predicted, 1 of them true
        (0.3333333333333333, 1.0)
    """
    upper = np.triu(np.ones(true.shape, bool), 1)
    hit = int((upper & predicted & true).sum())
    said, real = int((upper & predicted).sum()), int((upper & true).sum())
    return (hit / said if said else None), (hit / real if real else None)


# --- neighbourhoods ------------------------------------------------------------------------------

def ppmi(matrix: sparse.spmatrix, alpha: float = ALPHA) -> sparse.csr_matrix:
    """Positive PMI of a count matrix, rows = tokens, columns = features, with
    context-distribution smoothing: max(0, log P(i, j) / (P(i) P_alpha(j))), P_alpha(j) =
    N(j)^alpha / sum N^alpha (module doc).

    Examples:
        >>> m = sparse.csr_matrix(np.array([[2.0, 0.0], [1.0, 1.0]]))
        >>> ppmi(m, alpha=1.0).toarray().round(4)  # log(0.5 / (0.5 * 0.75)) = log(4/3)
        array([[0.2877, 0.    ],
               [0.    , 0.6931]])
    """
    m = sparse.csr_matrix(matrix, dtype=np.float64, copy=True)
    m.eliminate_zeros()
    total = m.sum()
    row = np.asarray(m.sum(axis=1)).ravel() / total
    col = np.asarray(m.sum(axis=0)).ravel() ** alpha
    col /= col.sum()
    coo = m.tocoo()
    pmi = np.log(coo.data / total) - np.log(row[coo.row]) - np.log(col[coo.col])
    out = sparse.csr_matrix((np.maximum(pmi, 0.0), (coo.row, coo.col)), shape=m.shape)
    out.eliminate_zeros()
    return out


def embed(matrix: sparse.spmatrix, dim: int, seed: int = 0) -> np.ndarray:
    """(rows, d) U_d S_d^(1/2) of the truncated SVD of `matrix`. Dense and exact up to
    DENSE_ENTRIES entries, d = min(dim, rows, columns); else ARPACK (scipy svds, start vector
    from default_rng(seed)), which needs d = min(dim, rows - 1, columns - 1).

    Examples:
        >>> m = sparse.csr_matrix(np.diag([4.0, 1.0, 0.25]))
        >>> embed(m, 2).round(6).tolist()  # the two largest singular directions, scaled by sqrt
        [[2.0, 0.0], [0.0, 1.0], [0.0, 0.0]]
    """
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise DhwtError(f"dim must be an integer >= 1, got {dim!r}")
    if matrix.shape[0] * matrix.shape[1] <= DENSE_ENTRIES:
        u, s, _ = np.linalg.svd(matrix.toarray(), full_matrices=False)
        d = min(dim, len(s))
    else:
        d = min(dim, min(matrix.shape) - 1)
        u, s, _ = svds(sparse.csr_matrix(matrix, dtype=np.float64), k=d,
                       random_state=np.random.default_rng(seed))
        order = np.argsort(-s, kind="stable")
        u, s = u[:, order], s[order]
    return u[:, :d] * np.sqrt(s[:d])


@dataclass(frozen=True, eq=False)
class FrequencyNull:
    """The frequency-matched null of a KNN match (frequency_null).

    bins: the (K,) bin of each compared token (0 the rarest); expected: (K,) each token's exact
    expected overlap under the null; permuted: (P,) the mean overlap under each drawn
    permutation; seed: of the draws."""

    bins: np.ndarray
    expected: np.ndarray
    permuted: np.ndarray
    seed: int

    @property
    def mean_overlap(self) -> float:
        return float(self.expected.mean())

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """The central `level` range of the drawn permutations' mean overlaps."""
        low, high = np.quantile(self.permuted, [(1 - level) / 2, (1 + level) / 2])
        return float(low), float(high)

    def p_value(self, observed: float) -> float:
        """One-sided permutation p of a mean overlap at least `observed`: (1 + draws at or
        above it) / (1 + draws)."""
        return float((1 + (self.permuted >= observed - 1e-12).sum()) / (1 + len(self.permuted)))


def frequency_null(near_in: np.ndarray, near_out: np.ndarray, counts: np.ndarray, *,
                   bins: int = NULL_BINS, permutations: int = PERMUTATIONS,
                   seed: int = 0) -> FrequencyNull:
    """The KNN match of two neighbour lists (K, k) (indices into the K compared tokens, self
    excluded) when the output space's tokens are permuted within frequency bins.

    Bins: the K tokens sorted by `counts` (K,) (ties by position), cut into min(bins, K // 2)
    groups of equal size (dhwt.analysis.frequency.frequency_groups: at least 2 tokens each; a
    group of one count that repeats the group before merges into it, so there may be fewer). A
    within-bin permutation pi relabels the output space: token i gets the output vector of
    pi(i), so its output neighbours become pi^-1(N_out(pi(i))). Each space keeps its geometry
    and every output neighbourhood keeps its frequency make-up (a frequent token's output
    neighbours stay tokens of the same bins); only the identities within a bin are lost. The
    overlap that survives this is what frequency explains; the observed overlap above it is
    agreement of the tokens themselves.

    expected: exact, not sampled. For j != i, (pi(i), pi(j)) is uniform over the ordered pairs
    of distinct tokens of bin(i) x bin(j), so P(j in pi^-1(N_out(pi(i)))) =
    C[bin(i), bin(j)] / D[bin(i), bin(j)], C[b, c] the number of (a, its output neighbour)
    pairs with a in b and the neighbour in c, D[b, c] the number of those ordered pairs;
    token i's expected overlap is the mean of that over j in N_in(i). permuted: the mean
    overlap under each of `permutations` uniform within-bin permutations drawn by
    numpy's default_rng(seed) (the spread and a p-value).

    Examples:
        >>> near = np.array([[1], [0], [3], [2]])  # two pairs, same lists in both spaces
        >>> apart = frequency_null(near, near, np.array([1, 1, 2, 2]), bins=1)  # one bin
        >>> apart.expected.round(4).tolist()  # random lists: 1 of 3 others
        [0.3333, 0.3333, 0.3333, 0.3333]
        >>> kept = frequency_null(near, near, np.array([1, 1, 2, 2]), bins=2)  # bins = pairs
        >>> kept.expected.tolist()  # the pairs are the bins: frequency explains everything
        [1.0, 1.0, 1.0, 1.0]
    """
    near_in, near_out = np.asarray(near_in, np.int64), np.asarray(near_out, np.int64)
    n, k = near_in.shape
    if isinstance(permutations, bool) or not isinstance(permutations, int) or permutations < 1:
        raise DhwtError(f"permutations must be an integer >= 1, got {permutations!r}")
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise DhwtError(f"null bins must be an integer >= 1, got {bins!r}")
    groups = frequency_groups(np.asarray(counts), min(bins, max(n // 2, 1)))
    bin_of = np.empty(n, np.int64)
    for b, group in enumerate(groups):
        bin_of[group] = b
    m = len(groups)
    size = np.bincount(bin_of, minlength=m).astype(np.float64)
    pairs = np.zeros((m, m))
    np.add.at(pairs, (np.repeat(bin_of, k), bin_of[near_out].ravel()), 1.0)
    ordered = np.outer(size, size) - np.diag(size)
    chance = np.divide(pairs, ordered, out=np.zeros_like(pairs), where=ordered > 0)
    expected = chance[bin_of[:, None], bin_of[near_in]].mean(axis=1)
    generator = np.random.default_rng(seed)
    by_bin = np.lexsort((np.arange(n), bin_of))
    permuted = np.empty(permutations)
    for p in range(permutations):
        pi = np.empty(n, np.int64)
        pi[by_bin] = np.lexsort((generator.random(n), bin_of))
        inverse = np.empty(n, np.int64)
        inverse[pi] = np.arange(n)
        relabelled = inverse[near_out[pi]]
        hits = (near_in[:, :, None] == relabelled[:, None, :]).any(axis=2).sum()
        permuted[p] = hits / (n * k)
    return FrequencyNull(bin_of, expected, permuted, seed)


@dataclass(frozen=True, eq=False)
class Neighbourhoods:
    """KNN match between the input and the output spaces of the compared tokens.

    tokens (K,) token ids; dim the SVD dimension kept; input, output (K, dim) unit vectors;
    near_in, near_out their cosine neighbours (indices into tokens); match and chance
    (norm-matched random directions, i.e. random ones under cosine) over the same tokens;
    frequency_null: the output space permuted within frequency bins (frequency_null)."""

    tokens: np.ndarray
    dim: int
    input: np.ndarray
    output: np.ndarray
    near_in: Neighbours
    near_out: Neighbours
    match: KnnMatch
    chance: KnnMatch
    frequency_null: FrequencyNull


def neighbourhoods(counts: Counts, *, dim: int, k: int | None = None, seed: int = 0,
                   progress: bool | None = False, null_bins: int = NULL_BINS,
                   permutations: int = PERMUTATIONS) -> Neighbourhoods:
    """PPMI vectors of both sides (over all counts) reduced to `dim` by SVD, then exact cosine
    k-NN of each and their KNN match with its chance level (default_rng(seed)) and its
    frequency-matched null (frequency_null over the tokens' counts as predicted tokens,
    `null_bins`, `permutations`, seed). Compared are
    the tokens with a non-zero PPMI profile on both sides (they occur as the last token of a
    context and as a predicted token, and some feature of each side is above chance: a zero
    row has no direction) whose reduced vectors are non-zero too. k None: choose_k's default
    for that many tokens."""
    weighted = [ppmi(input_matrix(counts)), ppmi(output_matrix(counts))]
    kept = np.flatnonzero((np.diff(weighted[0].indptr) > 0) & (np.diff(weighted[1].indptr) > 0))
    vectors = [embed(m[kept], dim, seed) for m in weighted]
    norms = [np.linalg.norm(x, axis=1) for x in vectors]
    live = (norms[0] > 0) & (norms[1] > 0)
    kept = kept[live]
    x_in, x_out = (x[live] / n[live, None] for x, n in zip(vectors, norms))
    if len(kept) < 3:
        raise DhwtError(f"only {len(kept)} tokens have a profile on both sides; KNN match "
                        "needs at least 3")
    k = choose_k(k, len(kept))[0]
    near_in = nearest_neighbours(x_in, k, "cos", progress=progress, name="input")
    near_out = nearest_neighbours(x_out, k, "cos", progress=progress, name="output")
    chance = chance_baseline(x_in, x_out, k, "cos", generator=np.random.default_rng(seed),
                             progress=progress)
    null = frequency_null(near_in.indices, near_out.indices, counts.token_counts[kept],
                          bins=null_bins, permutations=permutations, seed=seed)
    return Neighbourhoods(kept, x_in.shape[1], x_in, x_out, near_in, near_out,
                          match_neighbours(near_in, near_out, tokens=kept), chance, null)


def violating_pairs(found: Neighbourhoods, top: int,
                    among: np.ndarray | None = None) -> list[tuple[int, int, float, float]]:
    """The `top` pairs that are neighbours in either space with the largest |cos_in - cos_out|
    (above 1e-9: pairs as close in both spaces violate nothing), both tokens allowed by `among`
    ((K,) bool over found.tokens, default all): (token id, token id, cos_in, cos_out), largest
    difference first (ties: lower ids first). A heuristic for counts without estimated
    relations (a corpus): PPMI cosines do not see a frequency ratio (two tokens predicted in
    the same contexts, one twice as often, have one output direction but are not ~cnd), so
    where the relations are estimated, relation_violations ranks them."""
    n, k = found.near_in.indices.shape
    first = np.repeat(np.arange(n), 2 * k)
    second = np.concatenate([found.near_in.indices, found.near_out.indices], axis=1).ravel()
    pairs = np.unique(np.sort(np.stack([first, second], axis=1), axis=1), axis=0)
    if among is not None:
        pairs = pairs[among[pairs[:, 0]] & among[pairs[:, 1]]]
    cos_in = np.einsum("ij,ij->i", found.input[pairs[:, 0]], found.input[pairs[:, 1]])
    cos_out = np.einsum("ij,ij->i", found.output[pairs[:, 0]], found.output[pairs[:, 1]])
    gap = np.abs(cos_in - cos_out)
    order = np.lexsort((pairs[:, 1], pairs[:, 0], -gap))[:min(top, int((gap > 1e-9).sum()))]
    return [(int(found.tokens[pairs[i, 0]]), int(found.tokens[pairs[i, 1]]), float(cos_in[i]),
             float(cos_out[i])) for i in order]
