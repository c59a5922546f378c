"""Fit an ensemble to a language's exact population objective and certify where each member ends.

The objective of member i is F_i(θ_i) = CE_i(θ_i) + (l2 / 2) ||θ_i||^2: CE_i its exact population
cross-entropy (one weighted batch, dhwt.languages.population), the L2 term over every parameter
of the member so that a minimiser exists (a token that is never predicted, such as [BOS], would
otherwise push its logit to -inf forever).

1. `adam_steps` of Adam (lr `lr`) on F: each member on its own, all at once, in `adam_dtype`
   (float32 by default: about twice as fast on a CPU, and the polish reads the end in `dtype`);
2. a polish by torch's L-BFGS (history `history`, strong-Wolfe line search), member by member
   (one L-BFGS on the ensemble's sum shares its line search and curvature pairs between
   members and converged ten to a thousand times slower), up to `lbfgs_steps` iterations or
   until the member's gradient norm is below `tolerance`;
3. with `newton_steps`, trust-region Newton on the exact Hessian (dhwt.training.newton), member
   by member, until the gradient norm is below `newton_tolerance` or rounding stops it:
   quadratic convergence where L-BFGS crawls, and a second-order certificate (the Hessian's
   smallest eigenvalue).

Float64 by default: at float32 the gradient of a cross-entropy near 0.5 nats cannot be read
below about 1e-7, and a certificate must be.

The certificate of each member: its objective, exact cross-entropy, gradient norm at the end,
drift (the objective's fall over the last `window` L-BFGS iterations); after Newton, the fall
Newton made past L-BFGS and the Hessian's smallest eigenvalue at the end (not below zero to
rounding, with a gradient norm near rounding: the second-order necessary conditions). L-BFGS's
convergence is linear at best (a pre-LN transformer's scale symmetries leave directions whose
only curvature is the L2 term): on a K 2, d 4 demand language at l2 0.1 the gradient norm falls
about tenfold per 300 iterations; a study declares the gradient norm and drift it accepts. The
objective is not convex: a member may end at a stationary point that is not the best.
`restart_gaps` compares members of one arm started from different seeds (restarts): each
member's gap to the best.

Examples:
    >>> import torch
    >>> from dhwt.languages import load_language
    >>> from dhwt.languages.population import population_batch
    >>> from dhwt.models import ModelConfig, build_model
    >>> language = load_language("demand", {"k": 2, "pattern": "constant"})
    >>> batch = population_batch(language, "clm")
    >>> config = ModelConfig(vocab_size=len(language.vocab("clm")), max_len=4, d_model=4,
    ...                      d_ff=16, norm="pre", final_norm=False, positions="learned")
    >>> model = build_model(config, [0, 1], tied=True)
    >>> cert = fit_population(model, batch, PopulationOptions(adam_steps=20, lbfgs_steps=25))
    >>> cert.iterations.tolist(), model.embeddings.input_weight.dtype
    ([25, 25], torch.float64)
    >>> cert = fit_population(model, batch, PopulationOptions(
    ...     adam_steps=300, lbfgs_steps=100, l2=0.1, newton_steps=50))
    >>> bool((cert.grad_norm < 1e-6).all()), bool((cert.min_eigenvalue > -1e-8).all())
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from dhwt.checks import Instance, Integer, Real, check_fields
from dhwt.languages.batch import Batch
from dhwt.models import build_model
from dhwt.training.newton import NewtonEnd, newton

#: L-BFGS iterations between two checks of every member's gradient norm (and between two
#: points of the objective's trace, which `window` is read in).
CHECK_EVERY = 25


@dataclass(frozen=True)
class PopulationOptions:
    """How `fit_population` runs; checked when made."""

    adam_steps: int = 2000
    lr: float = 1e-2
    lbfgs_steps: int = 1000
    newton_steps: int = 0
    history: int = 50
    l2: float = 1e-4
    tolerance: float = 1e-6
    newton_tolerance: float = 1e-9
    window: int = 100
    dtype: torch.dtype = torch.float64
    adam_dtype: torch.dtype = torch.float32

    CONSTRAINTS = {"adam_steps": [Integer(0)], "lr": [Real(0.0, low_open=True)],
                   "lbfgs_steps": [Integer(0)], "newton_steps": [Integer(0)],
                   "history": [Integer(1)], "l2": [Real(0.0)], "tolerance": [Real(0.0)],
                   "newton_tolerance": [Real(0.0)], "window": [Integer(1)],
                   "dtype": [Instance(torch.dtype)], "adam_dtype": [Instance(torch.dtype)]}

    def __post_init__(self) -> None:
        check_fields(self, self.CONSTRAINTS)


@dataclass(frozen=True)
class Certificate:
    """Where each member of an ensemble ended; arrays are (S,)."""

    objective: np.ndarray
    cross_entropy: np.ndarray
    grad_norm: np.ndarray
    drift: np.ndarray
    iterations: np.ndarray  # the L-BFGS iterations each member ran, in steps of CHECK_EVERY
    newton_fall: np.ndarray  # F at L-BFGS's end minus F at Newton's (0 without Newton)
    min_eigenvalue: np.ndarray  # the Hessian's smallest eigenvalue at the end (NaN without Newton)
    newton_iterations: np.ndarray


def fit_population(model: torch.nn.Module, batch: Batch, options: PopulationOptions,
                   progress: Callable[[str, int], None] | None = None) -> Certificate:
    """Minimise every member's F on `batch` (B, L), shared by the members, in place (the model
    ends in options.dtype); the members' certificates. `progress(phase, step)` is called
    after each step of either phase."""
    model.train(False)
    if options.adam_steps:
        model.to(options.adam_dtype)
        params = [p for p in model.parameters() if p.requires_grad]
        objective = _Objective(model, params, batch, options.l2, options.adam_dtype)
        adam = torch.optim.Adam(params, lr=options.lr)
        for step in range(options.adam_steps):
            adam.zero_grad(set_to_none=True)
            value, _ = objective.terms()
            value.sum().backward()
            adam.step()
            if progress is not None:
                progress("adam", step + 1)
    model.to(options.dtype)
    objective = _Objective(model, [p for p in model.parameters() if p.requires_grad], batch,
                           options.l2, options.dtype)
    polished = [_polish(model, i, batch, options, progress) for i in range(model.members)]
    f, ce, grad_norm = objective.measure()
    traces = [trace for trace, _ in polished]
    past = torch.stack([t[max(0, len(t) - 1 - -(-options.window // CHECK_EVERY))]
                        for t in traces])
    lbfgs_end = torch.stack([t[-1] for t in traces])
    ends = [end for _, end in polished]
    return Certificate(
        objective=f.numpy(), cross_entropy=ce.numpy(), grad_norm=grad_norm.numpy(),
        drift=(past - lbfgs_end).numpy(),
        iterations=np.array([(len(t) - 1) * CHECK_EVERY for t in traces]),
        newton_fall=(lbfgs_end - f).numpy(),
        min_eigenvalue=np.array([np.nan if e is None else e.min_eigenvalue for e in ends]),
        newton_iterations=np.array([0 if e is None else e.iterations for e in ends]))


def _polish(model, member: int, batch: Batch, options: PopulationOptions,
            progress: Callable[[str, int], None] | None
            ) -> tuple[list[torch.Tensor], NewtonEnd | None]:
    """L-BFGS, then Newton (with options.newton_steps), on member `member` alone (a one-member
    copy of the model, written back after); the trace of its F every CHECK_EVERY L-BFGS
    iterations, and where Newton ended."""
    solo = build_model(model.config, [model.seeds[member]],
                       tied=model.embeddings.tied_members[member]).to(options.dtype)
    solo.load_state_dict({name: value[member:member + 1]
                          for name, value in model.state_dict().items()
                          if name != "embeddings.tied_members"})
    params = [p for p in solo.parameters() if p.requires_grad]
    objective = _Objective(solo, params, batch, options.l2, options.dtype)
    lbfgs = torch.optim.LBFGS(params, lr=1.0, max_iter=CHECK_EVERY, history_size=options.history,
                              tolerance_grad=0.0, tolerance_change=0.0,
                              line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        lbfgs.zero_grad(set_to_none=True)
        value, _ = objective.terms()
        value.sum().backward()
        return value.sum()

    trace = [objective.measure()[0][0]]
    for rounds in range(1, -(-options.lbfgs_steps // CHECK_EVERY) + 1):
        lbfgs.step(closure)
        value, _, grad_norm = objective.measure()
        trace.append(value[0])
        if progress is not None:
            progress(f"lbfgs {member}", rounds * CHECK_EVERY)
        if float(grad_norm[0]) < options.tolerance:
            break
    end = None
    if options.newton_steps:
        end = newton(params, lambda: objective.terms()[0].sum(), options.newton_steps,
                     options.newton_tolerance)
        if progress is not None:
            progress(f"newton {member}", end.iterations)
    with torch.no_grad():
        for mine, theirs in zip(model.parameters(), solo.parameters()):
            mine[member] = theirs[0]
    return trace, end


def restart_gaps(objective: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each member's objective minus the best of its group (members started from different
    seeds, `groups` (S,) labels): how far each restart ended from the best one found.

    Examples:
        >>> restart_gaps(np.array([1.0, 1.5, 2.0, 2.25]), np.array([0, 0, 1, 1])).tolist()
        [0.0, 0.5, 0.0, 0.25]
    """
    best = {g: objective[groups == g].min() for g in np.unique(groups)}
    return objective - np.array([best[g] for g in groups])


