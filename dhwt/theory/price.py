"""Empirical checks of T5 (proofs/T5_masked_lm.md): the price of tying on trained transformers.

The language is a small class-variant automaton (strings `a X e`, `b X e`; X is the class S at
0.7 after a and 0.3 after b, else t), whose S is written s1 : s2 = 1 : KAPPA, and its merged
twin, where S is the single symbol s. For a masked LM s1 ~sem s2 with the constant ratio
1 : KAPPA, so T5 (e) says a tied model with an output bias pays nothing for the pair: a tied +
bias model of the merged language, its row copied to s1 and s2 and its bias split by
log(pi_k), has exactly the same excess on the language as on the twin; and training tied + bias
on the language directly should end where training on the twin does.

The causal check reads pair-ratio's conflict (experiments/tying_price): s1 : s2 = 1 : KAPPA after
a and 1 : 1 after b, for a causal LM with every LayerNorm fixed (norm_affine false), so
||h|| <= sqrt(d) and the tied rows' distance delta gives T5 (f)'s bound B_b(delta) exactly.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dhwt.theory.check import Outcome, verdict
from dhwt.theory.t4_tying_conflict import closeness_price

KAPPA = 9.0
SEEDS = 4
#: A transformer that fits these four-string languages in a few hundred steps.
TRAINING = dict(d_model=16, d_ff=16, n_layers=2, n_heads=4, lr=1e-2, lr_min=1e-3,
                lr_schedule="cosine", batch_size=None, weight_decay=0.1, threads=1,
                output_bias=True, tie_schedule="tied")


def language_spec(variants: tuple[str, ...], after_a: float = 1.0, after_b: float = 1.0) -> dict:
    """`a X e | b X e`: X = S (variants `variants` at the ratio given after a and after b) at
    0.7 after a and 0.3 after b, else t. One ratio everywhere: T5's constant pair."""
    def emits(s_mass: float, ratio: float) -> list[dict]:
        if len(variants) == 1:
            return [{"emit": variants[0], "to": "last", "p": s_mass},
                    {"emit": "t", "to": "last", "p": 1 - s_mass}]
        return [{"emit": variants[0], "to": "last", "p": s_mass / (1 + ratio)},
                {"emit": variants[1], "to": "last", "p": s_mass * ratio / (1 + ratio)},
                {"emit": "t", "to": "last", "p": 1 - s_mass}]

    classes = {c: {"variants": [c]} for c in ("a", "b", "t", "e", *variants)}
    return {"family": "automaton", "start": "start", "classes": classes, "states": {
        "start": [{"emit": "a", "to": "A", "p": 0.5}, {"emit": "b", "to": "B", "p": 0.5}],
        "A": emits(0.7, after_a), "B": emits(0.3, after_b),
        "last": [{"emit": "e", "to": "end", "p": 1.0}]}}


def train_on(spec: dict, objective: str, steps: int, train: Callable[..., Any],
             **overrides: object) -> tuple[torch.nn.Module, Any]:
    """Train SEEDS members of `train` (dhwt.commands.train) on every string of `spec`; return
    the final model in float64 and the exact truth of `objective`."""
    from dhwt.config import TrainConfig
    from dhwt.languages import load_task, write_dataset
    from dhwt.languages.language import language_from_spec
    from dhwt.runs import load_run

    with tempfile.TemporaryDirectory(prefix="dhwt-verify-") as tmp:
        data = Path(tmp) / "data"
        write_dataset(language_from_spec(spec, "t5"), data, valid_fraction=0.0,
                      test_fraction=0.0, seed=14)
        config = TrainConfig(data=str(data), objective=objective, seeds=list(range(SEEDS)),
                             steps=steps, eval_every=steps, snapshot_every=steps,
                             checkpoint_every=steps, **{**TRAINING, **overrides})
        task = load_task(data, objective)
        run = load_run(train(config, task, Path(tmp) / "run").run_dir)
        return run.model().double().eval(), task.truth


def excess(model: torch.nn.Module, truth: Any) -> np.ndarray:
    """(members,) exact population cross-entropy minus the Bayes optimum."""
    from dhwt.analysis.population import population_fit

    return population_fit(model, truth)[0] - truth.bayes_cross_entropy


