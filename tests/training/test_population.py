"""fit_population: members end where their certificates say, at a point a second optimiser
(torch's own L-BFGS with a strong-Wolfe line search, one member alone) cannot improve."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dhwt.errors import DhwtError
from dhwt.languages import compute_truth, load_language
from dhwt.languages.population import population_batch
from dhwt.models import ModelConfig, build_model
from dhwt.training.population import PopulationOptions, fit_population

#: Run until the gradient norm is below 1e-4 (at most 4,000 iterations): the end does not hang
#: on how fast one CPU's rounding lets L-BFGS converge.
OPTIONS = PopulationOptions(adam_steps=300, lbfgs_steps=4000, l2=0.1, tolerance=1e-4)
SHORT = PopulationOptions(adam_steps=100, lbfgs_steps=100, l2=0.1, window=50)


def fitted(seeds, tied=True, options=OPTIONS):
    language = load_language("demand", {"k": 2, "pattern": "ratio", "dose": 0.0})
    batch = population_batch(language, "clm")
    config = ModelConfig(vocab_size=len(language.vocab("clm")), max_len=4, d_model=4, d_ff=8,
                         norm="pre", final_norm=False, positions="learned", causal=True)
    model = build_model(config, seeds, tied=tied)
    return language, batch, model, fit_population(model, batch, options)


def objective(model, batch, l2):
    members = (model.members, -1, -1)
    ce = model(batch.inputs.expand(members), targets=batch.targets.expand(members),
               weights=batch.weights.double().expand(members))
    norm = sum(p.pow(2).reshape(model.members, -1).sum(1) for p in model.parameters())
    return ce + 0.5 * l2 * norm, ce


def test_the_certificate_is_what_the_model_holds():
    language, batch, model, cert = fitted([0, 1], options=SHORT)
    value, ce = objective(model, batch, OPTIONS.l2)
    grads = torch.autograd.grad(value.sum(), list(model.parameters()))
    norm = torch.cat([g.reshape(2, -1) for g in grads], 1).norm(dim=1)
    np.testing.assert_allclose(cert.objective, value.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(cert.cross_entropy, ce.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(cert.grad_norm, norm.numpy(), rtol=1e-6, atol=1e-14)
    assert (cert.drift > 0).all()  # the strong-Wolfe line search only ever goes down
    bayes = compute_truth(language, "clm").bayes_cross_entropy
    assert (cert.cross_entropy > bayes).all()


@pytest.mark.slow
def test_a_second_optimiser_cannot_improve_a_certified_member():
    _, batch, model, cert = fitted([5])
    assert cert.grad_norm[0] < 1e-3 and 0 <= cert.drift[0] < 1e-6
    params = list(model.parameters())
    lbfgs = torch.optim.LBFGS(params, max_iter=200, tolerance_grad=1e-12,
                              tolerance_change=1e-15, line_search_fn="strong_wolfe")

    def closure():
        lbfgs.zero_grad()
        value, _ = objective(model, batch, OPTIONS.l2)
        value.sum().backward()
        return value.sum()

    lbfgs.step(closure)
    after, _ = objective(model, batch, OPTIONS.l2)
    assert cert.objective[0] - float(after[0].detach()) < 1e-6


def test_members_are_independent_in_the_adam_phase():
    adam_only = PopulationOptions(adam_steps=200, lbfgs_steps=0, l2=0.1)
    *_, both = fitted([3, 4], options=adam_only)
    *_, alone = fitted([4], options=adam_only)
    assert both.objective[1] == pytest.approx(alone.objective[0], abs=1e-12)


def test_bad_options_are_one_error():
    with pytest.raises(DhwtError, match="lr must be a finite number > 0"):
        PopulationOptions(lr=0.0)


def test_newton_ends_at_a_local_minimum():
    newton = PopulationOptions(adam_steps=300, lbfgs_steps=100, newton_steps=100, l2=0.1)
    _, batch, model, cert = fitted([2], options=newton)
    assert cert.grad_norm[0] < 1e-6  # L-BFGS: ~1e-3 at best
    # positive semidefinite to rounding: a head's rotations leave F flat (dhwt.training.newton)
    assert cert.min_eigenvalue[0] > -1e-8
    assert cert.newton_fall[0] >= 0 and 0 < cert.newton_iterations[0] <= 100
    value, _ = objective(model, batch, newton.l2)
    assert cert.objective[0] == pytest.approx(float(value[0].detach()), rel=1e-12)
    params = list(model.parameters())
    start = [p.detach().clone() for p in params]
    g = torch.Generator().manual_seed(0)
    for _ in range(20):  # every nearby point in a random direction is higher
        with torch.no_grad():
            for p, p0 in zip(params, start):
                p.copy_(p0 + 1e-3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        assert float(objective(model, batch, newton.l2)[0][0]) > cert.objective[0]