class _Objective:
    """F of every member of `model` on one batch, at the parameters' present values."""

    def __init__(self, model, params, batch: Batch, l2: float, dtype: torch.dtype) -> None:
        self.model, self.params, self.l2 = model, params, l2
        self.members = params[0].shape[0]
        expand = (self.members, -1, -1)
        self.inputs = batch.inputs.expand(expand)
        self.targets = batch.targets.expand(expand)
        self.weights = batch.weights.to(dtype).expand(expand)
        self.padding = None if batch.padding is None else batch.padding.expand(expand)

    def terms(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(F, CE) per member at the parameters' present values, with their graph."""
        ce = self.model(self.inputs, self.padding, targets=self.targets, weights=self.weights)
        norm = sum(p.pow(2).reshape(self.members, -1).sum(1) for p in self.params)
        return ce + 0.5 * self.l2 * norm, ce

    def measure(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(F, CE, ||grad F||) per member, (S,) each, from one forward and backward pass (the
        parameters' .grad left as they were)."""
        value, ce = self.terms()
        grads = torch.autograd.grad(value.sum(), self.params, allow_unused=True)
        norm = torch.cat([(torch.zeros_like(p) if g is None else g).reshape(self.members, -1)
                          for p, g in zip(self.params, grads)], dim=1).norm(dim=1)
        return value.detach(), ce.detach(), norm
