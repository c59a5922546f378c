"""Escape from the plateau on the authors' strings against dhwt's, arm by arm.

    python experiments/exor/compare_string_sets.py runs/escape-paper runs/escape-all [--by 30000]

Reads the two studies of escape-paper-strings.toml and escape-all-strings.toml (their run
directories' exact population lines, dhwt.analysis.escape) and prints a markdown table per arm:
escapes by step `--by` and by the horizon in each set with exact intervals, a two-sided Fisher
exact test of the two counts, and a log-rank test of the two sets' escape times. Then, per set,
how many seeds per arm a two-sided test at level 0.05 would need to tell tied from untied with
80% power if their escape shares by the horizon were the observed ones (Cohen's h:
n = ((z_0.975 + z_0.8) / (2 asin sqrt p1 - 2 asin sqrt p2))^2, the normal approximation).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy import stats

from dhwt.analysis.escape import escapes, logrank
from dhwt.analysis.intervals import count_text
from dhwt.languages import load_task
from dhwt.runs.metrics import read_metrics


def study_escapes(study: Path) -> dict:
    truth = load_task(study / "data", "mlm").truth
    return {run.name: escapes(read_metrics(run / "metrics.jsonl"), truth)
            for run in sorted((study / "runs").iterdir()) if (run / "metrics.jsonl").is_file()}


def by(e, step: int) -> int:
    return int((e.escaped & (e.step <= step)).sum())


def seeds_needed(p1: float, p2: float) -> float:
    """Seeds per arm for 80% power at two-sided level 0.05 between shares p1 and p2."""
    h = abs(2 * np.arcsin(np.sqrt(p1)) - 2 * np.arcsin(np.sqrt(p2)))
    return float("inf") if h == 0 else ((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) / h) ** 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paper", type=Path, help="study directory on the authors' strings")
    parser.add_argument("all", type=Path, help="study directory on all strings")
    parser.add_argument("--by", type=int, default=30000, help="an earlier step to count at")
    args = parser.parse_args()
    paper, full = study_escapes(args.paper), study_escapes(args.all)
    print("| arm | step | authors' strings | all strings | Fisher p | log-rank z (p) |")
    print("|---|---|---|---|---|---|")
    for arm in [name for name in paper if name in full]:
        a, b = paper[arm], full[arm]
        horizon = min(a.last, b.last)
        for step in sorted({min(args.by, horizon), horizon}):
            ka, kb = by(a, step), by(b, step)
            p = stats.fisher_exact([[ka, len(a.seeds) - ka], [kb, len(b.seeds) - kb]])[1]
            z, lp = logrank(a, b) if step == horizon else (np.nan, np.nan)
            test = "-" if np.isnan(z) else f"{z:+.2f} ({lp:.3g})"
            print(f"| {arm} | {step:,} | {count_text(ka, len(a.seeds))} | "
                  f"{count_text(kb, len(b.seeds))} | {p:.3g} | {test} |")
    print()
    for name, arms in (("authors' strings", paper), ("all strings", full)):
        if {"tied", "untied"} <= arms.keys():
            shares = [arms[a].escaped.mean() for a in ("tied", "untied")]
            print(f"{name}: escaped by the horizon, tied {shares[0]:.3f}, untied "
                  f"{shares[1]:.3f}: about {seeds_needed(*shares):.0f} seeds per arm for 80% "
                  "power at these shares")


if __name__ == "__main__":
    main()
