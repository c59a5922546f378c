"""Where tying hurts, held out across tokenizers (LOG.md section 6; issue 34 item 3).

    python experiments/tying_wikitext/where_tying_hurts.py \
        --study bpe:2048 runs/tw-gpt2 1600 runs/cdh-bpe2048-o2 \
        --study bpe:8192 runs/tw-gpt2-bpe8192 1600 runs/cdh-bpe8192-o2

Each --study: a name, a study directory with runs "untied" and "tied" (the same seeds; more
seeds of the same setting in further directories of that layout, joined by commas, are pooled
with it), the step whose checkpoints and snapshots are read, and the --out folder of `dhwt
corpus-dh --order 2` on the same corpus and tokenizer. Per type: the price of tying (tied minus
untied valid cross-entropy per valid token, each arm averaged over its seeds; analyse.py's
member_token_loss), the untied members' input/output neighbour overlap (analyse.py's
dh_per_member: dhwt's knn_match, k 10, raw inner product), corpus-dh's overlap minus its
frequency-matched null (per_token.csv), and the log share of train tokens. Writes
where_tying_hurts.md (every number of section 6) and figures/where_tying_hurts.png; --cache
keeps the evaluated per-type arrays (an .npz per study) so that a second call skips the models.

Statistics (declared in LOG.md, section 6, before they were computed): types seen in train,
compared by corpus-dh and with at least MIN_VALID valid occurrences; the same without the CUT most
frequent; type-weighted (each type once) and token-weighted (by valid occurrences); Spearman
and partial Spearman with BOOTSTRAP percentile intervals over types; least squares of price on
[1, frequency] (M0), plus the model overlap (Ma) or corpus-dh (Mb), fitted on one tokenizer
and scored on the other (rho and R^2 about the target's own mean), and the gain of Ma and Mb
over M0 with paired bootstrap intervals (both sides resampled, the fit redone).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import isotonic_regression

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "corpus_dh"))

from agreement import read_per_token  # noqa: E402
from analyse import dh_per_member, member_token_loss  # noqa: E402

from dhwt import load_run  # noqa: E402
from dhwt.runs.metrics import metric_table  # noqa: E402

MIN_VALID = 5  # valid occurrences a type needs for its price to count
CUT = 10  # the most frequent types (train count) left out in the cut rows
BOOTSTRAP = 2000
SEED = 0
MEASURES = {"overlap": "model overlap (a)", "corpus": "corpus-dh excess (b)",
            "freq": "log train share"}
MODELS = {"M0": ("freq",), "Ma": ("freq", "overlap"), "Mb": ("freq", "corpus")}


@dataclass
class Types:
    """The analysed types of one tokenizer: ids, valid counts, price per seed pair and its mean
    over seeds, the untied model's overlap per seed and mean, corpus-dh's excess over its null,
    log train share, tokens (strings)."""

    name: str
    ids: np.ndarray
    valid: np.ndarray
    price_seeds: np.ndarray  # (seeds, n)
    price: np.ndarray
    overlap_seeds: np.ndarray  # (seeds, n)
    overlap: np.ndarray
    corpus: np.ndarray
    freq: np.ndarray
    tokens: np.ndarray

    def take(self, rows: np.ndarray) -> "Types":
        pick = {k: (v[:, rows] if k.endswith("_seeds") else v[rows])
                for k, v in vars(self).items() if k != "name"}
        return Types(self.name, **pick)

    def column(self, key: str) -> np.ndarray:
        return getattr(self, key)


def pooled(studies: list[Path], step: int, cache: Path | None, name: str
           ) -> dict[str, np.ndarray]:
    """evaluate() of each study directory, their members stacked (the same tokenizer and
    corpus: the counts and vocabulary must agree)."""
    found = [evaluate(study, step, cache, name + (f"-{study.name}" if i else ""))
             for i, study in enumerate(studies)]
    for study, more in zip(studies[1:], found[1:]):
        if any(not np.array_equal(more[k], found[0][k]) for k in ("valid", "train", "vocab")):
            sys.exit(f"error: {study} and {studies[0]} are not on the same tokens")
    return {k: (np.concatenate([f[k] for f in found]) if k in ("untied", "tied", "overlap")
                else found[0][k]) for k in found[0]}


def evaluate(study: Path, step: int, cache: Path | None, name: str) -> dict[str, np.ndarray]:
    """The per-type arrays of a study's untied and tied runs at `step` (models evaluated
    again); `name` names the cache file."""
    file = cache / f"{name.replace(':', '')}-step{step}.npz" if cache else None
    if file is not None and file.exists():
        return dict(np.load(file, allow_pickle=True))
    runs = {arm: study / "runs" / arm for arm in ("untied", "tied")}
    seeds = {arm: load_run(path).config.members.seeds for arm, path in runs.items()}
    if list(seeds["untied"]) != list(seeds["tied"]):
        sys.exit(f"error: {study}'s untied and tied runs have different seeds: {seeds}")
    loss, counts = {}, None
    for arm, path in runs.items():
        loss[arm], counts = member_token_loss(path, step)
        steps, table = metric_table(load_run(path).metrics(), "valid", "loss")
        trainer = table[list(steps).index(step)]
        mine = loss[arm].sum(axis=1) / counts.sum()
        if not np.allclose(mine, trainer, atol=1e-5):
            sys.exit(f"error: {path}: per-token losses average {mine}, the trainer's {trainer}")
    run = load_run(runs["untied"])
    found = {"untied": loss["untied"], "tied": loss["tied"], "valid": counts,
             "train": run.task.token_counts(), "overlap": dh_per_member(runs["untied"], step),
             "vocab": np.array(run.task.vocab, dtype=object)}
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
        np.savez(file, **found)
    return found


def load_types(name: str, studies: list[Path], step: int, corpus_dh: Path, cache: Path | None
               ) -> Types:
    """Everything section 6 needs of one tokenizer at `step`, on the declared types."""
    found = pooled(studies, step, cache, name)
    study = studies[0]
    corpus = read_per_token(corpus_dh)
    vocab = found["vocab"]
    if (vocab[corpus["id"]] != corpus["token"]).any():
        sys.exit(f"error: {corpus_dh}'s tokens are not {study}'s: not the same tokenizer")
    valid, train = found["valid"], found["train"]
    excess = np.full(len(vocab), np.nan)
    excess[corpus["id"]] = corpus["overlap"] - corpus["null"]
    ids = np.flatnonzero((valid >= MIN_VALID) & (train > 0) & ~np.isnan(excess))
    price_seeds = (found["tied"][:, ids] - found["untied"][:, ids]) / valid[ids]
    overlap_seeds = found["overlap"][:, ids]
    return Types(f"{name} (step {step})", ids, valid[ids].astype(float), price_seeds,
                 price_seeds.mean(0), overlap_seeds, overlap_seeds.mean(0), excess[ids],
                 np.log(train[ids] / train.sum()), vocab[ids])


# -- statistics -------------------------------------------------------------------------------
# A bootstrap resample of types is the types with multiplicities c (bincount of the draw):
# every statistic below is a weighted one, and weights w * c give exactly what the resampled
# rows would (a repeated row adds its weight to the same rank and the same sums), so each
# variable is sorted once and a resample costs no sort.
class Ranker:
    """Weighted mid-ranks of one variable for any weights: the weight of all smaller values
    plus half that of the tied ones (unit weights: the average ranks less 1/2)."""

    def __init__(self, x: np.ndarray) -> None:
        self.order = np.argsort(x, kind="stable")
        xs = x[self.order]
        self.starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
        self.group = np.repeat(np.arange(len(self.starts)),
                               np.diff(np.r_[self.starts, len(xs)]))

    def __call__(self, w: np.ndarray) -> np.ndarray:
        totals = np.add.reduceat(w[self.order], self.starts)
        below = np.cumsum(totals) - totals
        out = np.empty(len(w))
        out[self.order] = (below + totals / 2)[self.group]
        return out


def pearson(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """Weighted Pearson correlation; nan when either is constant."""
    w = w / w.sum()
    dx, dy = x - w @ x, y - w @ y
    scale = np.sqrt((w @ dx**2) * (w @ dy**2))
    return float(w @ (dx * dy) / scale) if scale > 0 else float("nan")


def spearman(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """Weighted Spearman: weighted Pearson of weighted mid-ranks (unit weights: Spearman)."""
    return pearson(Ranker(x)(w), Ranker(y)(w), w)


def partial_of(xy: float, xz: float, yz: float) -> float:
    """The partial correlation of x and y given z from the three correlations."""
    return float((xy - xz * yz) / np.sqrt((1 - xz**2) * (1 - yz**2)))


def interval(values: list[float]) -> tuple[float, float]:
    low, high = np.nanquantile(values, [0.025, 0.975])
    return float(low), float(high)


def fmt(value: float, bounds: tuple[float, float], digits: int = 3) -> str:
    return f"{value:+.{digits}f} [{bounds[0]:+.{digits}f}, {bounds[1]:+.{digits}f}]"


def weights(types: Types, weighting: str) -> np.ndarray:
    return types.valid if weighting == "token" else np.ones(len(types.ids))


def resamples(n: int, generator: np.random.Generator, draws: int) -> list[np.ndarray]:
    """`draws` multiplicity vectors of n types drawn n times with replacement."""
    return [np.bincount(generator.integers(0, n, n), minlength=n).astype(float)
            for _ in range(draws)]


def without_top(types: Types) -> Types:
    """The types less the CUT most frequent in train."""
    return types.take(np.argsort(-types.freq, kind="stable")[CUT:])


def correlations(types: Types, weighting: str, generator: np.random.Generator, draws: int
                 ) -> dict[str, str]:
    """The declared rank statistics of price, each with its bootstrap interval."""
    seeds = types.price_seeds.shape[0]
    columns = {"price": types.price, "overlap": types.overlap, "corpus": types.corpus,
               "freq": types.freq}
    columns.update({f"price{s}": types.price_seeds[s] for s in range(seeds)})
    columns.update({f"overlap{s}": types.overlap_seeds[s] for s in range(seeds)})
    rankers = {k: Ranker(v) for k, v in columns.items()}
    base = weights(types, weighting)

    def stats(c: np.ndarray) -> dict[str, float]:
        w = base * c
        r = {k: ranker(w) for k, ranker in rankers.items()}

        def rho(a: str, b: str) -> float:
            return pearson(r[a], r[b], w)

        return {
            "rho(price, overlap)": rho("price", "overlap"),
            "partial(price, overlap | freq)": partial_of(
                rho("price", "overlap"), rho("price", "freq"), rho("overlap", "freq")),
            "rho(price, overlap), across seeds": float(np.mean(
                [rho(f"price{s}", f"overlap{(s + 1) % seeds}") for s in range(seeds)])),
            "rho(price, corpus)": rho("price", "corpus"),
            "partial(price, corpus | freq)": partial_of(
                rho("price", "corpus"), rho("price", "freq"), rho("corpus", "freq")),
            "rho(price, freq)": rho("price", "freq"),
            "rho(price of one seed, of another)": float(np.mean(
                [rho(f"price{s}", f"price{t}") for s in range(seeds) for t in range(s)])),
            "rho(overlap, corpus)": rho("overlap", "corpus"),
        }

    n = len(types.ids)
    point = stats(np.ones(n))
    found = [stats(c) for c in resamples(n, generator, draws)]
    return {k: fmt(v, interval([d[k] for d in found])) for k, v in point.items()}


def design(types: Types, keys: tuple[str, ...]) -> np.ndarray:
    return np.column_stack([np.ones(len(types.ids))] + [types.column(k) for k in keys])


def fit(types: Types, keys: tuple[str, ...], w: np.ndarray) -> np.ndarray:
    """Weighted least-squares coefficients of price on [1, keys]."""
    root = np.sqrt(w)
    return np.linalg.lstsq(design(types, keys) * root[:, None], types.price * root,
                           rcond=None)[0]


def held_out(source: Types, target: Types, weighting: str, generator: np.random.Generator,
             draws: int) -> dict[str, dict[str, str]]:
    """Each model fitted on source and scored on target (Spearman of prediction and price,
    R^2 about the target's own mean), and Ma, Mb less M0, with intervals from resampling both
    tokenizers' types (paired: every model sees the same resamples)."""
    price_ranks = Ranker(target.price)
    designs = {m: (design(source, keys), design(target, keys)) for m, keys in MODELS.items()}
    ws, wt = weights(source, weighting), weights(target, weighting)

    def scores(cs: np.ndarray, ct: np.ndarray) -> dict[str, tuple[float, float]]:
        w_fit, w = ws * cs, wt * ct
        root = np.sqrt(w_fit)
        mean = w @ target.price / w.sum()
        spread = w @ (target.price - mean) ** 2
        ranked = price_ranks(w)
        out = {}
        for m, (xs, xt) in designs.items():
            coef = np.linalg.lstsq(xs * root[:, None], source.price * root, rcond=None)[0]
            predicted = xt @ coef
            r2 = 1 - w @ (target.price - predicted) ** 2 / spread
            out[m] = (pearson(Ranker(predicted)(w), ranked, w), float(r2))
        for m in ("Ma", "Mb"):
            out[f"{m} - M0"] = (out[m][0] - out["M0"][0], out[m][1] - out["M0"][1])
        return out

    point = scores(np.ones(len(ws)), np.ones(len(wt)))
    found = [scores(cs, ct) for cs, ct in zip(resamples(len(ws), generator, draws),
                                              resamples(len(wt), generator, draws))]
    return {m: {"rho": fmt(v[0], interval([d[m][0] for d in found])),
                "R^2": fmt(v[1], interval([d[m][1] for d in found]))} for m, v in point.items()}


def coefficients(types: Types, weighting: str) -> str:
    parts = []
    for m, keys in MODELS.items():
        coef = fit(types, keys, weights(types, weighting))
        parts.append(f"{m}: " + ", ".join(f"{k} {c:+.4f}" for k, c in zip(("1",) + keys, coef)))
    return "; ".join(parts)


# -- the figure -------------------------------------------------------------------------------
def bins(x: np.ndarray, count: int = 8) -> list[np.ndarray]:
    """Rows of x cut at its type quantiles (ties kept together); a value held by more than
    1/count of the types (an overlap of 0) is a bin of its own and the rest is cut likewise."""
    values, counts = np.unique(x, return_counts=True)
    if counts.max() * count > len(x):
        mode = values[counts.argmax()]
        rest = np.flatnonzero(x != mode)
        return [np.flatnonzero(x == mode)] + [rest[b] for b in bins(x[rest], count - 1)]
    edges = np.unique(np.quantile(x, np.linspace(0, 1, count + 1)[1:-1]))
    which = np.searchsorted(edges, x, side="left")
    return [np.flatnonzero(which == b) for b in np.unique(which)]


def isotonic(x: np.ndarray, y: np.ndarray, w: np.ndarray):  # noqa: ANN201
    """The weighted isotonic fit of y on x, its direction that of their weighted rank
    correlation, as a function of x (linear between the fitted points)."""
    order = np.argsort(x, kind="stable")
    xs, ys, ws = x[order], y[order], w[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    wsum = np.add.reduceat(ws, starts)
    ymean = np.add.reduceat(ws * ys, starts) / wsum
    fitted = isotonic_regression(ymean, weights=wsum,
                                 increasing=bool(spearman(x, y, w) >= 0)).x
    return lambda at: np.interp(at, xs[starts], fitted)


def figure(studies: list[Types], out: Path) -> None:
    """Per tokenizer (rows) and measure (columns): token-weighted mean price per bin of types
    with its bootstrap interval; dashed: the isotonic fit on the other tokenizer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    generator = np.random.default_rng(SEED)
    fig, axes = plt.subplots(len(studies), 3, figsize=(14, 4.2 * len(studies)), squeeze=False)
    for row, types in enumerate(studies):
        other = studies[1 - row] if len(studies) == 2 else types
        for col, key in enumerate(MEASURES):
            ax = axes[row, col]
            x = types.column(key)
            centres, means, lows, highs = [], [], [], []
            for ids in bins(x):
                c, d = types.valid[ids], types.price[ids] * types.valid[ids]
                centres.append(c @ x[ids] / c.sum())
                means.append(d.sum() / c.sum())
                pick = [generator.integers(0, len(ids), len(ids)) for _ in range(1000)]
                boot = [d[p].sum() / c[p].sum() for p in pick]
                lows.append(np.quantile(boot, 0.025))
                highs.append(np.quantile(boot, 0.975))
            means, centres = np.array(means), np.array(centres)
            ax.errorbar(centres, means, yerr=[means - lows, np.array(highs) - means], fmt="o-",
                        color=f"C{row}", capsize=3, label=f"{types.name}: bins of types")
            curve = isotonic(other.column(key), other.price, other.valid)
            grid = np.linspace(centres.min(), centres.max(), 200)
            ax.plot(grid, curve(grid), "--", color=f"C{1 - row}",
                    label=f"isotonic fit on {other.name} (token-weighted)")
            shown = np.percentile(curve(grid), [5, 95])  # not the end blocks of a few types
            low, high = min(min(lows), shown[0]), max(max(highs), shown[1])
            ax.set_ylim(low - 0.1 * (high - low), high + 0.1 * (high - low))
            ax.axhline(types.valid @ types.price / types.valid.sum(), color="grey",
                       linewidth=0.8, linestyle=":", label=f"{types.name}: all types")
            rho = spearman(types.price, x, np.ones(len(x)))
            ax.set_title(f"{types.name}: price vs {MEASURES[key]} (type rho {rho:+.2f})",
                         fontsize=9)
            ax.set_xlabel({"overlap": "untied model's input/output overlap (k 10, "
                           f"{types.overlap_seeds.shape[0]} seeds)",
                           "corpus": "corpus-dh order 2 overlap - frequency-matched null",
                           "freq": "log(train count / train tokens)"}[key], fontsize=8)
            ax.set_ylabel("tied - untied loss, nats per valid token", fontsize=8)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle("Where tying hurts: price of tying per type (token-weighted mean per bin of "
                 "types, 95% bootstrap), fit on the other tokenizer dashed", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


# -- the report -------------------------------------------------------------------------------
def report(studies: list[Types], draws: int) -> list[str]:
    generator = np.random.default_rng(SEED)
    lines = ["# Where tying hurts, held out across tokenizers (written by where_tying_hurts.py)",
             "", f"Types: seen in train, compared by corpus-dh, >= {MIN_VALID} valid "
             f"occurrences; cut: less the {CUT} most frequent. Intervals: 95% percentile "
             f"bootstrap over types ({draws:,} resamples, seed {SEED}).", ""]
    for types in studies:
        top = types.take(np.argsort(-types.freq, kind="stable")[:CUT])
        share = top.valid.sum() / types.valid.sum()
        mean_token = types.valid @ types.price / types.valid.sum()
        lines += [f"## {types.name}", "",
                  f"{len(types.ids):,} types, {int(types.valid.sum()):,} valid tokens; mean "
                  f"price {mean_token:+.4f} nats per valid token (type mean "
                  f"{types.price.mean():+.4f}; per seed pair "
                  + " / ".join(f"{(types.valid @ p) / types.valid.sum():+.4f}"
                               for p in types.price_seeds)
                  + f"); the {CUT} most frequent types hold {share:.1%} of those tokens, "
                  f"price {top.valid @ top.price / top.valid.sum():+.4f} "
                  f"({', '.join(repr(t) for t in top.tokens)}). Mean model overlap "
                  f"{types.overlap.mean():.4f}, corpus-dh excess {types.corpus.mean():.4f}.", ""]
        table = {}
        for label, subset in (("all", types), (f"less top {CUT}", without_top(types))):
            for weighting in ("type", "token"):
                table[f"{label}, {weighting}-weighted"] = correlations(subset, weighting,
                                                                       generator, draws)
        keys = list(next(iter(table.values())))
        lines += ["| statistic | " + " | ".join(table) + " |", "|---|" + "---|" * len(table)]
        lines += [f"| {k} | " + " | ".join(t[k] for t in table.values()) + " |"
                  for k in keys]
        lines.append("")
    if len(studies) == 2:
        lines += ["## Held out: fitted on one tokenizer, scored on the other", "",
                  "M0: price ~ 1 + freq; Ma: + model overlap; Mb: + corpus-dh excess. rho: "
                  "Spearman of prediction and price on the target; R^2 about the target's own "
                  "mean. Rows 'M - M0': the gain, paired.", ""]
        for weighting in ("type", "token"):
            for cut in (False, True):
                pair = [without_top(t) if cut else t for t in studies]
                for source, target in ((pair[0], pair[1]), (pair[1], pair[0])):
                    found = held_out(source, target, weighting, generator, draws)
                    lines += [f"### {source.name} -> {target.name}, {weighting}-weighted"
                              + (f", less top {CUT}" if cut else ""), "",
                              f"Fitted on {source.name}: {coefficients(source, weighting)}", "",
                              "| model | rho | R^2 |", "|---|---|---|"]
                    lines += [f"| {m} | {v['rho']} | {v['R^2']} |" for m, v in found.items()]
                    lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", nargs=4, action="append", required=True,
                        metavar=("NAME", "STUDY_DIR", "STEP", "CORPUS_DH_DIR"),
                        help="a tokenizer's study (more seeds in further directories, "
                        "comma-separated), the step of its checkpoints to read, and its "
                        "corpus-dh folder")
    parser.add_argument("--cache", type=Path, help="folder for the evaluated per-type arrays")
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--bootstrap", type=int, default=BOOTSTRAP,
                        help="resamples of each interval (fewer for a quick look)")
    args = parser.parse_args()
    if len(args.study) > 2:
        parser.error("at most two --study (the held-out pair)")
    studies = [load_types(name, [Path(d) for d in study.split(",")], int(step), Path(cdh),
                          args.cache)
               for name, study, step, cdh in args.study]
    text = report(studies, args.bootstrap)
    (args.out / "where_tying_hurts.md").write_text("\n".join(text))
    figure(studies, args.out / "figures" / "where_tying_hurts.png")
    print("\n".join(text))


if __name__ == "__main__":
    main()
