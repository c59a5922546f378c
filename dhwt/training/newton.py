"""Newton's method on a small objective with its exact Hessian, and the second-order certificate.

A trust-region Newton method that reads the Hessian through Hessian-vector products (scipy's
`trust-krylov`: a Krylov solve of each trust-region subproblem, which handles indefinite
Hessians) converges quadratically near a minimum, where L-BFGS crawls along the directions a
pre-LN transformer's scale symmetries leave to the L2 term. Each product is one backward pass
through the gradient's graph (built once per point, under twice_differentiable). Where it ends,
the whole Hessian (one product per parameter: for models of a few thousand parameters, as the
population fits of dhwt.training.population) gives the certificate: a gradient norm near
rounding and no eigenvalue below zero (to rounding) meet the second-order necessary conditions
(a local minimum where the flat directions are symmetries, as below); a clearly negative
eigenvalue says the point is a saddle. Ours, checked on one K 2 model
only: a transformer's minima are not strict even with an L2 term, since rotating a head's query
and key spaces together (or its value space against the output projection) changes neither the
loss nor any norm, so the Hessian has exact zeros there and the smallest eigenvalue sits at
rounding (about 1e-11), of either sign.

Examples:
    >>> import torch
    >>> x = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)
    >>> end = newton([x], lambda: (x[0] - 3) ** 4 + x[0] ** 2 + (x[1] + 1) ** 2, steps=50,
    ...              tolerance=1e-10)
    >>> end.grad_norm < 1e-8, end.min_eigenvalue > 0
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.optimize
import torch

from dhwt.models.layers import twice_differentiable

#: Basis vectors per double-backward pass when the Hessian is built (memory: that many copies of
#: the graph's activations).
BLOCK = 64


@dataclass(frozen=True)
class NewtonEnd:
    """Where `newton` ended: the gradient norm and the smallest Hessian eigenvalue there."""

    grad_norm: float
    min_eigenvalue: float
    iterations: int


def newton(params: list[torch.Tensor], value: Callable[[], torch.Tensor], steps: int,
           tolerance: float) -> NewtonEnd:
    """Minimise the scalar `value()` over `params` (float64 leaves, changed in place) by
    trust-region Newton, up to `steps` iterations, until the gradient norm is below `tolerance`,
    or until rounding leaves no predicted fall; the gradient norm and the Hessian's smallest
    eigenvalue at the end."""
    graph: dict[str, object] = {}  # the gradient's graph at the point the parameters hold

    def load(x: np.ndarray) -> None:
        graph.clear()
        with torch.no_grad():
            for p, part in zip(params, np.split(x, np.cumsum(sizes)[:-1])):
                p.copy_(torch.from_numpy(part).view_as(p))

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        load(x)
        f = value()
        return float(f.detach()), _flat(torch.autograd.grad(f, params, materialize_grads=True))

    def hessp(x: np.ndarray, direction: np.ndarray) -> np.ndarray:
        if "x" not in graph or not np.array_equal(graph["x"], x):
            load(x)
            graph.update(x=x.copy(), grad=_flat_gradient(params, value))
        return _flat(torch.autograd.grad(graph["grad"], params, torch.from_numpy(direction),
                                         retain_graph=True, materialize_grads=True))

    sizes = [p.numel() for p in params]
    start = _flat([p.detach() for p in params])
    end = scipy.optimize.minimize(fun, start, jac=True, hessp=hessp, method="trust-krylov",
                                  options={"gtol": tolerance, "maxiter": steps})
    _, grad = fun(end.x)
    eigenvalues = np.linalg.eigvalsh(hessian(params, value).numpy())
    return NewtonEnd(grad_norm=float(np.linalg.norm(grad)),
                     min_eigenvalue=float(eigenvalues[0]), iterations=int(end.nit))


def hessian(params: list[torch.Tensor], value: Callable[[], torch.Tensor]) -> torch.Tensor:
    """The (P, P) Hessian of the scalar `value()` in `params` (flattened in order), at their
    present values, from double-backward passes of BLOCK basis vectors each.

    Examples:
        >>> x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
        >>> hessian([x], lambda: x[0] ** 2 * x[1]).tolist()
        [[4.0, 2.0], [2.0, 0.0]]
    """
    flat = _flat_gradient(params, value)
    basis = torch.eye(flat.numel(), dtype=flat.dtype)
    rows = []
    for block in basis.split(BLOCK):
        parts = torch.autograd.grad(flat, params, grad_outputs=block, is_grads_batched=True,
                                    retain_graph=True, materialize_grads=True)
        rows.append(torch.cat([part.reshape(len(block), -1) for part in parts], dim=1))
    return torch.cat(rows)


def _flat_gradient(params: list[torch.Tensor], value: Callable[[], torch.Tensor]) -> torch.Tensor:
    """The gradient of `value()` in `params`, flattened, with its graph (differentiable again)."""
    with twice_differentiable():
        grads = torch.autograd.grad(value(), params, create_graph=True, materialize_grads=True)
    return torch.cat([g.reshape(-1) for g in grads])


def _flat(tensors) -> np.ndarray:
    """Tensors flattened into one numpy vector, in order (the layout `newton` optimises in)."""
    return torch.cat([t.reshape(-1) for t in tensors]).numpy()
