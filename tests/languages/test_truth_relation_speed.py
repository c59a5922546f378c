"""The grouped semantic distances and the deduplicated conditional distances of
dhwt.languages.truth give, bit for bit, what swapping every occurrence for every symbol and
comparing every context gave (the swap-by-swap versions kept here as the oracle), on built-in
grammars, test_truth's grammars (the bytes-key path included) and the tying-capacity kinds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from dhwt.languages import load_language
from dhwt.languages import truth as truth_module
from dhwt.languages.enumeration import PAD, key_weights, row_keys
from dhwt.languages.language import language_from_spec

ROOT = Path(__file__).parents[2]


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


capacity = _module(ROOT / "experiments" / "tying_capacity" / "languages.py", "capacity_languages")
GRAMMARS = _module(Path(__file__).parent / "test_truth.py", "truth_grammars").GRAMMARS


def swap_by_swap(contexts, keys, cond, log_cond, n_sym, chunk=1 << 19):
    """The semantic distances as first written: every occurrence of every symbol swapped for
    every symbol, the new context looked up, the two conditional rows compared."""
    as_bytes = np.ascontiguousarray(cond).view(np.dtype((np.void, 8 * cond.shape[1]))).ravel()
    _, first, label = np.unique(as_bytes, return_index=True, return_inverse=True)
    rows, log_rows = cond[first], log_cond[first]
    n_rows = len(rows)
    missing = n_rows
    ctx, pos = np.nonzero((contexts != PAD) & (contexts < n_sym))
    sym = contexts[ctx, pos].astype(np.int64)
    out = np.zeros((3, n_sym, n_sym))
    weights = key_weights(contexts.shape[1], n_sym + 1)
    for lo in range(0, len(ctx), chunk):
        c, at, s1 = ctx[lo:lo + chunk], pos[lo:lo + chunk], sym[lo:lo + chunk]
        before = s1 * n_rows + label[c]
        if weights is None:
            swapped, index = contexts[c], np.arange(len(c))
        else:
            blank, step = keys[c] - s1 * weights[at], weights[at]
        for s2 in range(n_sym):
            if weights is None:
                swapped[index, at] = s2
                query = row_keys(swapped, n_sym + 1)
            else:
                query = blank + s2 * step
            idx = np.minimum(np.searchsorted(keys, query), len(keys) - 1)
            after = np.where(keys[idx] == query, label[idx], missing)
            seen = np.unique(before * (n_rows + 1) + after)
            b, rest = seen % (n_rows + 1), seen // (n_rows + 1)
            a, s = rest % n_rows, rest // n_rows
            dist = truth_module._distances(rows, log_rows, a, b)
            for k in range(3):
                np.maximum.at(out[k, :, s2], s, dist[k])
    out = np.maximum(out, out.transpose(0, 2, 1))
    return out[0], out[1], out[2], np.bincount(sym, minlength=n_sym) > 0


def context_by_context(probs, log_probs):
    """The conditional distances as first written: every context compared."""
    n_sym = probs.shape[1]
    abs_d, log_d = np.zeros((n_sym, n_sym)), np.zeros((n_sym, n_sym))
    for s in range(n_sym):
        abs_d[s] = np.abs(probs[:, [s]] - probs).max(axis=0, initial=0.0)
        with np.errstate(invalid="ignore"):
            d = np.abs(log_probs[:, [s]] - log_probs)
        d[np.isnan(d)] = 0.0
        log_d[s] = d.max(axis=0, initial=0.0)
    return abs_d, log_d


def _grammar(name: str, tmp_path: Path):
    text = "\n".join(line.strip() for line in GRAMMARS[name].splitlines())
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return load_language(str(path))


LANGUAGES = (
    [(f"builtin:{name}", objective) for name in ("parity", "parity-dh", "parity-nocnd",
                                                  "four-cases") for objective in ("mlm", "clm")]
    + [("builtin:parity:4", objective) for objective in ("mlm", "clm")]
    + [(f"grammar:{name}", objective) for name in GRAMMARS for objective in ("mlm", "clm")]
    + [(f"capacity:{kind}:{k}", objective) for k in (1, 4)
       for kind, objective in (("sem", "mlm"), ("control", "mlm"), ("sem", "clm"),
                               ("control", "clm"), ("cnd", "clm"), ("ratio", "clm"))])


def _language(name: str, objective: str, tmp_path: Path):
    source, rest = name.split(":", 1)
    if source == "builtin":
        grammar, *bits = rest.split(":")
        return load_language(grammar, {"n_bits": int(bits[0])} if bits else None)
    if source == "grammar":
        return _grammar(rest, tmp_path)
    kind, k = rest.split(":")
    return language_from_spec(capacity.spec(kind, int(k), tail=objective == "clm"), name)


@pytest.mark.parametrize("name, objective", LANGUAGES, ids=lambda x: str(x))
def test_relations_equal_the_swap_by_swap_oracle(name, objective, tmp_path):
    language = _language(name, objective, tmp_path)
    contexts, keys, joint = truth_module._joint(language, objective)
    _, cond, log_cond = truth_module._conditionals(joint)
    n_sym = len(language.symbols)
    found = truth_module._semantic(contexts, keys, cond, log_cond, n_sym)
    wanted = swap_by_swap(contexts, keys, cond, log_cond, n_sym)
    for got, want in zip(found, wanted):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(truth_module._conditional(cond[:, :n_sym], log_cond[:, :n_sym]),
                         context_by_context(cond[:, :n_sym], log_cond[:, :n_sym])):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind, objective", [("sem", "clm"), ("cnd", "clm"), ("sem", "mlm")])
def test_a_few_pairs_at_a_time_give_the_same_relations(kind, objective, monkeypatch):
    language = language_from_spec(capacity.spec(kind, 4, tail=objective == "clm"), kind)
    contexts, keys, joint = truth_module._joint(language, objective)
    _, cond, log_cond = truth_module._conditionals(joint)
    n_sym = len(language.symbols)
    monkeypatch.setattr(truth_module, "CHUNK", 7)
    found = truth_module._semantic(contexts, keys, cond, log_cond, n_sym)
    for got, want in zip(found, swap_by_swap(contexts, keys, cond, log_cond, n_sym)):
        np.testing.assert_array_equal(got, want)
