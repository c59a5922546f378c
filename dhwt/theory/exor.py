"""Empirical checks: the theorems against the package's own Transformer on EXor (and, for T1, on a
random grammar whose log-ratios take many values), with exact truth.

Every check reads the exact population of masked contexts from dhwt.languages (GroundTruth:
contexts r, P(r), p(.|r)) and the hidden states h(r) from dhwt.models (Transformer.hidden at the
masked position). The language is EXor with N_BITS = 4 bits (16 strings, 512 masked contexts; the
paper's variants: 0 -> 0a/0b at 0.1/0.9, 1 -> 1a/1b at 0.5/0.5): small enough that exact
population gradients take milliseconds and that a small transformer reaches the optimum in
seconds, which the paper's 7-bit language with its d=4 model does only after ~10^5 steps.

- population_descent (T2) and symmetric_input_rows (T3) train by exact population gradients in
  float64 (plain GD; AdamW) with the package's model: default mode, seconds.
- log_odds_regression (T1) and tying_conflict (T4) train with the package's trainer
  (dhwt.training.runner: sampled variants, AdamW) and read the final checkpoint through
  dhwt.runs.load_run: --full, about a minute each run.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from dhwt.errors import DhwtError
from dhwt.theory import softmax_regression as sr
from dhwt.theory.check import Outcome, verdict
from dhwt.theory.population import Contexts, contexts, masked, one_thread, population_loss
from dhwt.theory.t4_tying_conflict import bernoulli_kl, merge_price

N_BITS = 4
ROUND_OFF = 1e-12  # float64 slack per step, relative to the size of the output matrix
#: The trainer setting of the --full checks: a transformer that learns 4-bit EXor in ~3000 steps.
#: Weight decay is chosen per check: 0 for T1 (the unregularised optimum), the paper's 0.1 for T4.
TRAINING = dict(d_model=16, d_ff=16, n_layers=2, n_heads=4, steps=3000, lr=1e-2, lr_min=1e-3,
                lr_schedule="cosine", batch_size=None, threads=1)


@lru_cache(maxsize=2)
def exor_contexts(n_bits: int = N_BITS) -> Contexts:
    """Every masked context of EXor with `n_bits` bits, its exact probability and conditional."""
    from dhwt.languages import compute_truth, load_language

    return contexts(compute_truth(load_language("parity", {"n_bits": n_bits}), "mlm"))


def hidden_states(model: torch.nn.Module, ctx: Contexts) -> torch.Tensor:
    """(S, n, d) h(r) at the masked position, without gradient."""
    with torch.no_grad():
        return masked(model.hidden(ctx.inputs.expand(model.members, -1, -1)), ctx)


def untied_float64(seed: int, ctx: Contexts) -> torch.nn.Module:
    """The paper's EXor transformer (ModelConfig defaults), untied, no output bias, in float64."""
    from dhwt.models import ModelConfig, Transformer

    config = ModelConfig(vocab_size=len(ctx.truth.vocab), max_len=ctx.inputs.shape[-1])
    return Transformer(config, [seed], tied=False).double()


def _row_distance(matrix: torch.Tensor, i: int, j: int) -> float:
    return float((matrix[0, i] - matrix[0, j]).detach().norm())


def _pair_distance(matrix: torch.Tensor, ctx: Contexts, pair: tuple[str, str]) -> float:
    return _row_distance(matrix, ctx.index(pair[0]), ctx.index(pair[1]))


# ---- T2 -------------------------------------------------------------------------------------