def split_merged(model: torch.nn.Module, merged: Any, truth: Any,
                 shares: dict[str, float]) -> torch.nn.Module:
    """T5 (e)'s construction: the tied + bias `model` of the merged language (vocabulary
    merged.vocab) as a model of `truth`'s language: each token's row (and bias) copied from its
    merged token (s1, s2 -> s), plus log(shares[token]) on the bias of the split tokens."""
    from dhwt.models import build_model

    index = [merged.vocab.index("s" if t in shares else t) for t in truth.vocab]
    config = model.config.for_task(len(truth.vocab), model.config.max_len, model.config.causal)
    split = build_model(config, list(model.seeds), tied=True).double()
    state = model.state_dict()
    state["embeddings.input_weight"] = state["embeddings.input_weight"][:, index]
    shift = torch.tensor([np.log(shares.get(t, 1.0)) for t in truth.vocab], dtype=torch.float64)
    state["output_bias"] = state["output_bias"][:, index] + shift
    split.load_state_dict(state)
    return split.eval()


def masked_bias_pays_nothing(seed: int, train: Callable[..., Any], steps: int = 1500,
                             shares: dict[str, float] | None = None) -> Outcome:
    """T5 (e) on trained masked LMs: (1) the merged model split by its bias has the same excess
    on the language as on the twin (to 1e-9: the construction is exact); (2) tied + bias
    trained on the language ends within the seeds' spread of tied + bias trained on the twin,
    far below T4's B(0) for merged bias-free rows. `shares` replaces the split (a test)."""
    del seed  # the members' seeds are fixed: 0..SEEDS-1
    pi = {"s1": 1 / (1 + KAPPA), "s2": KAPPA / (1 + KAPPA)}
    merged_model, merged = train_on(language_spec(("s",)), "mlm", steps, train)
    direct_model, truth = train_on(language_spec(("s1", "s2"), KAPPA, KAPPA), "mlm", steps, train)
    on_twin = excess(merged_model, merged)
    on_language = excess(split_merged(merged_model, merged, truth, shares or pi), truth)
    direct = excess(direct_model, truth)
    b0 = closeness_price(*pair_terms(truth))
    spread = max(np.ptp(on_twin), np.ptp(direct), 1e-4)
    gap = float(np.median(direct) - np.median(on_twin))
    exact = float(np.abs(on_language - on_twin).max())
    ok = exact < 1e-9 and gap <= spread
    return verdict(ok, f"split merged model: excess on language - on twin {exact:.0e}; "
                       f"tied+bias trained on language {np.median(direct):.4f} vs on twin "
                       f"{np.median(on_twin):.4f} (median of {SEEDS}; spread {spread:.4f}); "
                       f"B(0) without bias {b0:.3f}")


def pair_terms(truth: Any, pair: tuple[str, str] = ("s1", "s2")) -> tuple[np.ndarray, np.ndarray]:
    """(a_r, w_r): the pair's exact log-ratio and weight P(r)(p1 + p2) where both are possible."""
    i, j = (truth.vocab.index(s) for s in pair)
    p, q = truth.conditionals[:, i], truth.conditionals[:, j]
    both = (p > 0) & (q > 0)
    return np.log(p[both] / q[both]), truth.context_probs[both] * (p[both] + q[both])


def causal_bound(seed: int, train: Callable[..., Any], steps: int = 400,
                 norm_scale: float = 1.0) -> Outcome:
    """T5 (f) on trained causal LMs with fixed LayerNorms (||h|| <= sqrt(d)) on the conflict
    pair (1 : KAPPA after a, 1 : 1 after b): every tied + bias member's excess is at least
    B_b(||e_s1 - e_s2||), the least pair divergence of rows that close with any bias; and
    B_b(0) > 0 (no bias absorbs the conflict). `norm_scale` multiplies the bound's ||h|| (a
    test hands it a wrong one)."""
    del seed
    model, truth = train_on(language_spec(("s1", "s2"), KAPPA, 1.0), "clm", steps, train,
                            norm_affine=False)
    found = excess(model, truth)
    a, w = pair_terms(truth)
    table = model.embeddings.input_weight.detach()
    i, j = truth.vocab.index("s1"), truth.vocab.index("s2")
    distance = (table[:, i] - table[:, j]).norm(dim=-1).numpy()
    norm = np.sqrt(model.config.d_model) * norm_scale
    bound = np.array([max(closeness_price(a, w, d * norm, bias=True), 0.0) for d in distance])
    closed = closeness_price(a, w, bias=True)
    needed = float(np.abs(a).max() / np.sqrt(model.config.d_model))
    ok = bool(np.all(found >= bound - 1e-9)) and closed > 0
    return verdict(ok, f"excess {', '.join(f'{e:.4f}' for e in found)} >= B_b(delta) "
                       f"{', '.join(f'{b:.4f}' for b in bound)}; B_b(0) {closed:.4f}; rows "
                       f"{', '.join(f'{d:.2f}' for d in distance)} apart (B_b = 0 from "
                       f"{needed:.2f})")
