"""Per-token agreement of `dhwt corpus-dh` with a trained untied model's `dhwt diagnose`
(issue 30, item 7): a rank correlation over tokens, not a match of means.

    python experiments/corpus_dh/agreement.py CORPUS_DH_DIR RUN_DIR [--step N] [--metric ip]
        [--seed 0]

CORPUS_DH_DIR: the --out folder of `dhwt corpus-dh --corpus ... --tokenizer T`; its
per_token.csv gives each compared token's input-vs-output overlap from counts (and its count
and frequency-matched null). RUN_DIR: a `dhwt train` run on the same corpus and tokenizer; each
untied member is diagnosed as `dhwt diagnose RUN_DIR` does (dhwt.analysis.diagnose_result, its
defaults: k 10, raw inner product, every token a query; --metric cos matches corpus-dh's
cosine), and its per-token overlap is read from the diagnosis. Printed for the tokens in both
(the token names must agree):
- Spearman's rho between the two overlaps, with a 95% percentile bootstrap interval
  (tokens resampled with replacement, BOOTSTRAP draws, default_rng(seed));
- the same with the model's neighbours searched among corpus-dh's compared tokens only (the
  candidate set corpus-dh used; `dhwt diagnose` searches the whole vocabulary);
- the partial rank correlation given log count (both overlaps rise with frequency; this is
  the agreement frequency does not explain), and rho of corpus-dh's excess over its
  frequency-matched null against the model's overlap.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

from dhwt.checks import parse_count

#: Bootstrap draws of each interval.
BOOTSTRAP = 2000


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho: Pearson's r of the average ranks (ties share their mean rank); nan when
    either is constant."""
    rx, ry = rankdata(x) - (len(x) + 1) / 2, rankdata(y) - (len(y) + 1) / 2
    scale = np.sqrt((rx @ rx) * (ry @ ry))
    return float(rx @ ry / scale) if scale > 0 else float("nan")


def partial_spearman(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> float:
    """Spearman's rho of x and y given z: (r_xy - r_xz r_yz) / sqrt((1 - r_xz^2)(1 - r_yz^2))
    of the rank correlations."""
    xy, xz, yz = spearman(x, y), spearman(x, z), spearman(y, z)
    return float((xy - xz * yz) / np.sqrt((1 - xz ** 2) * (1 - yz ** 2)))


def bootstrap(statistic, columns: list[np.ndarray], draws: int = BOOTSTRAP,  # noqa: ANN001
              seed: int = 0) -> tuple[float, float, float]:
    """(the statistic, and the 2.5% and 97.5% quantiles of it over `draws` resamples of the
    rows, default_rng(seed)); resamples where it is undefined (nan) are left out."""
    generator = np.random.default_rng(seed)
    n = len(columns[0])
    values = np.array([statistic(*(c[rows] for c in columns))
                       for rows in generator.integers(0, n, size=(draws, n))])
    low, high = np.nanquantile(values, [0.025, 0.975])
    return statistic(*columns), float(low), float(high)


def read_per_token(folder: Path) -> dict[str, np.ndarray]:
    """corpus-dh's per_token.csv as columns: id, token, count, overlap,
    frequency_null_overlap."""
    with open(folder / "per_token.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return {"id": np.array([int(r["id"]) for r in rows]),
            "token": np.array([r["token"] for r in rows], dtype=object),
            "count": np.array([float(r["count"]) for r in rows]),
            "overlap": np.array([float(r["overlap"]) for r in rows]),
            "null": np.array([float(r["frequency_null_overlap"]) for r in rows])}


def agreement(corpus: dict[str, np.ndarray], model: np.ndarray, restricted: np.ndarray,
              draws: int = BOOTSTRAP, seed: int = 0) -> dict[str, tuple[float, float, float]]:
    """The statistics of the module doc over the tokens of `corpus` (read_per_token), model and
    restricted the model's per-token overlaps aligned with them."""
    log_count = np.log(corpus["count"])
    return {
        "rho": bootstrap(spearman, [corpus["overlap"], model], draws, seed),
        "rho_restricted": bootstrap(spearman, [corpus["overlap"], restricted], draws, seed),
        "partial_rho_given_log_count": bootstrap(
            partial_spearman, [corpus["overlap"], model, log_count], draws, seed),
        "rho_excess_over_null": bootstrap(
            spearman, [corpus["overlap"] - corpus["null"], model], draws, seed),
        "rho_model_vs_log_count": bootstrap(spearman, [model, log_count], draws, seed),
        "rho_corpus_vs_log_count": bootstrap(spearman, [corpus["overlap"], log_count], draws,
                                             seed),
    }


def model_overlaps(run: Path, step: int | str, metric: str, ids: np.ndarray, tokens: np.ndarray
                   ) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(member name, overlap of `dhwt diagnose` per token of ids, overlap with the neighbours
    searched among ids only) for each untied member of the run."""
    from dhwt import DiagnoseOptions, diagnose_path, knn_match, load_run

    result = diagnose_path(str(run), DiagnoseOptions(step=step, queries="all", metric=metric))
    names = np.array([result.token(int(i)) for i in ids], dtype=object)
    if (names != tokens).any():
        first = int(np.flatnonzero(names != tokens)[0])
        sys.exit(f"error: token {ids[first]} is {tokens[first]!r} in per_token.csv but "
                 f"{names[first]!r} in {run}: not the same tokenizer")
    snap = load_run(run).embeddings(None if step == "last" else step)
    out = []
    for m, subject in enumerate(result.subjects):
        if subject.diagnosis is None:
            continue
        d = subject.diagnosis
        at = np.full(d.n_tokens, -1)
        at[d.tokens] = np.arange(len(d.tokens))
        restricted = knn_match(snap.input[m][ids], snap.output[m][ids], d.k, d.metric)
        out.append((subject.name, d.overlap_per_token[at[ids]], restricted.overlap))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus_dh", type=Path)
    parser.add_argument("run", type=Path)
    parser.add_argument("--step", default="last",
                        type=lambda text: parse_count("step", text, ("last",)))
    parser.add_argument("--metric", default="ip", choices=["ip", "cos", "l2"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    corpus = read_per_token(args.corpus_dh)
    members = model_overlaps(args.run, args.step, args.metric, corpus["id"], corpus["token"])
    print(f"{len(corpus['id']):,} tokens compared (corpus-dh's compared tokens, all in the "
          f"model's vocabulary); 95% intervals: {BOOTSTRAP:,} bootstrap resamples of tokens, "
          f"seed {args.seed}")
    for name, model, restricted in members:
        print(f"{name}, model metric {args.metric}: mean overlap corpus-dh "
              f"{corpus['overlap'].mean():.4f}, model "
              f"{model.mean():.4f} (restricted {restricted.mean():.4f})")
        for key, (value, low, high) in agreement(corpus, model, restricted,
                                                 seed=args.seed).items():
            print(f"  {key:<28s} {value:+.3f}  [{low:+.3f}, {high:+.3f}]")


if __name__ == "__main__":
    main()
