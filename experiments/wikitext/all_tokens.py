"""KNN match between a run's two members averaged the blog's way (all tokens) and dhwt's way
(tokens seen in training), with the split of the all-token average into seen and unseen tokens.

    python experiments/wikitext/all_tokens.py RUN@STEP [RUN@STEP ...] [--side input|output]

For each snapshot: member 0 against member 1 (k = 10, raw inner product, self excluded, exact)
(a) with neighbours searched among all V tokens and averaged over all of them (the reference
study's and the blog's average), split into the means over seen and over never-seen tokens,
whose mix by their shares gives (a) exactly; (b) with neighbours searched among the seen tokens
only and averaged over them (`dhwt analyze --tokens seen`); each beside its chance level
(norm-matched random directions, dhwt.analysis.knn.chance_baseline).
"""

from __future__ import annotations

import argparse

import numpy as np

from dhwt import chance_baseline, knn_match, load_run


def measure(spec: str, side: str) -> dict[str, float]:
    """The averages of one RUN@STEP (see the module docstring)."""
    path, _, step = spec.rpartition("@")
    run = load_run(path)
    snapshot = run.embeddings(None if step == "last" else int(step))
    matrices = snapshot.input if side == "input" else snapshot.output
    a, b = matrices[0], matrices[1]
    seen = run.task.token_counts() > 0
    every = knn_match(a, b)
    chance_all = chance_baseline(a, b, generator=np.random.default_rng(0))
    only_seen = knn_match(a, b, tokens=np.flatnonzero(seen))
    chance_seen = chance_baseline(a, b, generator=np.random.default_rng(0),
                                  tokens=np.flatnonzero(seen))
    return {"tokens": len(seen), "seen share": seen.mean(),
            "all": every.mean_overlap, "all: seen": every.overlap[seen].mean(),
            "all: unseen": every.overlap[~seen].mean() if (~seen).any() else float("nan"),
            "chance all": chance_all.mean_overlap,
            "seen only": only_seen.mean_overlap, "chance seen only": chance_seen.mean_overlap}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("snapshots", nargs="+", help="RUN@STEP (or RUN@last)")
    parser.add_argument("--side", choices=("input", "output"), default="input")
    args = parser.parse_args()
    keys = ("tokens", "seen share", "all", "all: seen", "all: unseen", "chance all",
            "seen only", "chance seen only")
    print("| snapshot | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for spec in args.snapshots:
        found = measure(spec, args.side)
        cells = [str(found["tokens"])] + [f"{found[k]:.3f}" for k in keys[1:]]
        print(f"| {spec} ({args.side}) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
