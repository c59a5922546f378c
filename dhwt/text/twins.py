"""Twin planting: a seeded transform of a tokenized corpus that gives chosen tokens a twin, with
the pair's exact relations known (proofs/README.md's ~sem, ~cnd and ratio).

The text is tokenized first; then each chosen token w (the `twins` most frequent tokens of the
train split other than <eos> and <unk>, or a list of token strings) gets a new token id
"w#twin" (b; w's own id is a) and, independently at every occurrence of w in every split:

- kind "sem" (by ratio): w is written b with probability p, else a. Every context is
  independent of the choice, so a ~sem b under both objectives (swapping one occurrence changes
  no prediction) and p(a|r) / p(b|r) = (1 - p) / p in every context r: a ~cnd b only at p = 0.5.
  EXor's 0a/0b inside real language.
- kind "cnd" (by a marker): a or b at 0.5 (p is not used), and a marker token "<twin>" (one new
  id for all pairs) always follows b. Causal LM: p(a|r) = p(b|r) in every left context (the
  choice is independent of the past), so a ~cnd b, but not ~sem (after b comes the marker).
  Masked LM: the marker beside the masked position tells which twin it was, so the ratio is 0
  or infinite: neither sem nor cnd (in a masked LM ~cnd implies ~sem, proofs/T5 (a)).

The draws come from numpy's PCG64 seeded with (twin_seed, split index): one uniform per
occurrence of a chosen token, in stream order. The planted truth (`truth`) is written beside
the run as twins.json (dhwt.filenames.TWINS, by dhwt.training.trainer): the pairs, their ids,
their realised counts per split, and per objective sem, cnd and log p(a|r)/p(b|r) (null where
it is not one number).

Examples:
    >>> import numpy as np
    >>> ids = {"train": np.array([0, 1, 0, 2, 0]), "valid": np.array([0]), "test": np.array([1])}
    >>> planted = plant_twins(ids, ("the", "cat", "<eos>"), 1, p=0.5, kind="sem", seed=0)
    >>> planted.vocab[-1], planted.pairs
    ('the#twin', (('the', 'the#twin'),))
    >>> sorted(set(planted.ids["train"].tolist()))  # every "the" is 0 or 3
    [0, 1, 2, 3]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dhwt.defaults import TWIN_KINDS
from dhwt.errors import DhwtError
from dhwt.text.corpus import SPLITS
from dhwt.text.tokenizers import EOS, UNK

KINDS = TWIN_KINDS
SUFFIX = "#twin"
MARKER = "<twin>"
TWIN_DEFAULTS = {"twin_p": 0.5, "twin_kind": "sem", "twin_seed": 0}


@dataclass(frozen=True)
class Planted:
    """A corpus with twins planted: ids per split, the vocabulary (old tokens, then the twins b
    in pair order, then the marker for kind "cnd"), the pairs (a, b) as strings, and the
    planted truth (a JSON-ready dict, see the module doc)."""

    ids: dict[str, np.ndarray]
    vocab: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]
    truth: dict


def chosen_tokens(train: np.ndarray, vocab: tuple[str, ...], twins: int | list[str]) -> list[int]:
    """The ids that get twins: the `twins` most frequent in `train` (ties: lower id first),
    never <eos> or <unk>; or the listed tokens' ids (DhwtError for one not in the vocabulary)."""
    if isinstance(twins, list):
        index = {t: i for i, t in enumerate(vocab)}
        missing = [t for t in twins if t not in index]
        if missing:
            raise DhwtError(f"twins: the token {missing[0]!r} is not in the vocabulary "
                            f"({len(vocab):,} tokens)")
        return [index[t] for t in twins]
    counts = np.bincount(np.asarray(train, dtype=np.int64), minlength=len(vocab))
    order = [int(i) for i in np.argsort(-counts, kind="stable")
             if vocab[i] not in (EOS, UNK) and counts[i] > 0]
    if len(order) < twins:
        raise DhwtError(f"twins = {twins} but the train split has {len(order)} tokens to twin")
    return order[:twins]


def plant_twins(ids: dict[str, np.ndarray], vocab: tuple[str, ...], twins: int | list[str], *,
                p: float, kind: str, seed: int) -> Planted:
    """The corpus `ids` (per split) with twins planted as the module doc says (the options as
    dhwt.checks.check_twins passes them)."""
    chosen = chosen_tokens(ids["train"], vocab, twins)
    names = [vocab[i] + SUFFIX for i in chosen] + ([MARKER] if kind == "cnd" else [])
    clash = next((n for n in names if n in vocab), None)
    if clash is not None:
        raise DhwtError(f"the vocabulary has {clash!r} already; twin planting adds it")
    new_vocab = tuple(vocab) + tuple(names)
    twin_of = np.full(len(vocab), -1, dtype=np.int64)
    twin_of[chosen] = np.arange(len(vocab), len(vocab) + len(chosen))
    marker = len(new_vocab) - 1
    planted, counts = {}, {}
    for index, split in enumerate(SPLITS):
        stream = np.asarray(ids[split], dtype=np.int64)
        where = np.flatnonzero(twin_of[stream] >= 0)
        draws = np.random.Generator(np.random.PCG64([seed, index])).random(len(where))
        to_b = draws < (p if kind == "sem" else 0.5)
        out = stream.copy()
        out[where[to_b]] = twin_of[stream[where[to_b]]]
        if kind == "cnd":
            out = np.insert(out, where[to_b] + 1, marker)
        planted[split] = out
        counts[split] = {"a": np.bincount(stream[where[~to_b]], minlength=len(vocab))[chosen],
                         "b": np.bincount(stream[where[to_b]], minlength=len(vocab))[chosen]}
    pairs = tuple((vocab[i], vocab[i] + SUFFIX) for i in chosen)
    truth = {"kind": kind, "p": p if kind == "sem" else 0.5, "seed": seed,
             "marker": MARKER if kind == "cnd" else None,
             "pairs": [{"a": a, "b": b, "ids": [int(i), int(twin_of[i])],
                        "count": {s: [int(counts[s]["a"][k]), int(counts[s]["b"][k])]
                                  for s in SPLITS},
                        "relations": relations(kind, p)}
                       for k, (i, (a, b)) in enumerate(zip(chosen, pairs))]}
    return Planted(planted, new_vocab, pairs, truth)


def relations(kind: str, p: float) -> dict[str, dict[str, object]]:
    """Per objective: sem, cnd, and log p(a|r)/p(b|r) (None where no one number holds).

    Examples:
        >>> relations("sem", 0.1)["mlm"]
        {'sem': True, 'cnd': False, 'log_ratio': 2.1972245773362196}
        >>> relations("cnd", 0.3)["clm"], relations("cnd", 0.3)["mlm"]["log_ratio"]
        ({'sem': False, 'cnd': True, 'log_ratio': 0.0}, None)
    """
    if kind == "sem":
        one = {"sem": True, "cnd": p == 0.5, "log_ratio": math.log((1 - p) / p)}
        return {"mlm": dict(one), "clm": dict(one)}
    return {"mlm": {"sem": False, "cnd": False, "log_ratio": None},
            "clm": {"sem": False, "cnd": True, "log_ratio": 0.0}}