def population_descent(seed: int, steps: int = 150, lam: float = 0.05, eta_max: float = 0.5,
                       pairs: list[tuple[str, str]] | None = None) -> Outcome:
    """T2 on the package's Transformer: exact population GD of every parameter with coupled weight
    decay lam, step eta_k = min(eta_max, 0.95 / (lam + M_k^2/4)) with M_k = max_r ||h_k(r)||.
    Every conditionally equivalent pair of the truth (1a/1b; EVEN/ODD, never predicted) must
    satisfy ||D_{k+1}|| <= (1 - eta_k lam) ||D_k|| at every step, while the features move.
    `pairs` replaces the truth's cnd pairs (a test hands it a pair that is not cnd)."""
    ctx = exor_contexts()
    pairs = pairs or [(p.first, p.second) for p in ctx.truth.pairs() if p.cnd]
    model = untied_float64(seed, ctx)
    out = model.embeddings.output_weight
    start = {pair: _pair_distance(out, ctx, pair) for pair in pairs}
    worst = dict.fromkeys(pairs, 0.0)
    violations = 0
    zero_a, zero_b = ctx.index("0a"), ctx.index("0b")
    zero_start = _row_distance(out, zero_a, zero_b)
    with one_thread():
        for _ in range(steps):
            bound = float(hidden_states(model, ctx).norm(dim=-1).max())
            eta = min(eta_max, 0.95 / (lam + bound**2 / 4))
            before = {pair: _pair_distance(out, ctx, pair) for pair in pairs}
            model.zero_grad(set_to_none=True)
            population_loss(model, ctx).sum().backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= eta * (p.grad + lam * p)
            size = float(out.detach().abs().max())
            for pair in pairs:
                after = _pair_distance(out, ctx, pair)
                allowed = (1 - eta * lam) * before[pair]
                violations += after > allowed + ROUND_OFF * max(1.0, size)
                if before[pair] > 1e-9:
                    worst[pair] = max(worst[pair], after / allowed)
    final = {pair: _pair_distance(out, ctx, pair) for pair in pairs}
    text = "; ".join(f"{a}/{b} {start[(a, b)]:.2f}->{final[(a, b)]:.1e} (worst {worst[(a, b)]:.4f})"
                     for a, b in pairs)
    zero_end = _row_distance(out, zero_a, zero_b)
    return verdict(violations == 0 and len(pairs) > 0,
                   f"{text}; 0a/0b (not cnd) {zero_start:.2f}->{zero_end:.2f}; "
                   f"{violations} violations")


# ---- T3 -------------------------------------------------------------------------------------


def symmetric_input_rows(seed: int, steps: int = 100, symmetric: bool = True) -> Outcome:
    """T3(a) and (b) on the package's Transformer: input rows 1b := 1a and 0b := 0a at init, then
    exact population training in float64, once by plain GD (step 0.5) and once by AdamW (lr 1e-2,
    weight decay 0.1, eps 1e-12). 1a/1b occur 1:1 (swap-invariant data): equal rows under both.
    0a is a 1/9-scaled copy of 0b: its gradient is exactly 1/9 of 0b's while the rows are equal,
    so GD parts them and Adam, blind to a constant gradient scale, keeps them equal.
    symmetric=False skips the copying (a test: the prediction then fails)."""
    ctx = exor_contexts()
    one_a, one_b, zero_a, zero_b = (ctx.index(t) for t in ("1a", "1b", "0a", "0b"))
    found = {}
    for method in ("gd", "adamw"):
        model = untied_float64(seed, ctx)
        table = model.embeddings.input_weight
        if symmetric:
            with torch.no_grad():
                table[0, one_b] = table[0, one_a]
                table[0, zero_b] = table[0, zero_a]
        if method == "adamw":
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-12, weight_decay=0.1)
        else:
            optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        worst_one = worst_zero = 0.0
        with one_thread():
            for _ in range(steps):
                optimizer.zero_grad(set_to_none=True)
                population_loss(model, ctx).sum().backward()
                optimizer.step()
                worst_one = max(worst_one, _row_distance(table, one_a, one_b))
                worst_zero = max(worst_zero, _row_distance(table, zero_a, zero_b))
        found[method] = (worst_one, worst_zero)
    ok = (max(found["gd"][0], *found["adamw"]) <= 1e-9) and found["gd"][1] > 1e-3
    (gd_one, gd_zero), (adam_one, adam_zero) = found["gd"], found["adamw"]
    return verdict(ok, f"max_t ||e1a-e1b||: GD {gd_one:.0e}, AdamW {adam_one:.0e}; "
                       f"max_t ||e0a-e0b||: GD {gd_zero:.3f}, AdamW {adam_zero:.0e}")


# ---- trained models (dhwt.training.runner) -----------------------------------------------------


@dataclass(frozen=True)
class Trained:
    """A model trained by the package's trainer, read back from its final checkpoint, in float64:
    h (n, d) at the masked positions, output rows U (V, d), bias b (V,) or None, and the logits
    (n, V) its forward pass computes (not recomputed from h and U: the checks test that
    the head really is U h + b)."""

    h: np.ndarray
    U: np.ndarray
    b: np.ndarray | None
    logits: np.ndarray
    tied: bool

    def excess(self, ctx: Contexts) -> float:
        """sum_r P(r) KL(p(.|r) || q(.|r)) over every context, nats."""
        log_q = self.logits - np.logaddexp.reduce(self.logits, axis=1, keepdims=True)
        p = ctx.truth.conditionals
        terms = np.where(p > 0, p * (np.log(np.where(p > 0, p, 1.0)) - log_q), 0.0)
        return float(ctx.truth.context_probs @ terms.sum(axis=1))


