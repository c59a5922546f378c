"""Empirical checks of T5 (proofs/T5_masked_lm.md): what merged rows cost trained transformers.

The language is a small class-variant automaton (strings `a X e`, `b X e`; X is the class S at
0.7 after a and 0.3 after b, else t), whose S is written s1 : s2 = 1 : KAPPA, and its merged
twin, where S is the single symbol s. For a masked LM s1 ~sem s2 at the constant ratio
1 : KAPPA. Four arms of tied transformers are trained on it by exact population AdamW in float64
(every masked context at its probability, soft targets: seconds): rows free or held merged
(s1 and s2 share one row at both ends, MergedPair), each with and without an output bias. T4 (a)
and T5 (e) predict what only the merged arms must show: without a bias they pay B(0) (their pair
divergence is exactly B(0), and the rest of the fit costs little), with one they pay nothing
(the bias carries log KAPPA). Free rows may pay nothing either way, by moving apart (T1): they
are the comparison, not a prediction. The merged + bias model, its bias gap set to log KAPPA,
has exactly the excess on the language that its network has on the twin ((e)'s construction).

The causal check reads pair-ratio's conflict (experiments/tying_price): s1 : s2 = 1 : KAPPA after
a and 1 : 1 after b, for a causal LM with every LayerNorm fixed (norm_affine false), so
||h|| <= sqrt(d) and the tied rows' distance delta gives T5 (f)'s bound B_b(delta) exactly. There
no bias absorbs the pair: merged + bias pays B_b(0) > 0, while free rows, apart, pay B_b(delta) = 0.
"""

from __future__ import annotations

import tempfile
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


def train_on(spec: dict, objective: str, steps: int, **overrides: object
             ) -> tuple[torch.nn.Module, Any]:
    """Train SEEDS members (dhwt.training.runner) on every string of `spec`; return the final
    model in float64 and the exact truth of `objective`."""
    from dhwt.config import TrainConfig
    from dhwt.languages import load_task, write_dataset
    from dhwt.languages.language import language_from_spec
    from dhwt.runs import load_run
    from dhwt.training.runner import train_run

    with tempfile.TemporaryDirectory(prefix="dhwt-verify-") as tmp:
        data = Path(tmp) / "data"
        write_dataset(language_from_spec(spec, "t5"), data, valid_fraction=0.0,
                      test_fraction=0.0, seed=14)
        config = TrainConfig(data=str(data), objective=objective, seeds=list(range(SEEDS)),
                             steps=steps, eval_every=steps, snapshot_every=steps,
                             checkpoint_every=steps, **{**TRAINING, **overrides})
        task = load_task(data, objective)
        run = load_run(train_run(config, task, Path(tmp) / "run").run_dir)
        return run.model().double().eval(), task.truth


def pair_terms(truth: Any, pair: tuple[str, str] = ("s1", "s2")) -> tuple[np.ndarray, np.ndarray]:
    """(a_r, w_r): the pair's exact log-ratio and weight P(r)(p1 + p2) where both are possible."""
    i, j = (truth.vocab.index(s) for s in pair)
    p, q = truth.conditionals[:, i], truth.conditionals[:, j]
    both = (p > 0) & (q > 0)
    return np.log(p[both] / q[both]), truth.context_probs[both] * (p[both] + q[both])


#: "Pays B" means within this share of B above it; "pays nothing", below this share of B.
RESOLUTION = 0.25
#: Exact population training: steps, AdamW learning rate (cosine to a tenth), weight decay.
POPULATION = dict(steps=200, lr=3e-2, weight_decay=0.1)


class MergedPair(torch.nn.Module):
    """A tied model on `vocab` whose tokens `pair` share one row at both ends: a tied network
    (no bias) on the vocabulary with the pair merged into one token `s`, read on the full one,
    plus a per-token output bias (S, V) when `bias`. `logits` reads the network on any
    vocabulary whose tokens it knows (the twin's, with `s`)."""

    def __init__(self, config: Any, seeds: list[int], vocab: tuple[str, ...],
                 pair: tuple[str, str], bias: bool):
        from dataclasses import replace

        from dhwt.models import build_model

        super().__init__()
        self.names = list(dict.fromkeys("s" if t in pair else t for t in vocab))
        self.index = self.lookup(vocab, pair)
        self.net = build_model(replace(config, vocab_size=len(self.names), output_bias=False),
                               seeds, tied=True).double()
        self.bias = (torch.nn.Parameter(torch.zeros(len(seeds), len(vocab), dtype=torch.float64))
                     if bias else None)
        self.members = len(seeds)

    def lookup(self, vocab: tuple[str, ...], pair: tuple[str, str] = ("s1", "s2")) -> torch.Tensor:
        """The network's token id of each token of `vocab` (the pair's: that of s)."""
        return torch.tensor([self.names.index("s" if t in pair else t) for t in vocab])

    def logits(self, inputs: torch.Tensor, index: torch.Tensor,
               bias: torch.Tensor | None) -> torch.Tensor:
        out = self.net(index[inputs])[..., index]
        return out if bias is None else out + bias[:, None, None, :]

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.logits(inputs, self.index, self.bias)


