"""Every theorem's checks in one place, and the selection `dhwt verify-theorems` makes."""

from __future__ import annotations

from dhwt.errors import DhwtError
from dhwt.theory import (
    t1_log_odds,
    t2_contraction,
    t3_input_symmetry,
    t4_tying_conflict,
    t5_masked_lm,
)
from dhwt.theory.check import Check

THEOREMS: dict[str, tuple[Check, ...]] = {
    "T1": t1_log_odds.CHECKS,
    "T2": t2_contraction.CHECKS,
    "T3": t3_input_symmetry.CHECKS,
    "T4": t4_tying_conflict.CHECKS,
    "T5": t5_masked_lm.CHECKS,
}


def parse_only(only: str | None) -> tuple[str, ...]:
    """'T1,t3' -> ('T1', 'T3'); None or '' -> every theorem. DhwtError on an unknown name."""
    if only is None or not only.strip():
        return tuple(THEOREMS)
    names = [part.strip().upper() for part in only.split(",") if part.strip()]
    if not names:
        raise DhwtError(f"--only {only!r} names no theorem; give e.g. T1,T3 "
                        f"(choose from {', '.join(THEOREMS)})")
    unknown = [name for name in names if name not in THEOREMS]
    if unknown:
        raise DhwtError(
            f"--only names unknown theorem {', '.join(repr(u) for u in unknown)}; "
            f"choose from {', '.join(THEOREMS)} (comma-separated)"
        )
    return tuple(dict.fromkeys(names))


def select(only: str | None = None, full: bool = False) -> list[Check]:
    """The checks to run: those of the named theorems; `full` adds the long empirical ones."""
    return [c for name in parse_only(only) for c in THEOREMS[name] if full or not c.full_only]
