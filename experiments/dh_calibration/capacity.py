"""Re-fit the DH diagnostic's calibration where tying has a price (issue 32, item 3): does an
untied model's input-vs-output overlap predict what tying it costs?

The grid is experiments/tying_capacity's (run.py): languages with K DH-violating pairs (sem at
1 : 9, masked and causal; cnd twins, causal) and their DH-holding controls, against widths d 2-16,
where the price of tying (tied - untied exact excess, paired by seed) runs from 0 to 0.4 nats.
For every untied member of every cell with K >= MIN_K: the DH diagnostic exactly as
`dhwt analyze` takes it (dhwt.analysis.knn_curves.similarity_curves over all V rows at the last
step, its excess over chance) at each SETTINGS (k, metric) the vocabulary allows, and the price
of its seed (experiments/tying_capacity/analyse.py's read_cell). Then, per setting, ordinary
least squares fits of the price, each with its 95% prediction interval for one model
(t s sqrt(1 + h)), validated on held-out languages (leave one kind out, leave one K out):

  null      price ~ 1                      (what one knows with no model)
  overlap   price ~ 1 + excess             (the calibration asked for)
  capacity  price ~ 1 + K/d                (what one knows from V and d alone)
  both      price ~ 1 + K/d + excess       (does the overlap add to capacity?)

The decision rule and the predictions were committed in README.md before this ran.

    python experiments/dh_calibration/capacity.py runs/tying-capacity
writes experiments/dh_calibration/capacity.md and capacity.csv, and the headline every DH
reading cites (the declared setting over all widths: its 95% prediction interval, Spearman,
the number of models) into dhwt/analysis/dh_findings.json's overlap_vs_price.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from dhwt.analysis.knn_curves import Source, excess_over_chance, similarity_curves
from dhwt.runs.run import is_finished

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tying_capacity"))
from analyse import CELL, read_cell  # noqa: E402

MIN_K = 4  # K = 1 has 3-7 rows: no neighbourhood of k 3 means anything
#: (k, metric): the diagnostic's default and the setting where dh_calibration saw the violation.
SETTINGS = ((3, "cos"), (10, "ip"))
MODELS = {"null": (), "overlap": ("excess",), "capacity": ("ratio",),
          "both": ("ratio", "excess")}
POST_HOC_MIN_D = 4  # d 2: prices 0.1-0.4 nats, seeds apart by tenths, none converged
COVERAGE = 0.90  # declared: a usable 95% interval covers at least this share of held-out models
#: The measured findings the DH reading cites (dhwt.analysis.dh_reading_result.findings).
FINDINGS = HERE.parents[1] / "dhwt" / "analysis" / "dh_findings.json"


def diagnostic(run: Path, members: int, vocab: int, k: int, metric: str) -> np.ndarray | None:
    """(members,) excess over chance of the untied members' input-vs-output overlap; None when
    k is more than a quarter of the vocabulary (chance would be most of the overlap)."""
    if 4 * k > vocab:
        return None
    sources = [Source(f"seed{m}", run, m) for m in range(members)]
    result = similarity_curves(sources, k=k, metric=metric, pairs=False, dh=True)
    return np.array([excess_over_chance(c.values["overlap"][-1], c.values["chance_overlap"][-1])
                     for c in result.curves])


def rows_of(grid: Path) -> list[dict[str, object]]:
    """One row per untied member of every finished cell with K >= MIN_K."""
    rows = []
    for cell in sorted(grid.iterdir()):
        if not (CELL.match(cell.name) and is_finished(cell / "untied")):
            continue
        c = read_cell(cell)
        if c["k"] < MIN_K:
            continue
        seeds = sorted(c["price"])
        vocab = len(json.loads((cell / "data" / "truth.json").read_text())["objectives"][
            c["objective"]]["vocab"])
        found = {f"excess_k{k}_{m}": diagnostic(cell / "untied", len(seeds), vocab, k, m)
                 for k, m in SETTINGS}
        for i, seed in enumerate(seeds):
            rows.append({"language": c["language"], "k": c["k"], "d": c["d"],
                         "decay": c["decay"], "bias": c["bias"], "seed": seed,
                         "ratio": c["k"] / c["d"], "price": c["price"][seed],
                         **{key: (np.nan if v is None else float(v[i]))
                            for key, v in found.items()}})
        print(f"read {cell.name}", flush=True)
    return rows


def design(rows: list[dict], features: tuple[str, ...], excess: str) -> np.ndarray:
    columns = [np.ones(len(rows))]
    columns += [np.array([r[excess if f == "excess" else f] for r in rows]) for f in features]
    return np.column_stack(columns)


def fit(rows: list[dict], features: tuple[str, ...], excess: str) -> dict[str, object]:
    """OLS of the price on `features`: coefficients, residual sd, (X'X)^-1 and the t quantile."""
    x, y = design(rows, features, excess), np.array([r["price"] for r in rows])
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    dof = len(y) - x.shape[1]
    s = float(np.sqrt(np.sum((y - x @ beta) ** 2) / dof))
    return {"beta": beta, "s": s, "inverse": np.linalg.inv(x.T @ x),
            "t": float(stats.t.ppf(0.975, dof)), "features": features}


def predict(model: dict, rows: list[dict], excess: str) -> tuple[np.ndarray, np.ndarray]:
    """Predicted price and the half-width of its 95% prediction interval, per row."""
    x = design(rows, model["features"], excess)
    leverage = np.einsum("ij,jk,ik->i", x, model["inverse"], x)
    return x @ model["beta"], model["t"] * model["s"] * np.sqrt(1 + leverage)


def folds(rows: list[dict]) -> list[tuple[str, str, list[dict], list[dict]]]:
    """(scheme, held-out name, training rows, held-out rows): leave one kind out, one K out
    (a scheme with one value only has no fold)."""
    out = []
    for scheme, key in (("kind", "language"), ("K", "k")):
        values = sorted({r[key] for r in rows})
        for value in values if len(values) > 1 else ():
            out.append((scheme, f"{key} {value}", [r for r in rows if r[key] != value],
                        [r for r in rows if r[key] == value]))
    return out


def validate(rows: list[dict], excess: str) -> list[dict[str, object]]:
    """Held-out mean absolute error and 95% PI coverage of every model in every fold."""
    found = []
    for scheme, name, train, held in folds(rows):
        truth = np.array([r["price"] for r in held])
        entry = {"scheme": scheme, "held": name, "n": len(held)}
        for label, features in MODELS.items():
            mean, half = predict(fit(train, features, excess), held, excess)
            entry[f"mae_{label}"] = float(np.mean(np.abs(truth - mean)))
            entry[f"cover_{label}"] = float(np.mean(np.abs(truth - mean) <= half))
        found.append(entry)
    return found


def within_cell(rows: list[dict], excess: str) -> tuple[float, float]:
    """Spearman of excess and price after removing each cell's means (seed-to-seed)."""
    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        cells.setdefault((r["language"], r["k"], r["d"], r["decay"], r["bias"]), []).append(r)
    dx, dy = [], []
    for members in cells.values():
        x = np.array([r[excess] for r in members])
        y = np.array([r["price"] for r in members])
        dx += list(x - x.mean())
        dy += list(y - y.mean())
    result = stats.spearmanr(dx, dy)
    return float(result.statistic), float(result.pvalue)


def kind_gap(rows: list[dict], excess: str) -> list[str]:
    """Per violating kind: in how many cells its mean excess lies below its control's."""
    means: dict[tuple, float] = {}
    for key in {(r["language"], r["k"], r["d"], r["decay"], r["bias"]) for r in rows}:
        means[key] = float(np.mean([r[excess] for r in rows
                                    if (r["language"], r["k"], r["d"], r["decay"],
                                        r["bias"]) == key]))
    lines = []
    for language in ("sem-mlm", "sem-clm", "cnd-clm"):
        control = "control-" + language.split("-")[1]
        gaps = [means[key] - means[(control, *key[1:])] for key in means
                if key[0] == language and (control, *key[1:]) in means]
        if gaps:
            lines.append(f"- {language}: mean excess minus its control's {np.mean(gaps):+.3f} "
                         f"(median {np.median(gaps):+.3f}), below the control in "
                         f"{sum(g < 0 for g in gaps)} of {len(gaps)} cells.")
    return lines


def cpu_name() -> str:
    text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    return next(line.split(":", 1)[1].strip() for line in text.splitlines()
                if line.startswith("Model name"))


def overall(usable: list[dict], excess: str) -> tuple[dict[str, object], object]:
    """The overlap model fitted on all `usable` members, and Spearman's excess vs price."""
    rho = stats.spearmanr([r[excess] for r in usable], [r["price"] for r in usable])
    return fit(usable, MODELS["overlap"], excess), rho


def headline(rows: list[dict], k: int, metric: str) -> dict[str, object]:
    """What every DH reading cites of the fit at (k, metric) over `rows`: the half-width of its
    95% prediction interval (nats), Spearman's excess vs price, and the number of models."""
    excess = f"excess_k{k}_{metric}"
    usable = [r for r in rows if np.isfinite(r[excess])]
    whole, rho = overall(usable, excess)
    return {"k": k, "metric": metric, "pi95_nats": round(float(whole["t"] * whole["s"]), 2),
            "spearman": round(float(rho.statistic), 2), "models": len(usable)}


def write_findings(found: dict[str, object]) -> None:
    """Update FINDINGS' overlap_vs_price with `found`, whole or not at all."""
    document = json.loads(FINDINGS.read_text("utf-8"))
    document["overlap_vs_price"].update(found)
    temporary = FINDINGS.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", "utf-8")
    temporary.replace(FINDINGS)


def section(title: str, rows: list[dict], k: int, metric: str) -> list[str]:
    """The fits and folds of one (k, metric) over `rows` (none when fewer than 10 hold it)."""
    lines: list[str] = []
    excess = f"excess_k{k}_{metric}"
    usable = [r for r in rows if np.isfinite(r[excess])]
    if len(usable) < 10:
        return lines
    whole, rho = overall(usable, excess)
    wrho, wp = within_cell(usable, excess)
    found = validate(usable, excess)
    predicts = all(v["mae_overlap"] < v["mae_null"] and v["cover_overlap"] >= COVERAGE
                   for v in found)
    adds = (all(v["mae_both"] < v["mae_capacity"] for v in found)
            and np.mean([v["mae_both"] / v["mae_capacity"] for v in found]) < 0.9)
    lines += [f"## {title}: k {k}, {metric} ({len(usable)} members)", "",
              f"- Fit on all: price = {whole['beta'][0]:+.4f} {whole['beta'][1]:+.4f} x "
              f"excess, residual sd {whole['s']:.4f}, 95% PI half-width about "
              f"{whole['t'] * whole['s']:.4f} nats.",
              f"- Spearman excess vs price over members: {rho.statistic:+.2f} "
              f"(p {rho.pvalue:.2g}); within cells (seed to seed): {wrho:+.2f} (p {wp:.2g}).",
              f"- By the declared rule the overlap "
              f"{'predicts' if predicts else 'does not predict'} the price and "
              f"{'adds' if adds else 'does not add'} to capacity (its error below the null's "
              f"in {sum(v['mae_overlap'] < v['mae_null'] for v in found)} of {len(found)} "
              f"folds, its interval covering >= {COVERAGE:.0%} in "
              f"{sum(v['cover_overlap'] >= COVERAGE for v in found)}; both below capacity in "
              f"{sum(v['mae_both'] < v['mae_capacity'] for v in found)}).",
              *kind_gap(usable, excess), "",
              "| held out | n | MAE null | MAE overlap | MAE capacity | MAE both | "
              "cover null | cover overlap | cover capacity | cover both |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for v in found:
        lines.append(f"| {v['held']} | {v['n']} | " + " | ".join(
            f"{v[f'mae_{m}']:.4f}" for m in MODELS) + " | " + " | ".join(
            f"{v[f'cover_{m}']:.2f}" for m in MODELS) + " |")
    lines.append("")
    return lines


def report(rows: list[dict], grid: Path) -> str:
    lines = ["# The DH diagnostic against the price of tying on the capacity grid: measured", "",
             "Written by `capacity.py` (do not edit by hand); the reading is in README.md.", "",
             f"Grid: `{grid}` ({len({(r['language'], r['k'], r['d'], r['decay'], r['bias']) for r in rows})} "
             f"cells with K >= {MIN_K}, {len(rows)} untied members). CPU: {cpu_name()}.", "",
             "MAE: held-out mean absolute error of the predicted price (nats); cover: share of "
             "held-out models inside their 95% prediction interval.", ""]
    subsets = (("all widths, as declared", rows),
               (f"d >= {POST_HOC_MIN_D} only (added after the declared fit)",
                [r for r in rows if r["d"] >= POST_HOC_MIN_D]))
    for title, chosen in subsets:
        for k, metric in SETTINGS:
            lines += section(title, chosen, k, metric)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("grid", type=Path)
    parser.add_argument("--table", action="store_true",
                        help="read the members from capacity.csv (written by an earlier run on "
                             "GRID) instead of the run directories")
    args = parser.parse_args()
    if args.table:
        with open(HERE / "capacity.csv", newline="") as handle:
            kinds = {"language": str, "bias": lambda v: v == "True", "k": int, "d": int,
                     "seed": int}
            rows = [{k: kinds.get(k, float)(v) for k, v in r.items()}
                    for r in csv.DictReader(handle)]
    else:
        rows = rows_of(args.grid)
        with open(HERE / "capacity.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows({k: (f"{v:.6f}" if isinstance(v, float) else v)
                              for k, v in r.items()} for r in rows)
    text = report(rows, args.grid)
    (HERE / "capacity.md").write_text(text, "utf-8")
    write_findings(headline(rows, *SETTINGS[0]))  # the declared setting, all widths
    print(text)


if __name__ == "__main__":
    main()