def population_arm(truth: Any, rows: str, bias: bool, causal: bool = False,
                   steps: int = POPULATION["steps"], pair: tuple[str, str] = ("s1", "s2")
                   ) -> tuple[torch.nn.Module, np.ndarray, np.ndarray]:
    """Train SEEDS tied members (TRAINING's shape; LayerNorms fixed when `causal`) on `truth`'s
    exact population by AdamW: `rows` "free" or "merged" (MergedPair), with an output bias or
    not. Returns the model, each member's excess and its pair's row distance (0 when merged)."""
    from dhwt.models import ModelConfig, build_model
    from dhwt.theory.population import contexts, one_thread, population_loss

    ctx = contexts(truth)
    config = ModelConfig(vocab_size=len(truth.vocab), max_len=truth.inputs.shape[1],
                         d_model=TRAINING["d_model"], d_ff=TRAINING["d_ff"],
                         n_layers=TRAINING["n_layers"], n_heads=TRAINING["n_heads"],
                         causal=causal, norm_affine=not causal, output_bias=bias)
    seeds = list(range(SEEDS))
    model = (MergedPair(config, seeds, truth.vocab, pair, bias) if rows == "merged"
             else build_model(config, seeds, tied=True).double())
    optimizer = torch.optim.AdamW(model.parameters(), lr=POPULATION["lr"],
                                  weight_decay=POPULATION["weight_decay"])
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps,
                                                          eta_min=POPULATION["lr"] / 10)
    with one_thread():
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            population_loss(model, ctx).sum().backward()
            optimizer.step()
            schedule.step()
        with torch.no_grad():
            found = (population_loss(model, ctx) - truth.bayes_cross_entropy).numpy()
    if rows == "merged":
        return model, found, np.zeros(SEEDS)
    table = model.embeddings.input_weight.detach()
    i, j = (truth.vocab.index(s) for s in pair)
    return model, found, (table[:, i] - table[:, j]).norm(dim=-1).numpy()


class _Reading(torch.nn.Module):
    """A MergedPair's network read on a vocabulary (`index`: its token ids) with a given bias."""

    def __init__(self, model: MergedPair, index: torch.Tensor, bias: torch.Tensor):
        super().__init__()
        self.model, self.index, self.bias, self.members = model, index, bias, model.members

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model.logits(inputs, self.index, self.bias)


def construction_gap(model: MergedPair, truth: Any, twin: Any, shares: dict[str, float]
                     ) -> float:
    """T5 (e)'s construction on a trained merged + bias model: its bias on the pair replaced by
    b_s + log(shares[token]), b_s = logsumexp of the pair's biases, against its network on the
    twin with bias b_s on s. Returns max over members |excess on the language - on the twin|."""
    from dhwt.theory.population import contexts, population_loss

    b = model.bias.detach()
    i, j = truth.vocab.index("s1"), truth.vocab.index("s2")
    merged = torch.logsumexp(b[:, [i, j]], dim=1)
    split = b.clone()
    split[:, i], split[:, j] = merged + np.log(shares["s1"]), merged + np.log(shares["s2"])
    on_twin = b[:, [truth.vocab.index("s1" if t == "s" else t) for t in twin.vocab]].clone()
    on_twin[:, twin.vocab.index("s")] = merged

    with torch.no_grad():
        language = population_loss(_Reading(model, model.index, split), contexts(truth))
        language -= truth.bayes_cross_entropy
        merged_twin = population_loss(_Reading(model, model.lookup(twin.vocab), on_twin),
                                      contexts(twin))
        merged_twin -= twin.bayes_cross_entropy
    return float((language - merged_twin).abs().max())


