"""Every default symbolic and numeric check passes, for more than one seed, and every default
empirical one (exact population training of the package's Transformer) for one."""

from __future__ import annotations

import pytest

from dhwt.theory.registry import select

FAST = [c for c in select(full=False) if c.kind != "empirical"]
DEFAULT_EMPIRICAL = [c for c in select(full=False) if c.kind == "empirical"]


@pytest.mark.parametrize("check", FAST, ids=[f"{c.theorem}/{c.name}" for c in FAST])
@pytest.mark.parametrize("seed", [0, 7])
def test_check_passes(check, seed):
    outcome = check.run(check.trial(seed))
    assert outcome.status == "pass", outcome.measured


@pytest.mark.parametrize("check", DEFAULT_EMPIRICAL,
                         ids=[f"{c.theorem}/{c.name}" for c in DEFAULT_EMPIRICAL])
def test_default_empirical_check(check):
    outcome = check.run(check.trial(0))
    assert outcome.status == "pass", outcome.measured


def test_every_theorem_has_all_three_kinds():
    for theorem in ("T1", "T2", "T3", "T4"):
        kinds = {c.kind for c in select(theorem, full=True)}
        assert kinds == {"symbolic", "numeric", "empirical"}, theorem


def test_default_mode_keeps_the_long_checks_out():
    default = {(c.theorem, c.name) for c in select(full=False)}
    full = {(c.theorem, c.name) for c in select(full=True)}
    assert default < full
    assert all(c.kind == "empirical" for c in select(full=True) if (c.theorem, c.name) not in default)