@lru_cache(maxsize=6)
def trained(seed: int, schedule: str, output_bias: bool, weight_decay: float) -> Trained:
    """Train EXor (N_BITS, every string in the training split) with the TRAINING setting
    (dhwt.training.runner)."""
    from dhwt.config import TrainConfig
    from dhwt.languages import load_language, load_task, write_dataset
    from dhwt.runs import load_run
    from dhwt.training.runner import train_run

    steps = int(TRAINING["steps"])
    with tempfile.TemporaryDirectory(prefix="dhwt-verify-") as tmp:
        write_dataset(load_language("parity", {"n_bits": N_BITS}), Path(tmp) / "data",
                      valid_fraction=0.0, test_fraction=0.0, seed=14)
        task = load_task(Path(tmp) / "data", "mlm")
        config = TrainConfig(data=str(Path(tmp) / "data"), seeds=[42 + seed],
                             tie_schedule=schedule, output_bias=output_bias,
                             weight_decay=weight_decay, eval_every=steps, snapshot_every=steps,
                             checkpoint_every=steps, **TRAINING)
        model = load_run(train_run(config, task, Path(tmp) / "run").run_dir).model()
    return read_members(model, exor_contexts())[0]


def read_members(model: torch.nn.Module, ctx: Contexts) -> list[Trained]:
    """Each member of a trained ensemble model as a Trained, in float64, on `ctx`'s contexts."""
    model = model.double().eval()
    with torch.no_grad():
        logits = masked(model(ctx.inputs.expand(model.members, -1, -1)), ctx).numpy()
    h = hidden_states(model, ctx).numpy()
    U = model.embeddings.output_weight.detach().numpy()
    bias = getattr(model, "output_bias", None)
    b = None if bias is None else bias.detach().numpy()
    return [Trained(h[m], U[m], None if b is None else b[m], logits[m], model.embeddings.tied)
            for m in range(model.members)]


def run_members(run_dir: str | Path) -> tuple[Contexts, list[tuple[int, Trained]]]:
    """The newest checkpoint of a masked-LM run directory: its language's exact contexts and
    (seed, Trained) per member. Any architecture with a linear head (Transformer, LSTM, Mixer)."""
    from dhwt.runs import load_run

    run = load_run(run_dir)
    if run.task.objective != "mlm" or run.task.truth is None:
        raise DhwtError(f"{run_dir} is not a masked-LM run on a synthetic language")
    members = read_members(run.model(), contexts(run.task.truth))
    return contexts(run.task.truth), list(zip(run.config.members.seeds, members))


def log_odds_points(run: Trained, ctx: Contexts,
                    symbols: tuple[str, ...]) -> tuple[np.ndarray, ...]:
    """(x, y, w) over ordered pairs of distinct `symbols` and contexts where both have p > 0:
    x = the model's logit difference, y = the exact log-ratio, w = P(r)."""
    logits = run.logits
    xs, ys, ws = [], [], []
    for s in symbols:
        for t in symbols:
            if s == t:
                continue
            i, j = ctx.index(s), ctx.index(t)
            both = (ctx.truth.conditionals[:, i] > 0) & (ctx.truth.conditionals[:, j] > 0)
            xs.append((logits[:, i] - logits[:, j])[both])
            ys.append(ctx.truth.log_ratio(s, t)[both])
            ws.append(ctx.truth.context_probs[both])
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)