def _medians(found: dict[str, np.ndarray]) -> str:
    return ", ".join(f"{name} {np.median(values):.4f}" for name, values in found.items())


def masked_merged_rows(seed: int, merge: bool = True,
                       shares: dict[str, float] | None = None) -> Outcome:
    """T4 (a) and T5 (e) on trained masked LMs (module doc): merged rows without a bias pay
    B(0) (every member >= B(0), the median within RESOLUTION B(0) above it), with a bias
    nothing (median below RESOLUTION B(0)); free rows, with and without a bias, are reported
    beside; the merged + bias model split by its bias has its twin's excess to 1e-9.
    `merge` False trains the "merged" arms with free rows, `shares` replaces the split (tests)."""
    del seed  # the members' seeds are fixed: 0..SEEDS-1
    from dhwt.languages import compute_truth
    from dhwt.languages.language import language_from_spec

    truth = compute_truth(language_from_spec(language_spec(("s1", "s2"), KAPPA, KAPPA), "t5"),
                          "mlm")
    twin = compute_truth(language_from_spec(language_spec(("s",)), "t5"), "mlm")
    b0 = closeness_price(*pair_terms(truth))
    found, models = {}, {}
    for rows in ("free", "merged"):
        for bias in (True, False):
            name = f"{rows}{' + bias' if bias else ''}"
            models[name], found[name], _ = population_arm(
                truth, rows if merge else "free", bias)
    exact = (construction_gap(models["merged + bias"], truth, twin,
                              shares or {"s1": 1 / (1 + KAPPA), "s2": KAPPA / (1 + KAPPA)})
             if merge else np.inf)
    pays = bool(np.all(found["merged"] >= b0 - 1e-9)
                and np.median(found["merged"]) - b0 <= RESOLUTION * b0)
    free_of_charge = np.median(found["merged + bias"]) < RESOLUTION * b0
    return verdict(pays and free_of_charge and exact < 1e-9,
                   f"excess (median of {SEEDS}): {_medians(found)}; B(0) {b0:.4f}; merged + "
                   f"bias split by log-ratio: excess on language - on twin {exact:.0e}")


def causal_merged_rows(seed: int, norm_scale: float = 1.0, after_b: float = 1.0) -> Outcome:
    """T5 (f) on trained causal LMs with fixed LayerNorms (||h|| <= sqrt(d)) on the conflict
    pair (1 : KAPPA after a, `after_b` after b): B_b(0) > 0; merged rows with a bias pay it
    (every member >= B_b(0), the median within RESOLUTION B_b(0) above it), without one at
    least B(0); free rows with a bias pay at least B_b(||e_s1 - e_s2||) (0 once they are
    |log KAPPA| / sqrt(d) apart). `norm_scale` multiplies the bound's ||h|| (a test hands it a
    wrong one); `after_b` = KAPPA makes the ratio constant (a test: then B_b(0) = 0)."""
    del seed
    from dhwt.languages import compute_truth
    from dhwt.languages.language import language_from_spec

    truth = compute_truth(language_from_spec(language_spec(("s1", "s2"), KAPPA, after_b), "t5"),
                          "clm")
    a, w = pair_terms(truth)
    b0, closed = closeness_price(a, w), closeness_price(a, w, bias=True)
    found = {}
    for name, rows, bias in (("free + bias", "free", True), ("merged + bias", "merged", True),
                             ("merged", "merged", False)):
        model, found[name], distances = population_arm(truth, rows, bias, causal=True)
        if name == "free + bias":
            distance, norm = distances, np.sqrt(model.config.d_model) * norm_scale
            bound = np.array([max(closeness_price(a, w, d * norm, bias=True), 0.0)
                              for d in distance])
    needed = float(np.abs(a).max() / np.sqrt(TRAINING["d_model"]))
    ok = (closed > 0 and bool(np.all(found["free + bias"] >= bound - 1e-9))
          and bool(np.all(found["merged + bias"] >= closed - 1e-9))
          and np.median(found["merged + bias"]) - closed <= RESOLUTION * closed
          and bool(np.all(found["merged"] >= b0 - 1e-9)))
    return verdict(ok, f"excess (median of {SEEDS}): {_medians(found)}; B_b(0) {closed:.4f}, "
                       f"B(0) {b0:.4f}; free rows {', '.join(f'{d:.2f}' for d in distance)} "
                       f"apart, B_b(delta) {', '.join(f'{v:.4f}' for v in bound)} (0 from "
                       f"{needed:.2f})")
