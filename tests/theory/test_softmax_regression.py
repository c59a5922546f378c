"""The numeric model class the output-side checks rely on, against independent computations."""

from __future__ import annotations

import numpy as np

from dhwt.theory import softmax_regression as sr


def instance(seed=0, n=12, d=3, V=4):
    g = np.random.default_rng(seed)
    truth = g.dirichlet(np.ones(V), size=n)
    return sr.Instance(g.normal(size=(n, d)), sr.random_weights(g, n), truth), g


def J(inst, U, b):
    return sr.objective(inst, U, b, lam=0.3, lam_bias=0.2)


def test_gradient_matches_central_differences():
    inst, g = instance()
    U, b = g.normal(size=(4, 3)), g.normal(size=4)
    gU, gb = sr.gradient(inst, U, b, lam=0.3, lam_bias=0.2)
    eps = 1e-6
    for i, j in np.ndindex(U.shape):
        up, down = U.copy(), U.copy()
        up[i, j] += eps
        down[i, j] -= eps
        fd = (J(inst, up, b) - J(inst, down, b)) / (2 * eps)
        assert abs(fd - gU[i, j]) < 1e-7
    for i in range(4):
        up, down = b.copy(), b.copy()
        up[i] += eps
        down[i] -= eps
        fd = (J(inst, U, up) - J(inst, U, down)) / (2 * eps)
        assert abs(fd - gb[i]) < 1e-7


def test_excess_is_objective_minus_conditional_entropy():
    inst, g = instance(1)
    U = g.normal(size=(4, 3))
    entropy = -np.sum(inst.weights[:, None] * inst.truth * np.log(inst.truth))
    assert abs(sr.excess(inst, U) - (sr.objective(inst, U) - entropy)) < 1e-12


def test_newton_finds_the_realised_truth():
    g = np.random.default_rng(2)
    features = g.normal(size=(20, 3))
    star = g.normal(size=(5, 3))
    inst = sr.Instance(features, sr.random_weights(g, 20), sr.probabilities(features, star))
    U, _, grad = sr.newton(inst, np.zeros((5, 3)))
    assert grad < 1e-12
    assert np.abs(sr.probabilities(features, U) - inst.truth).max() < 1e-10
    # softmax is blind to a common shift of all rows; the truth is recovered up to that shift
    shift = (U - star).mean(axis=0)
    assert np.abs(U - star - shift).max() < 1e-8


def test_truth_with_pair_has_the_ratio():
    g = np.random.default_rng(3)
    p = sr.truth_with_pair(g, 10, 5, (1, 3), 9.0)
    assert np.allclose(p.sum(axis=1), 1) and np.allclose(p[:, 1], 9 * p[:, 3])
