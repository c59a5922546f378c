"""Escape from the plateau on the authors' strings against dhwt's, arm by arm.

    python experiments/exor/compare_string_sets.py runs/escape-paper runs/escape-all [--by 30000]

Reads the two studies of escape-paper-strings.toml and escape-all-strings.toml (their run
directories' exact population lines, dhwt.analysis.escape) and prints markdown tables:

1. per arm, the two string sets: escapes by step `--by` and by the horizon with exact intervals,
   the difference of the shares with its 95% interval (Newcombe), and, since both sets train the
   same seeds, a per-seed exact sign test on which set left first (dhwt.analysis.escape.paired);
2. per set, each arm against tied, per seed, over the seeds still on the plateau in both where
   the two arms part (untie@25000 is its tied twin, bit for bit, up to step 25,000: an escape
   before it is one event, not two), with the same difference interval;
3. every p-value of 1 and 2 with Holm's adjustment over all of them;
4. the design's minimum detectable difference: with the seeds of one arm, the shares an arm must
   reach (below or above tied's) for a two-sided Fisher exact test at level 0.05 to find the
   difference with 80% power (exact power, for independent arms), and how many seeds per arm
   the observed tied and untied shares would need.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from dhwt.analysis.escape import (detectable, difference_interval, escapes, fisher_power,
                                  holm, paired, parting_step)
from dhwt.analysis.intervals import count_text
from dhwt import load_task
from dhwt.runs.run import is_run, load_run


def study_escapes(study: Path) -> dict:
    """run name -> (Escapes, TrainConfig) of every run of a study directory."""
    truth = load_task(study / "data", "mlm").truth
    runs = [load_run(path) for path in sorted((study / "runs").iterdir()) if is_run(path)]
    records = {run.path.name: (run.metrics(), run.config) for run in runs}
    return {name: (escapes(rows, truth), config) for name, (rows, config) in records.items()
            if rows}


def by(e, step: int) -> int:
    return int((e.escaped & (e.step <= step)).sum())


def interval_text(k1: int, n1: int, k2: int, n2: int) -> str:
    low, high = difference_interval(k1, n1, k2, n2)
    return f"{100 * (k1 / n1 - k2 / n2):+.0f} ({100 * low:+.0f} to {100 * high:+.0f})"


def seeds_for(p1: float, p2: float, power: float = 0.8, most: int = 400) -> int | None:
    """The fewest seeds per arm (up to `most`) at which a two-sided Fisher exact test at 0.05
    tells shares p1 and p2 apart with `power` (exact power; None: not within `most`)."""
    if p1 == p2:
        return None
    low, high = 2, most
    if fisher_power(p1, p2, high) < power:
        return None
    while low < high:
        mid = (low + high) // 2
        low, high = (mid + 1, high) if fisher_power(p1, p2, mid) < power else (low, mid)
    return low


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paper", type=Path, help="study directory on the authors' strings")
    parser.add_argument("all", type=Path, help="study directory on all strings")
    parser.add_argument("--by", type=int, default=30000, help="an earlier step to count at")
    args = parser.parse_args()
    sets = {"authors' strings": study_escapes(args.paper), "all strings": study_escapes(args.all)}
    paper, full = sets.values()
    tests: list[tuple[str, float]] = []

    print("1. The two string sets, arm by arm (difference: authors' minus all, percentage "
          "points, 95% Newcombe interval; sign test: seeds where one set left first)\n")
    print("| arm | step | authors' strings | all strings | difference (95% CI) | "
          "authors' first / all first / alike | sign test p |")
    print("|---|---|---|---|---|---|---|")
    for arm in [name for name in paper if name in full]:
        a, b = paper[arm][0], full[arm][0]
        horizon = min(a.last, b.last)
        for step in sorted({min(args.by, horizon), horizon}):
            ka, kb = by(a, step), by(b, step)
            row = (f"| {arm} | {step:,} | {count_text(ka, len(a.seeds))} | "
                   f"{count_text(kb, len(b.seeds))} | "
                   f"{interval_text(ka, len(a.seeds), kb, len(b.seeds))} |")
            if step == horizon and sorted(a.seeds) == sorted(b.seeds):
                r = paired(a, b)
                tests.append((f"{arm}: authors' vs all strings", r.p))
                p = "-" if np.isnan(r.p) else f"{r.p:.3g}"
                row += f" {r.first_a} / {r.first_b} / {r.same} | {p} |"
            else:
                row += " | |"
            print(row)

    print("\n2. Each arm against tied, per seed, over the seeds on the plateau in both where "
          "they part\n")
    print("| strings | arm | parts after step | seeds compared | arm first / tied first / "
          "alike | off by the horizon: arm, tied | difference (95% CI) | sign test p |")
    print("|---|---|---|---|---|---|---|---|")
    for set_name, arms in sets.items():
        if "tied" not in arms:
            continue
        tied, tied_config = arms["tied"]
        for arm, (e, config) in arms.items():
            if arm == "tied" or sorted(e.seeds) != sorted(tied.seeds):
                continue
            start = parting_step(tied_config, config)
            r = paired(e, tied, start)
            if r.n == 0:
                print(f"| {set_name} | {arm} | {start:,} | 0 | - | - | - | - |")
                continue
            tests.append((f"{set_name}: {arm} vs tied", r.p))
            p = "-" if np.isnan(r.p) else f"{r.p:.3g}"
            print(f"| {set_name} | {arm} | {start:,} | {r.n} | {r.first_a} / {r.first_b} / "
                  f"{r.same} | {r.off_a}, {r.off_b} | "
                  f"{interval_text(r.off_a, r.n, r.off_b, r.n)} | {p} |")

    made = sum(not np.isnan(p) for _, p in tests)
    print(f"\n3. {made} tests above (none where no seed differs); Holm-adjusted p over them "
          "(survives at 0.05: adjusted <= 0.05)\n")
    print("| test | p | Holm p | survives |")
    print("|---|---|---|---|")
    for (name, p), adjusted in zip(tests, holm([p for _, p in tests])):
        if np.isnan(p):
            print(f"| {name} | no seed differs | - | - |")
        else:
            print(f"| {name} | {p:.3g} | {adjusted:.3g} | {'yes' if adjusted <= 0.05 else 'no'} |")

    print("\n4. What the design can find (two-sided Fisher exact test, level 0.05, 80% power, "
          "exact)\n")
    for set_name, arms in sets.items():
        if not {"tied", "untied"} <= arms.keys():
            continue
        tied, untied = arms["tied"][0], arms["untied"][0]
        share = float(tied.escaped.mean())
        low, high = detectable(share, len(tied.seeds))
        need = seeds_for(share, float(untied.escaped.mean()))
        sides = " or ".join(f"{word} {100 * x:.1f}%" for word, x in (("below", low),
                                                                     ("above", high))
                            if not np.isnan(x)) or "at no share"
        print(f"- {set_name}: with {len(tied.seeds)} seeds an arm, against tied's "
              f"{100 * share:.1f}% an arm is found different only {sides}; the observed tied "
              "and untied shares "
              f"({100 * share:.1f}%, {100 * untied.escaped.mean():.1f}%) would need "
              + (f"{need} seeds an arm" if need else "more than 400 seeds an arm")
              + (f" (power at {len(tied.seeds)}: "
                 f"{100 * fisher_power(share, float(untied.escaped.mean()), len(tied.seeds)):.0f}%)"))


if __name__ == "__main__":
    main()
