"""Exact ground truth of a language for one objective, computed from the grammar by enumeration.

Contexts and targets (every symbol-level string x enumerated with its probability P(x)):
- mlm: x with one maskable position j masked, j uniform over the maskable positions of x;
  target x_j. P(r, y) = sum of P(x) / m(x) over the (x, j) that give context r and target y.
- clm: every prefix x_<t, t = 0..len(x); target x_t, or [EOS] at t = len(x). Each position
  weighs P(x) (the per-token average of the causal loss); the conditionals are the exact
  next-symbol probabilities p(x_t | x_<t).

Relations between grammar symbols, checked against their definitions (tolerance 1e-9 on
probabilities, equality not proportionality):
- semantic: s1 ~sem s2 iff for every context r with P(r) > 0 holding s1 at some position,
  r with that one occurrence replaced by s2 has P > 0 and the same predictive distribution,
  and symmetrically for s2;
- conditional: s1 ~cnd s2 iff p(s1 | r) = p(s2 | r) for every context r with P(r) > 0;
- the distributional hypothesis holds for a pair iff both relations agree on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from dhwt.errors import DhwtError, brief
from dhwt.languages.enumeration import PAD, key_weights, row_keys
from dhwt.languages.language import (
    BOS,
    EOS,
    MASK,
    PAD_TOKEN,
    Language,
    check_objective,
    symbol_strings,
)

#: Two probabilities closer than this are equal (relations are exact up to float error).
TOLERANCE = 1e-9
#: Symbol pairs compared at once by the semantic check (bounds memory on large grammars).
CHUNK = 1 << 22


@dataclass(frozen=True)
class PairRelation:
    """How two grammar symbols relate: both relations, and how far the pair is from each.

    sem_log: max over contexts, occurrences and targets of |log p(y|r) - log p(y|r')|, r' = r
        with the occurrence swapped (inf where the supports differ or r' never occurs);
    sem_tv: max total variation between p(.|r) and p(.|r') (1 where r' never occurs);
    cnd_log: max over contexts of |log p(s1|r) - log p(s2|r)| (inf where exactly one is 0);
    cnd_abs: max over contexts of |p(s1|r) - p(s2|r)|.
    """

    first: str
    second: str
    sem: bool
    cnd: bool
    sem_log: float
    sem_tv: float
    cnd_log: float
    cnd_abs: float

    @property
    def dh(self) -> bool:
        """The distributional hypothesis holds for the pair: sem and cnd agree."""
        return self.sem == self.cnd

    @property
    def kind(self) -> str:
        """'sem and cnd', 'sem only', 'cnd only' or 'neither'."""
        if self.sem and self.cnd:
            return "sem and cnd"
        return "sem only" if self.sem else "cnd only" if self.cnd else "neither"


@dataclass(frozen=True, eq=False)
class GroundTruth:
    """Exact conditionals, relations and Bayes optimum of one language under one objective.

    Contexts are given as the model reads them, in the objective's token ids (`vocab`):
    inputs (n_ctx, seq_len) int64; positions (n_ctx,) the position whose prediction the context
    asks for (mlm: the [MASK]; clm: the last token of [BOS] + prefix); padding (n_ctx, seq_len)
    bool or None (clm: True after the prefix, where a filler token stands that a causal model
    never reads). context_probs (n_ctx,) P(r); conditionals (n_ctx, V) p(y | r) over vocab.
    Relation matrices are over grammar symbols (index = symbol id = token id).
    """

    objective: str
    vocab: tuple[str, ...]
    symbols: tuple[str, ...]
    inputs: np.ndarray
    positions: np.ndarray
    padding: np.ndarray | None
    context_probs: np.ndarray
    conditionals: np.ndarray
    sem: np.ndarray
    cnd: np.ndarray
    sem_log: np.ndarray
    sem_tv: np.ndarray
    cnd_log: np.ndarray
    cnd_abs: np.ndarray
    sem_classes: tuple[tuple[str, ...], ...]
    cnd_classes: tuple[tuple[str, ...], ...]
    never_predicted: tuple[str, ...]
    never_in_context: tuple[str, ...]
    bayes_accuracy: float
    bayes_cross_entropy: float
    marginal_accuracy: float
    marginal_entropy: float

    @property
    def dh(self) -> np.ndarray:
        """(n_sym, n_sym) bool: the distributional hypothesis holds for the pair."""
        return self.sem == self.cnd

    def pairs(self) -> list[PairRelation]:
        """Every unordered pair of distinct grammar symbols, in symbol order."""
        n = len(self.symbols)
        return [
            PairRelation(self.symbols[i], self.symbols[j], bool(self.sem[i, j]),
                         bool(self.cnd[i, j]), float(self.sem_log[i, j]),
                         float(self.sem_tv[i, j]), float(self.cnd_log[i, j]),
                         float(self.cnd_abs[i, j]))
            for i in range(n) for j in range(i + 1, n)
        ]

    def log_ratio(self, first: str, second: str) -> np.ndarray:
        """(n_ctx,) exact log p(first | r) - log p(second | r) (+-inf where one is 0, nan where
        both are): what a model's output logit difference equals at the optimum.

        Examples:
            >>> import numpy as np
            >>> from dhwt.languages import compute_truth, load_language
            >>> truth = compute_truth(load_language("parity", {"n_bits": 3}), "mlm")
            >>> ratio = truth.log_ratio("0b", "0a")  # log(0.9 / 0.1) where bit 0 is masked,
            >>> bool(np.allclose(ratio[~np.isnan(ratio)], np.log(9)))  # nan where bit 1 is
            True
            >>> int(np.isnan(ratio).sum())
            48
        """
        p = self.conditionals[:, [self.vocab.index(first), self.vocab.index(second)]]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(p[:, 0]) - np.log(p[:, 1])

    def to_json(self) -> dict:
        """A JSON-ready summary (no per-context arrays); infinite distances are "inf"."""
        def num(x: float) -> float | str:
            return "inf" if np.isinf(x) else round(x, 12)

        return {
            "objective": self.objective,
            "vocab": list(self.vocab),
            "n_contexts": len(self.context_probs),
            "bayes_accuracy": num(self.bayes_accuracy),
            "bayes_cross_entropy_nats": num(self.bayes_cross_entropy),
            "marginal_accuracy": num(self.marginal_accuracy),
            "marginal_entropy_nats": num(self.marginal_entropy),
            "tolerance": TOLERANCE,
            "sem_classes": [list(c) for c in self.sem_classes],
            "cnd_classes": [list(c) for c in self.cnd_classes],
            "never_predicted": list(self.never_predicted),
            "never_in_context": list(self.never_in_context),
            "pairs": [
                {"pair": [p.first, p.second], "kind": p.kind, "sem": p.sem, "cnd": p.cnd,
                 "dh": p.dh,
                 "sem_distance": {"max_abs_log_ratio": num(p.sem_log), "max_tv": num(p.sem_tv)},
                 "cnd_distance": {"max_abs_log_ratio": num(p.cnd_log),
                                  "max_abs_diff": num(p.cnd_abs)}}
                for p in self.pairs()
            ],
        }


def compute_truth(language: Language, objective: str) -> GroundTruth:
    """The exact ground truth of `language` under `objective` ("mlm" or "clm").

    Examples:
        >>> from dhwt.languages import compute_truth, load_language
        >>> truth = compute_truth(load_language("parity", {"n_bits": 3}), "mlm")
        >>> truth.inputs.shape  # every context: 8 strings x 3 masked bits x 2^2 other variants
        (96, 4)
        >>> round(truth.bayes_accuracy, 6)  # the masked bit's class is known: 0.5 * 0.9 + 0.5 * 0.5
        0.7
        >>> truth.sem_classes
        (('0a', '0b'), ('1a', '1b'), ('EVEN',), ('ODD',))
        >>> truth.cnd_classes
        (('0a',), ('0b',), ('1a', '1b'), ('EVEN', 'ODD'))
        >>> [(pair.first, pair.second, pair.kind) for pair in truth.pairs() if not pair.dh]
        [('0a', '0b', 'sem only'), ('EVEN', 'ODD', 'cnd only')]
    """
    contexts, keys, joint = _joint(language, objective)
    n_sym = len(language.symbols)
    context_probs, cond, log_cond = _conditionals(joint)

    sem_abs, sem_tv, sem_log, seen = _semantic(contexts, keys, cond, log_cond, n_sym)
    cnd_abs, cnd_log = _conditional(cond[:, :n_sym], log_cond[:, :n_sym])
    sem, cnd = sem_abs <= TOLERANCE, cnd_abs <= TOLERANCE
    symbols = language.symbols
    marginal = joint.sum(axis=0)
    predicted = marginal[:n_sym] > 0
    inputs, positions, padding = _model_inputs(language, objective, contexts, n_sym)
    vocab = language.vocab(objective)
    conditionals = np.zeros((len(keys), len(vocab)))
    conditionals[:, :n_sym] = cond[:, :n_sym]
    if objective == "clm":
        conditionals[:, vocab.index(EOS)] = cond[:, n_sym]
    bayes_accuracy, bayes_cross_entropy = _bayes(joint)
    return GroundTruth(
        objective=objective, vocab=vocab, symbols=symbols, inputs=inputs, positions=positions,
        padding=padding, context_probs=context_probs, conditionals=conditionals,
        sem=sem, cnd=cnd, sem_log=sem_log, sem_tv=sem_tv, cnd_log=cnd_log, cnd_abs=cnd_abs,
        sem_classes=_equivalence_classes(sem, symbols, "semantic"),
        cnd_classes=_equivalence_classes(cnd, symbols, "conditional"),
        never_predicted=tuple(s for s, p in zip(symbols, predicted) if not p),
        never_in_context=tuple(s for s, k in zip(symbols, seen) if not k),
        bayes_accuracy=bayes_accuracy, bayes_cross_entropy=bayes_cross_entropy,
        marginal_accuracy=float(marginal.max()),
        marginal_entropy=float(-(marginal[marginal > 0] * np.log(marginal[marginal > 0])).sum()),
    )


def bayes_optimum(language: Language, objective: str) -> tuple[float, float]:
    """(accuracy, cross-entropy in nats) of the Bayes-optimal predictor of `language` under
    `objective`, computed as compute_truth computes them, without the relations (for a part of
    a language, e.g. the train split: Language.subset)."""
    return _bayes(_joint(language, objective)[2])


def _joint(language: Language, objective: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(contexts (n_ctx, L) symbol ids with the mask id n_sym or PAD, their row keys (sorted),
    joint (n_ctx, n_targets) P(r, y)) over every context of every symbol string."""
    check_objective(objective)
    rows, probs = symbol_strings(language)
    n_sym = len(language.symbols)
    if objective == "mlm":
        ctx_rows, targets, weights = _mlm_events(language, rows, probs)
    else:
        ctx_rows, targets, weights = _clm_events(rows, probs, eos=n_sym)
    n_targets = n_sym + (objective == "clm")
    keys, first, inverse = np.unique(row_keys(ctx_rows, n_sym + 1), return_index=True,
                                     return_inverse=True)
    joint = np.bincount(inverse * n_targets + targets, weights=weights,
                        minlength=len(keys) * n_targets).reshape(len(keys), n_targets)
    return ctx_rows[first], keys, joint


def _conditionals(joint: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P(r), p(y | r), log p(y | r)) of a joint P(r, y)."""
    context_probs = joint.sum(axis=1)
    cond = joint / context_probs[:, None]
    with np.errstate(divide="ignore"):
        return context_probs, cond, np.log(cond)


def _bayes(joint: np.ndarray) -> tuple[float, float]:
    """(expected accuracy of the most probable target, cross-entropy of the exact conditionals
    in nats) of a joint P(r, y)."""
    context_probs, cond, log_cond = _conditionals(joint)
    positive = joint > 0
    return (float(context_probs @ cond.max(axis=1)),
            float(-(joint[positive] * log_cond[positive]).sum()))


def _mlm_events(language: Language, rows: np.ndarray, probs: np.ndarray):
    """(context rows with the mask id n_sym at the masked position, targets, weights)."""
    n_sym = len(language.symbols)
    real = rows != PAD
    maskable = language.maskable[language.symbol_class]
    mask = real & maskable[np.where(real, rows, 0)]
    string, position = np.nonzero(mask)
    contexts = rows[string]
    contexts[np.arange(len(string)), position] = n_sym
    return contexts, rows[string, position], probs[string] / mask.sum(axis=1)[string]


def _clm_events(rows: np.ndarray, probs: np.ndarray, eos: int):
    """(prefix rows padded with PAD, next symbol or eos, weights) for every prefix of every
    string, each position weighing P(x) (normalised over all positions)."""
    length = (rows != PAD).sum(axis=1)
    width = rows.shape[1]
    string, t = np.nonzero(np.arange(width + 1)[None, :] <= length[:, None])
    contexts = np.where(np.arange(width)[None, :] < t[:, None], rows[string], PAD)
    targets = np.where(t < length[string], rows[string, np.minimum(t, width - 1)], eos)
    return contexts, targets, probs[string] / (probs * (length + 1)).sum()


def _semantic(contexts, keys, cond, log_cond, n_sym):
    """Distances from semantic equivalence by the definition: swap each occurrence of each
    symbol in each context for every other symbol, look the new context up, and compare the
    predictive distributions. Returns (max |dp|, max TV, max |d log p|) as (n_sym, n_sym)
    symmetric matrices, and (n_sym,) whether each symbol occurs in some context.

    Without enumerating the swaps: occurrences that agree everywhere but at their position form
    a group (same context with that position blanked, same position), and swapping s1 for s2
    at an occurrence lands on the group's occurrence of s2, or on a context that never occurs
    if the group has none. So a pair is at distance (1, 1, inf) if some group holds one symbol
    and not the other, and otherwise at the largest distance between the conditional rows of
    the two symbols' occurrences in a group that holds both. Contexts are labelled by their
    distinct conditional row (bit-for-bit equal rows share a label), groups holding the same
    (symbol, label) members are read once, and each pair of rows is compared once: the same
    numbers as comparing every swap of every occurrence."""
    as_bytes = np.ascontiguousarray(cond).view(np.dtype((np.void, 8 * cond.shape[1]))).ravel()
    _, first, label = np.unique(as_bytes, return_index=True, return_inverse=True)
    rows, log_rows = cond[first], log_cond[first]
    n_rows = len(rows)
    ctx, pos = np.nonzero((contexts != PAD) & (contexts < n_sym))
    sym = contexts[ctx, pos].astype(np.int64)
    out = np.zeros((3, n_sym, n_sym))
    weights = key_weights(contexts.shape[1], n_sym + 1)
    if weights is None:  # keys are bytes: blank a copy of the rows and key it
        blanked = contexts[ctx]
        blanked[np.arange(len(ctx)), pos] = 0
        blank = row_keys(blanked, n_sym + 1)
    else:  # integer keys: symbol s at `pos` adds s * weights[pos]
        blank = keys[ctx] - sym * weights[pos]
    _, blank = np.unique(blank, return_inverse=True)
    _, group = np.unique(blank.astype(np.int64) * contexts.shape[1] + pos, return_inverse=True)
    member = sym * n_rows + label[ctx]  # what an occurrence brings to its group
    order = np.lexsort((member, group))
    group, member = group[order], member[order]
    starts = np.flatnonzero(np.diff(group, prepend=-1))
    sizes = np.diff(np.r_[starts, len(group)])
    for size in np.unique(sizes):  # groups of one size at a time, each distinct one once
        at = starts[sizes == size]
        members = np.unique(member[at[:, None] + np.arange(size)], axis=0)
        symbols = members // n_rows
        held = np.zeros((len(members), n_sym))
        np.put_along_axis(held, symbols, 1.0, axis=1)
        lost = held.T @ (1.0 - held) > 0  # s1 in a group that lacks s2
        out[:, lost] = np.array([1.0, 1.0, np.inf])[:, None]
        i, j = np.nonzero(~np.eye(size, dtype=bool))
        step = max(1, CHUNK // max(len(i), 1))
        for lo in range(0, len(members), step):
            chunk = members[lo:lo + step]
            s1, s2 = (chunk[:, i] // n_rows).ravel(), (chunk[:, j] // n_rows).ravel()
            pairs = ((chunk[:, i] % n_rows) * n_rows + chunk[:, j] % n_rows).ravel()
            distinct, which = np.unique(pairs, return_inverse=True)
            dist = _distances(rows, log_rows, distinct // n_rows, distinct % n_rows)[:, which]
            for k in range(3):
                np.maximum.at(out[k], (s1, s2), dist[k])
    out = np.maximum(out, out.transpose(0, 2, 1))
    return out[0], out[1], out[2], np.bincount(sym, minlength=n_sym) > 0


def _distances(rows, log_rows, a, b):
    """(3, k): max |dp|, total variation, max |d log p| between rows[a] and rows[b];
    (1, 1, inf) where b is len(rows) (the swapped context never occurs)."""
    found = b < len(rows)
    p, q = rows[a], rows[np.where(found, b, 0)]
    diff = np.abs(p - q)
    with np.errstate(invalid="ignore"):
        log_diff = np.abs(log_rows[a] - log_rows[np.where(found, b, 0)])
    log_diff[np.isnan(log_diff)] = 0.0  # both zero: the same
    dist = np.stack([diff.max(axis=1), 0.5 * diff.sum(axis=1), log_diff.max(axis=1)])
    dist[:, ~found] = np.array([1.0, 1.0, np.inf])[:, None]
    return dist


def _conditional(probs: np.ndarray, log_probs: np.ndarray):
    """(max |p(s1|r) - p(s2|r)|, max |log p(s1|r) - log p(s2|r)|) over contexts, (n_sym, n_sym).
    Contexts whose rows are bit-for-bit equal give the same differences: each row is read once."""
    probs = np.ascontiguousarray(probs)
    _, first = np.unique(probs.view(np.dtype((np.void, 8 * probs.shape[1]))).ravel(),
                         return_index=True)
    keep = np.sort(first)
    probs, log_probs = probs[keep], log_probs[keep]
    n_sym = probs.shape[1]
    abs_d, log_d = np.zeros((n_sym, n_sym)), np.zeros((n_sym, n_sym))
    for s in range(n_sym):
        abs_d[s] = np.abs(probs[:, [s]] - probs).max(axis=0, initial=0.0)
        with np.errstate(invalid="ignore"):
            d = np.abs(log_probs[:, [s]] - log_probs)
        d[np.isnan(d)] = 0.0
        log_d[s] = d.max(axis=0, initial=0.0)
    return abs_d, log_d


def _equivalence_classes(relation: np.ndarray, symbols: tuple[str, ...], what: str):
    """Connected components of the relation graph; each must be a clique (transitivity)."""
    graph = nx.Graph()
    graph.add_nodes_from(range(len(symbols)))
    graph.add_edges_from(zip(*np.nonzero(np.triu(relation, 1))))
    components = sorted(sorted(c) for c in nx.connected_components(graph))
    for comp in components:
        if not relation[np.ix_(comp, comp)].all():
            names = brief((symbols[i] for i in comp), str)
            raise DhwtError(f"{what} equivalence is not transitive among {names} at tolerance "
                            f"{TOLERANCE:g}: some probabilities are too close to tell apart")
    return tuple(tuple(symbols[i] for i in comp) for comp in components)


def _model_inputs(language: Language, objective: str, contexts: np.ndarray, n_sym: int):
    """Contexts (symbol ids, mask id n_sym, PAD) as model inputs in the objective's token ids."""
    vocab = language.vocab(objective)
    pad_id = vocab.index(PAD_TOKEN) if PAD_TOKEN in vocab else None
    pads = contexts == PAD
    if objective == "mlm":
        inputs = np.where(contexts == n_sym, vocab.index(MASK), contexts)
        inputs = np.where(pads, pad_id if pad_id is not None else 0, inputs)
        return (inputs.astype(np.int64), np.argmax(contexts == n_sym, axis=1),
                pads if pad_id is not None else None)
    positions = (~pads).sum(axis=1)
    filler = pad_id if pad_id is not None else vocab.index(EOS)
    body = np.where(pads, filler, contexts)
    inputs = np.concatenate([np.full((len(contexts), 1), vocab.index(BOS)), body], axis=1)
    padding = np.arange(inputs.shape[1])[None, :] > positions[:, None]
    return inputs.astype(np.int64), positions, padding