def weighted_fit(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """(slope, R^2) of the weighted least-squares line x ~ a + slope * y."""
    w = w / w.sum()
    mx, my = w @ x, w @ y
    cov, vx, vy = w @ ((x - mx) * (y - my)), w @ (x - mx) ** 2, w @ (y - my) ** 2
    return float(cov / vy), float(cov**2 / (vx * vy))


def log_odds_regression(seed: int) -> Outcome:
    """T1 on an untied model trained by the package (no weight decay), see log_odds_outcome."""
    return log_odds_outcome(trained(seed, "untied", False, 0.0), exor_contexts())


def log_odds_many_ratios(seed: int, steps: int = 5000) -> Outcome:
    """T1 where the log-ratios take many values (EXor's take three): a seeded random layered
    grammar (dhwt.theory.t5_grammars, positive, its planted pair at a ratio per state), four
    untied bias-free members trained by the package without weight decay; every member must pass
    log_odds_outcome."""
    from dhwt.theory.price import train_on
    from dhwt.theory.t5_grammars import random_positive_spec

    spec = random_positive_spec(np.random.default_rng([seed, 1]), constant=False)
    model, truth = train_on(spec, "mlm", steps, tie_schedule="untied", output_bias=False,
                            weight_decay=0.0)
    ctx = contexts(truth)
    symbols = tuple(s for s in truth.symbols if s not in truth.never_predicted)
    members = read_members(model, ctx)
    ratios = len(np.unique(np.round(log_odds_points(members[0], ctx, symbols)[1], 9)))
    outcomes = [log_odds_outcome(run, ctx) for run in members]
    return verdict(all(o.passed for o in outcomes),
                   f"{ratios} distinct log-ratios over {len(truth.context_probs)} contexts; "
                   + "; ".join(o.measured.split(" over ")[0] for o in outcomes))


def log_odds_outcome(run: Trained, ctx: Contexts) -> Outcome:
    """Regress the model's log-odds of s vs t on the exact log p(s|r)/p(t|r) over the predicted
    symbols and the contexts where both are possible: near the optimum slope ~ 1 and R^2 ~ 1."""
    symbols = tuple(s for s in ctx.truth.symbols if s not in ctx.truth.never_predicted)
    slope, r2 = weighted_fit(*log_odds_points(run, ctx, symbols))
    return verdict(abs(slope - 1) <= 0.1 and r2 >= 0.95,
                   f"slope {slope:.3f}, R^2 {r2:.4f} over {len(symbols)} symbols; "
                   f"excess CE {run.excess(ctx):.4f} nats")


# ---- T4 -------------------------------------------------------------------------------------


def tying_conflict(seed: int, weight_decay: float = 0.1) -> Outcome:
    """T4 on models trained by the package with AdamW weight decay 0.1 (the paper's): untied, tied,
    and tied with an output bias; see tying_outcome."""
    runs = [(schedule + (" + bias" if bias else ""),
             trained(seed, schedule, bias, weight_decay))
            for schedule, bias in (("untied", False), ("tied", False), ("tied", True))]
    return tying_outcome(runs, exor_contexts())


def tying_outcome(runs: list[tuple[str, Trained]], ctx: Contexts) -> Outcome:
    """For the EXor pair 0a/0b (c = 9) in each run without a bias: the pair's divergence, computed
    from the model's own logits, is at least B(||u0a - u0b||) (the theorem, which needs the head to
    be U h with no bias), and a run at the pair optimum (pair KL <= 1e-3) keeps
    ||u0a - u0b|| >= 0.95 log 9 / min ||h|| (T1's bound). Runs with a bias: reported only."""
    parts, ok = [], True
    i, j = ctx.index("0a"), ctx.index("0b")
    both = (ctx.truth.conditionals[:, i] > 0) & (ctx.truth.conditionals[:, j] > 0)
    p_i, p_j = ctx.truth.conditionals[both, i], ctx.truth.conditionals[both, j]
    weights = ctx.truth.context_probs[both] * (p_i + p_j)
    for name, run in runs:
        distance = float(np.linalg.norm(run.U[i] - run.U[j]))
        one = float(np.linalg.norm(run.U[ctx.index("1a")] - run.U[ctx.index("1b")]))
        if run.b is not None:
            parts.append(f"{name}: d0 {distance:.2f}, b0a-b0b {run.b[i] - run.b[j]:.2f} "
                         f"(-log 9 = -2.20), d1 {one:.2f}")
            continue
        inst = sr.Instance(run.h[both], ctx.truth.context_probs[both], ctx.truth.conditionals[both])
        x = run.logits[both, i] - run.logits[both, j]
        divergence = float(weights @ bernoulli_kl(np.log(p_i / p_j), x))
        price = merge_price(inst, distance, (i, j))
        needed = np.log(9) / float(np.linalg.norm(inst.features, axis=1).min())
        ok &= divergence >= price - 1e-9
        ok &= divergence > 1e-3 or distance >= 0.95 * needed
        parts.append(f"{name}: d0 {distance:.2f} >= log9/min||h|| {needed:.2f}, "
                     f"pair KL {divergence:.0e} >= B {price:.0e}, d1 {one:.2f}")
    return verdict(ok, "; ".join(parts))
