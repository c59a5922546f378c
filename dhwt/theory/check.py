"""What a theorem check is and what it reports.

A check tests one claim a proof in proofs/ relies on, one of four ways:
- symbolic: sympy proves the identity or inequality the proof uses;
- numeric: random instances in float64 (softmax regression with fixed features, a convex
  bag-of-embeddings model, joint tables), the claim tested at every step or at an optimum solved
  to 1e-12;
- exhaustive: the claim tested on the exact ground truth of every built-in grammar and of a
  seeded family of random grammars (dhwt.languages);
- empirical: models trained with the package on its synthetic languages, against exact truth.
Each check returns pass or fail with the measured value. Every dependency is one of the
package's, so a check that cannot run (an import error) is an error, never a skip. Checks that
train call the library's runner (dhwt.training.runner.train_run; theory lies above training)
and read the trained runs back through dhwt.runs.load_run.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

KINDS = ("symbolic", "numeric", "exhaustive", "empirical")
STATUSES = ("pass", "fail")


@dataclass(frozen=True)
class Outcome:
    """What one run of a check found: its status and the measured value as text."""

    status: str
    measured: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def passed(self) -> bool:
        return self.status == "pass"


def verdict(ok: bool, measured: str) -> Outcome:
    """pass if `ok`, else fail, with the measured value."""
    return Outcome("pass" if ok else "fail", measured)


@dataclass(frozen=True)
class Trial:
    """What one run of a check gets: the run seed (for seeding trainers) and the check's own
    numpy Generator, seeded from the run seed and the check's name (so every check replays
    alone)."""

    seed: int
    generator: np.random.Generator


@dataclass(frozen=True)
class Check:
    """One registered check: which theorem, its name, its kind, what it predicts, how to run it.

    `full_only` checks run only under `dhwt verify-theorems --full`.
    """

    theorem: str
    name: str
    kind: str
    prediction: str
    run: Callable[[Trial], Outcome]
    full_only: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")

    def trial(self, seed: int) -> Trial:
        """The check's trial for a run seed; its generator hashes the check's name in."""
        tag = zlib.crc32(f"{self.theorem}/{self.name}".encode())
        return Trial(seed, np.random.default_rng([seed, tag]))


def deferred(module: str, function: str) -> Callable[[Trial], Outcome]:
    """A check body `module.function(trial.seed)` whose module is imported only when the check
    runs (the empirical checks need torch and the other rooms of the package)."""

    def run(trial: Trial) -> Outcome:
        return getattr(importlib.import_module(module), function)(trial.seed)

    return run
