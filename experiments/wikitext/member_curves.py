"""KNN match between the two members of a run (exp 1 / exp 2) over its snapshots, on any device.

For each chosen snapshot step: the overlap |A∩B|/k (k 10, raw inner product, the blog's measure)
between member 0's and member 1's input matrices, and their output matrices when untied, over all
tokens (the blog's average) and over the tokens seen in training (RUN_DIR/token_counts.npy; the
neighbours then searched among seen rows), computed by dhwt.analysis.knn_curves
(`overlap_rows`, which blog_run.py uses too). Writes OUT/member_curves.csv and
OUT/member_curves.png and prints the table; steps are spread evenly over the snapshots, at most
--max-steps of them (the first and the last always), so a large run's curve fits a time budget.

    python experiments/wikitext/member_curves.py RUN --out DIR [--device cuda] [--max-steps 9]
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dhwt import load_run  # noqa: E402
from dhwt.runs.run import Run  # noqa: E402
from dhwt.analysis.knn_curves import Source, similarity_curves  # noqa: E402


def chosen_steps(steps: list[int], most: int) -> list[int]:
    """At most `most` of `steps`, evenly spread, the first and the last included."""
    if len(steps) <= most:
        return steps
    picks = np.linspace(0, len(steps) - 1, most).round().astype(int)
    return [steps[i] for i in sorted(set(picks))]


def overlap_rows(run: Run, steps: list[int], device: str = "cpu", k: int = 10,
                 timings: dict[str, float] | None = None) -> list[dict[str, object]]:
    """One row per step of `steps`: the overlap between member 0 and member 1, column SIDE_SET
    (side input, and output when untied; set all, and seen where the run counted its training
    tokens). `timings`, if given, gets the seconds each token set took."""
    counts = np.load(run.token_counts_file) if run.token_counts_file.exists() else None
    sets = {"all": None} if counts is None else {"all": None, "seen": np.flatnonzero(counts > 0)}
    sources = [Source("member 0", run.path, 0), Source("member 1", run.path, 1)]
    rows: list[dict[str, object]] = [{"step": step} for step in steps]
    for name, tokens in sets.items():
        start = time.perf_counter()
        result = similarity_curves(sources, k=k, tokens=tokens, chance=False, dh=False,
                                   steps=steps, device=device)
        for curve in result.curves:  # input, and output unless tied at every step
            for row, value in zip(rows, curve.values["overlap"]):
                row[f"{curve.side}_{name}"] = float(value)
        if timings is not None:
            timings[name] = time.perf_counter() - start
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run")
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-steps", type=int, default=9)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()
    run, out = load_run(args.run), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    rows = overlap_rows(run, chosen_steps(run.steps, args.max_steps), args.device, args.k,
                        timings)
    for name, seconds in timings.items():
        print(f"{name} tokens: {seconds:.1f} s", flush=True)
    for row in rows:
        print(", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                        for k, v in row.items()), flush=True)
    columns = list(rows[0])
    with open(out / "member_curves.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(rows)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for column in columns:
        if column != "step":
            ax.plot([r["step"] for r in rows], [r.get(column) for r in rows], marker="o",
                    label=column.replace("_", ", "))
    ax.set(xlabel="step", ylabel=f"KNN overlap (k {args.k}, ip)",
           title=f"member 0 vs member 1: {run.path.name}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "member_curves.png", dpi=120)


if __name__ == "__main__":
    main()
