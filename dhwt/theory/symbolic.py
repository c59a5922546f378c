"""Small sympy verifiers the symbolic checks are built from.

Each takes the claim as an expression, so a test can hand it a wrong claim and see it fail. A
verifier returns True only when sympy proves the claim; "could not prove" counts as False.
"""

from __future__ import annotations

import sympy as sp


def is_identity(lhs: sp.Expr, rhs: sp.Expr) -> bool:
    """True if lhs - rhs simplifies to exactly 0 (expanded logs and powers first)."""
    difference = sp.expand(sp.expand_log(lhs - rhs, force=True))
    if difference == 0:
        return True
    return sp.simplify(difference) == 0


def never_negative(expr: sp.Expr, var: sp.Symbol) -> bool:
    """True if sympy proves {var real : expr < 0} is empty."""
    try:
        region = sp.solve_univariate_inequality(expr < 0, var, relational=False, domain=sp.S.Reals)
    except NotImplementedError:
        return False
    return region == sp.S.EmptySet


def minimum_is_zero_at(expr: sp.Expr, var: sp.Symbol, point: sp.Expr) -> bool:
    """True if sympy proves expr >= 0 on var's domain with equality at `point` only.

    The argument: expr(point) = 0, expr'(point) = 0 and expr'' > 0 on the whole domain (given by
    var's assumptions), so expr is strictly convex with its unique minimum 0 at `point`.
    """
    if sp.simplify(expr.subs(var, point)) != 0:
        return False
    if sp.simplify(sp.diff(expr, var).subs(var, point)) != 0:
        return False
    return bool(sp.simplify(sp.diff(expr, var, 2)).is_positive)


def sign_follows(expr: sp.Expr, var: sp.Symbol) -> bool:
    """True if sympy proves expr has the sign of the real variable var (expr(0) = 0, expr' >= 0).

    Used where solveset cannot treat the inequality (y - tanh(y)): an increasing function that
    vanishes at 0 is negative left of 0 and positive right of it.
    """
    if sp.simplify(expr.subs(var, 0)) != 0:
        return False
    derivative = sp.simplify(sp.diff(expr, var))
    if derivative.is_nonnegative:
        return True
    # A derivative that is an even power of a real function of a real variable is >= 0.
    base, exponent = derivative.as_base_exp()
    return bool(exponent.is_even and base.is_real)
