"""The grouped semantic distances and the deduplicated conditional distances of
dhwt.languages.compute_truth give, bit for bit, what swapping every occurrence for every symbol
and comparing every context gives (the swap-by-swap versions kept here as the oracle, on the
contexts as the model reads them), on built-in grammars, test_truth's grammars (the bytes-key
path included) and the tying-capacity kinds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from dhwt.languages import compute_truth, load_language
from dhwt.languages import truth as truth_module
from dhwt.languages.language import language_from_spec
from dhwt.languages.truth import TOLERANCE, GroundTruth

ROOT = Path(__file__).parents[2]


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


capacity = _module(ROOT / "experiments" / "tying_capacity" / "languages.py", "capacity_languages")
GRAMMARS = _module(Path(__file__).parent / "test_truth.py", "truth_grammars").GRAMMARS


def _rows(rows: np.ndarray) -> np.ndarray:
    """Each row as one comparable value."""
    rows = np.ascontiguousarray(rows)
    return rows.view(np.dtype((np.void, rows.itemsize * rows.shape[1]))).ravel()


def swap_by_swap(truth: GroundTruth) -> tuple[np.ndarray, np.ndarray]:
    """The semantic distances (3, n_sym, n_sym: max |dp|, total variation, max |d log p|) as
    first written, and which symbols occur in a context: every occurrence of every symbol in
    every context swapped for every symbol, the new context looked up, the two conditional
    rows compared (1, 1, inf where the new context never occurs)."""
    n_sym = len(truth.symbols)
    contexts = np.concatenate([truth.inputs, truth.positions[:, None]], axis=1)
    assert len(np.unique(_rows(contexts))) == len(contexts)
    cond = truth.conditionals
    with np.errstate(divide="ignore"):
        log_cond = np.log(cond)
    read = (truth.inputs < n_sym) if truth.padding is None else (truth.inputs < n_sym) & ~truth.padding
    ctx, pos = np.nonzero(read)
    sym = truth.inputs[ctx, pos]
    out = np.zeros((3, n_sym, n_sym))
    for s2 in range(n_sym):
        swapped = contexts[ctx].copy()
        swapped[np.arange(len(ctx)), pos] = s2
        _, label = np.unique(_rows(np.concatenate([contexts, swapped])), return_inverse=True)
        label = label.ravel()
        index = np.full(label.max() + 1, -1)
        index[label[:len(contexts)]] = np.arange(len(contexts))
        other = index[label[len(contexts):]]
        found = other >= 0
        diff = np.abs(cond[ctx] - cond[other])
        with np.errstate(invalid="ignore"):
            log_diff = np.abs(log_cond[ctx] - log_cond[other])
        log_diff[np.isnan(log_diff)] = 0.0  # both zero: the same
        dist = np.stack([diff.max(axis=1), 0.5 * diff.sum(axis=1), log_diff.max(axis=1)])
        dist[:, ~found] = np.array([1.0, 1.0, np.inf])[:, None]
        for k in range(3):
            np.maximum.at(out[k, :, s2], sym, dist[k])
    return np.maximum(out, out.transpose(0, 2, 1)), np.bincount(sym, minlength=n_sym) > 0


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
    [pytest.param("builtin:parity", objective, marks=pytest.mark.slow)  # 5-7 s each
     for objective in ("mlm", "clm")]
    + [(f"builtin:{name}", objective) for name in ("parity-dh", "parity-nocnd", "four-cases")
       for objective in ("mlm", "clm")]
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


def check(truth: GroundTruth) -> None:
    """compute_truth's relations against the oracles."""
    n_sym = len(truth.symbols)
    (sem_abs, sem_tv, sem_log), seen = swap_by_swap(truth)
    np.testing.assert_array_equal(truth.sem, sem_abs <= TOLERANCE)
    np.testing.assert_array_equal(truth.sem_tv, sem_tv)
    np.testing.assert_array_equal(truth.sem_log, sem_log)
    assert truth.never_in_context == tuple(np.array(truth.symbols)[~seen])
    cond = truth.conditionals[:, :n_sym]
    with np.errstate(divide="ignore"):
        cnd_abs, cnd_log = context_by_context(cond, np.log(cond))
    np.testing.assert_array_equal(truth.cnd_abs, cnd_abs)
    np.testing.assert_array_equal(truth.cnd_log, cnd_log)


@pytest.mark.parametrize("name, objective", LANGUAGES, ids=lambda x: str(x))
def test_relations_equal_the_swap_by_swap_oracle(name, objective, tmp_path):
    check(compute_truth(_language(name, objective, tmp_path), objective))


@pytest.mark.parametrize("kind, objective", [("sem", "clm"), ("cnd", "clm"), ("sem", "mlm")])
def test_a_few_pairs_at_a_time_give_the_same_relations(kind, objective, monkeypatch):
    monkeypatch.setattr(truth_module, "CHUNK", 7)
    check(compute_truth(language_from_spec(capacity.spec(kind, 4, tail=objective == "clm"), kind),
                        objective))
