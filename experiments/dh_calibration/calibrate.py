"""Calibrate the model DH diagnostic (GitHub issue #18): what input-vs-output KNN overlap does a
trained untied model show on languages whose DH violation is known exactly?

Two families of causal-LM (clm) languages, each 8 classes x 4 variants (32 grammar symbols; with
[BOS] and [EOS] V = 34 tokens), strings of three classes from a layered automaton, so that a
symbol's continuation depends on its class only:
  skew  (classes.toml): variants drawn uniformly, so the 4 variants of a class are ~sem and ~cnd;
        the knob j skews the variants of the first j classes to p = SKEW: their 6 pairs stay
        ~sem but lose ~cnd (a frequency ratio, constant over contexts). Violation j / 8.
  twins (twins.toml): classes come in pairs emitted from the same states at x +- d; the knob t
        sets d = 0 for the first t pairs, whose 16 cross pairs become ~cnd but not ~sem
        (different futures). Violation 16 t / (48 + 16 t).
The exact violation is 1 - Jaccard of the two relation sets over grammar-symbol pairs (pairs in
exactly one relation / pairs in at least one), computed from the exact clm truth
(dhwt.languages.compute_truth), not from the formulas above.

`train`: per level, one ensemble of the tied and the untied run (--seeds members each; tied and
untied members of one seed share their initial input table), trained on every class string (no
held-out split), the exact population loss recorded. `analyse`: per level and untied member at
the final step, the DH diagnostic exactly as `dhwt analyze` computes it
(dhwt.analysis.knn_curves.similarity_curves: overlap |N_in ∩ N_out| / k over all V tokens, its
chance level from norm-matched random directions, the excess over chance), for the diagnostic's
default k = 10 with metric "ip" and, beside it, cos and k = 3 (a class's 3 other variants); and
the tied-minus-untied price (exact excess loss, paired by seed). It writes the calibration table
dhwt/analysis/dh_calibration.json (shipped with the package; read
by dhwt.analysis.calibration) and results.md.

    python experiments/dh_calibration/calibrate.py train --out runs/dh-calibration
    python experiments/dh_calibration/calibrate.py analyse runs/dh-calibration
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import subprocess
import time
import tomllib
from pathlib import Path

import numpy as np
from scipy import stats

from dhwt.analysis.calibration import PACKAGED
from dhwt.analysis.intervals import t_half
from dhwt.analysis.knn_curves import Source, excess_over_chance, similarity_curves
from dhwt import (TrainConfig, compute_truth, load_language, load_task, train_group,
                  write_dataset)
from dhwt.runs.metrics import metric_table
from dhwt.runs.run import is_finished, load_run

HERE = Path(__file__).parent
CLASSES = "ABCDEFGH"
PAIRS = ("AB", "CD", "EF", "GH")
SKEW = (0.05, 0.15, 0.3, 0.5)
#: family -> (grammar, knob levels): "skew" j classes with skewed variants (sem, not cnd);
#: "twins" t class pairs emitted alike everywhere (cnd, not sem).
FAMILIES = {"skew": (HERE / "classes.toml", (0, 1, 2, 4, 6, 8)),
            "twins": (HERE / "twins.toml", (0, 1, 2, 3, 4))}
OBJECTIVE = "clm"
#: tying_price's small transformer (learns 4-bit EXor), learned positions, lr decayed to 1e-4.
MODEL = dict(d_model=16, d_ff=16, n_layers=2, n_heads=4, positions="learned", lr=1e-2,
             lr_min=1e-4, lr_schedule="cosine", batch_size=None, weight_decay=0.1, threads=1)
#: (k, metric) settings measured; the first is the diagnostic's default (dhwt analyze).
SETTINGS = ((10, "ip"), (10, "cos"), (3, "ip"), (3, "cos"))
LEVEL = 0.95


def overrides(family: str, level: int) -> dict[str, object]:
    """The spec overrides of a level: "skew" skews the variants of the first `level` classes;
    "twins" gives the two classes of each of the first `level` pairs their mean probability in
    every state (twins.toml lists a pair's two transitions next to each other)."""
    if family == "skew":
        return {f"classes.{c}.p": list(SKEW) for c in CLASSES[:level]}
    spec = tomllib.loads(FAMILIES["twins"][0].read_text("utf-8"))
    found: dict[str, object] = {}
    for state, moves in spec["states"].items():
        for n, move in enumerate(moves):
            if any(move["emit"] == pair[0] for pair in PAIRS[:level]):
                mean = (move["p"] + moves[n + 1]["p"]) / 2
                found[f"states.{state}.{n}.p"] = found[f"states.{state}.{n + 1}.p"] = mean
    return found


def language(family: str, level: int):
    return load_language(str(FAMILIES[family][0]), overrides(family, level))


def violation(truth) -> dict[str, object]:
    """Exact DH violation of a GroundTruth: 1 - Jaccard of the sem and cnd pair sets."""
    pairs = truth.pairs()
    sem = sum(p.sem for p in pairs)
    cnd = sum(p.cnd for p in pairs)
    both = sum(p.sem and p.cnd for p in pairs)
    union = sum(p.sem or p.cnd for p in pairs)
    return {"violation": (union - both) / union if union else 0.0, "sem_pairs": sem,
            "cnd_pairs": cnd, "both": both, "sem_only": sem - both, "cnd_only": cnd - both,
            "union": union}


def level_dir(out: Path, family: str, level: int) -> Path:
    return out / f"{family}-{level}"


def train_level(out: Path, family: str, level: int, seeds: int, steps: int,
                every: int) -> float:
    """Train the tied and the untied run of one level as one ensemble; seconds taken (0: it
    was done already)."""
    where = level_dir(out, family, level)
    if is_finished(where / "untied"):
        return 0.0
    start = time.perf_counter()
    write_dataset(language(family, level), where / "data",
                  valid_fraction=0.0, test_fraction=0.0, seed=14, overwrite=True)
    task = load_task(where / "data", OBJECTIVE)
    runs = [(TrainConfig(grammar=None, data=str(where / "data"), objective=OBJECTIVE,
                         valid_fraction=0.0, test_fraction=0.0, seeds=list(range(seeds)),
                         tie_schedule=schedule, steps=steps, eval_every=every,
                         population_every=every, snapshot_every=steps, checkpoint_every=steps,
                         **MODEL), where / schedule) for schedule in ("tied", "untied")]
    train_group(runs, task, overwrite=True)  # a level cut short is trained again from scratch
    return time.perf_counter() - start


# --- analysis -----------------------------------------------------------------------------------

def interval(values: np.ndarray, high: float | None = None) -> dict[str, object]:
    """Mean, its 95% t-interval, and the 95% prediction interval of one more value
    (mean ± t s sqrt(1 + 1/n)), clipped at `high` (an overlap or excess is at most 1): a single
    model is judged by the latter."""
    v = np.asarray(values, float)
    n, mean = len(v), float(v.mean())
    sd = float(v.std(ddof=1)) if n > 1 else math.nan
    half = float(t_half(v, LEVEL))
    pred = half * math.sqrt(n) * math.sqrt(1 + 1 / n)
    top = math.inf if high is None else high
    return {"mean": mean, "sd": sd, "ci95": [mean - half, min(mean + half, top)],
            "pi95": [mean - pred, min(mean + pred, top)],
            "values": [round(x, 6) for x in v.tolist()]}


def final_excess(run: Path, bayes: float) -> np.ndarray:
    """(members,) exact population cross-entropy minus the Bayes optimum at the last record."""
    _, curve = metric_table(load_run(run).metrics(), "population", "loss")
    return curve[-1] - bayes


def analyse_level(where: Path, family: str, level: int) -> dict[str, object]:
    truth = compute_truth(language(family, level), OBJECTIVE)
    saved = json.loads((where / "data" / "truth.json").read_text("utf-8"))
    bayes = saved["objectives"][OBJECTIVE]["bayes_cross_entropy_nats"]
    assert abs(bayes - truth.bayes_cross_entropy) < 1e-9, "the dataset is not this language"
    tied, untied = final_excess(where / "tied", bayes), final_excess(where / "untied", bayes)
    run = where / "untied"
    members = len(untied)
    counts = violation(truth)
    expected = ((6 * level, 0) if family == "skew" else (0, 16 * level), 48)
    if ((counts["sem_only"], counts["cnd_only"]), counts["both"] + counts["sem_only"]) != expected:
        raise SystemExit(f"{family} {level}: the truth has {counts}, not the designed relations")
    row: dict[str, object] = {"family": family, "level": level, **counts, "V": len(truth.vocab),
                              "n_seeds": members, "bayes_nats": bayes,
                              "excess_loss_untied": interval(untied),
                              "excess_loss_tied": interval(tied),
                              "price": interval(tied - untied), "settings": []}
    for k, metric in SETTINGS:
        result = similarity_curves([Source(f"seed{m}", run, m) for m in range(members)], k=k,
                                   metric=metric, pairs=False, dh=True)
        overlap = np.array([c.values["overlap"][-1] for c in result.curves])
        chance = np.array([c.values["chance_overlap"][-1] for c in result.curves])
        excess = np.array([excess_over_chance(o, c) for o, c in zip(overlap, chance)])
        row["settings"].append({"k": k, "metric": metric, "step": int(result.steps[-1]),
                                "overlap": interval(overlap, 1.0), "chance": interval(chance, 1.0),
                                "excess": interval(excess, 1.0)})
    return row


def seeds_to_separate(a: dict, b: dict) -> float:
    """Seeds per level for a two-sided two-sample t-test (5%) to tell two levels' mean excess
    apart with 80% power (normal approximation, pooled sd): 2 (z.975 + z.8)^2 s^2 / delta^2."""
    delta = abs(a["mean"] - b["mean"])
    s2 = (a["sd"] ** 2 + b["sd"] ** 2) / 2
    return math.inf if delta == 0 else 2 * (1.959964 + 0.841621) ** 2 * s2 / delta**2


def cpu_name() -> str:
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        return next(line.split(":", 1)[1].strip() for line in text.splitlines()
                    if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        return platform.processor() or "unknown"


def fmt(x: dict, digits: int = 3, which: str = "ci95") -> str:
    lo, hi = x[which]
    return f"{x['mean']:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


KNOB = {"skew": "j skewed classes", "twins": "t twin pairs"}


def table_lines(rows: list[dict]) -> list[str]:
    """The markdown tables of the rows of all families (rows in family, level order)."""
    lines = []
    families = list(dict.fromkeys(r["family"] for r in rows))
    for s, (k, metric) in enumerate(SETTINGS):
        lines += [f"### DH diagnostic, k = {k}, metric {metric}"
                  + (" (the diagnostic's default)" if s == 0 else ""), "",
                  "| family | knob | exact violation (clm) | sem-only / cnd-only pairs | seeds "
                  "| overlap mean [95% CI] | chance mean | excess over chance mean [95% CI] "
                  "| excess of one model [95% PI] |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            m = r["settings"][s]
            lines.append(f"| {r['family']} | {KNOB[r['family']]} = {r['level']} | "
                         f"{r['violation']:.3f} | {r['sem_only']} / {r['cnd_only']} | "
                         f"{r['n_seeds']} | {fmt(m['overlap'])} | {m['chance']['mean']:.3f} | "
                         f"{fmt(m['excess'])} | {fmt(m['excess'], which='pi95')} |")
        lines.append("")
    lines += ["### Fit and the price of tying (exact population cross-entropy at the last step)",
              "", "| family | knob | violation | Bayes (nats) | untied excess loss "
              "| tied excess loss | price: tied - untied, paired by seed [95% CI] |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['family']} | {KNOB[r['family']]} = {r['level']} | "
                     f"{r['violation']:.3f} | {r['bayes_nats']:.4f} | "
                     f"{fmt(r['excess_loss_untied'], 4)} | {fmt(r['excess_loss_tied'], 4)} | "
                     f"{fmt(r['price'], 4)} |")
    for s, (k, metric) in enumerate(SETTINGS):
        if (k, metric) not in ((10, "ip"), (3, "cos")):
            continue
        lines += ["", f"### Seeds per level to tell levels apart (k = {k}, {metric}; "
                  "two-sample t, 5% two-sided, 80% power)", "",
                  "| family | levels | delta excess | pooled sd | seeds per level |",
                  "|---|---|---|---|---|"]
        for family in families:
            mine = [r for r in rows if r["family"] == family]
            for x, y in list(zip(mine, mine[1:])) + [(mine[0], mine[-1])]:
                ex, ey = x["settings"][s]["excess"], y["settings"][s]["excess"]
                n = seeds_to_separate(ex, ey)
                pooled = math.sqrt((ex["sd"] ** 2 + ey["sd"] ** 2) / 2)
                lines.append(f"| {family} | {x['level']} vs {y['level']} | "
                             f"{ey['mean'] - ex['mean']:+.3f} | {pooled:.3f} | "
                             f"{'∞' if math.isinf(n) else math.ceil(n)} |")
        lines.append("")
        for family in families + ["both"]:
            mine = [r for r in rows if family in ("both", r["family"])]
            ex = np.concatenate([r["settings"][s]["excess"]["values"] for r in mine])
            price = np.concatenate([r["price"]["values"] for r in mine])
            viol = np.concatenate([[r["violation"]] * r["n_seeds"] for r in mine])
            rv, rp = stats.spearmanr(ex, viol), stats.spearmanr(ex, price)
            lines.append(f"- {family}: Spearman over {len(ex)} untied members: excess vs "
                         f"violation {rv.statistic:+.2f} (p {rv.pvalue:.2g}); excess vs paired "
                         f"price {rp.statistic:+.2f} (p {rp.pvalue:.2g}).")
    return lines


def calibration_document(rows: list[dict], settings: dict) -> dict:
    levels = []
    for r in rows:
        for m in r["settings"]:
            levels.append({
                "family": r["family"], "knob": f"{KNOB[r['family']]} = {r['level']}",
                "violation": r["violation"], "sem_only_pairs": r["sem_only"],
                "cnd_only_pairs": r["cnd_only"], "pairs_in_either": r["union"],
                "n_seeds": r["n_seeds"], "k": m["k"], "metric": m["metric"], "V": r["V"],
                "step": m["step"],
                "overlap_mean": m["overlap"]["mean"], "overlap_ci95": m["overlap"]["ci95"],
                "chance_mean": m["chance"]["mean"],
                "excess_mean": m["excess"]["mean"], "excess_sd": m["excess"]["sd"],
                "excess_ci95": m["excess"]["ci95"], "excess_pi95": m["excess"]["pi95"],
                "excess_values": m["excess"]["values"],
                "price_mean": r["price"]["mean"], "price_ci95": r["price"]["ci95"],
                "untied_excess_loss_mean": r["excess_loss_untied"]["mean"],
            })
    return {"what": "DH diagnostic calibration (GitHub issue #18): input-vs-output KNN overlap "
                    "of trained untied models on small synthetic languages of known DH violation",
            "violation": "1 - Jaccard of the ~sem and ~cnd pair sets over grammar-symbol pairs, "
                         f"exact, objective {OBJECTIVE}",
            "excess": "(overlap - chance) / (1 - chance), chance from norm-matched random "
                      "directions (dhwt.analysis.knn.chance_baseline)",
            "intervals": "ci95: 95% Student-t interval of the mean over seeds; pi95: 95% "
                         "prediction interval of one more model (mean ± t s sqrt(1 + 1/n))",
            "price": "tied minus untied exact excess cross-entropy (nats), paired by seed",
            "date": datetime.date.today().isoformat(), "settings": settings, "levels": levels}


def analyse(grid: Path) -> None:
    """Read every finished level of the grid; write dhwt/analysis/dh_calibration.json and
    results.md."""
    rows = []
    for family, (_, levels) in FAMILIES.items():
        for level in levels:
            where = level_dir(grid, family, level)
            if is_finished(where / "untied"):
                rows.append(analyse_level(where, family, level))
                print(f"read {where.name}", flush=True)
    if not rows:
        raise SystemExit(f"no finished level under {grid}")
    first = load_run(level_dir(grid, rows[0]["family"], rows[0]["level"]) / "untied")
    config = json.loads(json.dumps(first.config.to_dict(), default=str))
    timing = []
    if (grid / "timing.jsonl").is_file():
        timing = [json.loads(line) for line in (grid / "timing.jsonl").read_text().splitlines()]
    seconds = sum(t["seconds"] for t in timing)
    command = ("python experiments/dh_calibration/calibrate.py train --out runs/dh-calibration\n"
               "python experiments/dh_calibration/calibrate.py analyse runs/dh-calibration")
    settings = {"grammars": {f: str(g.relative_to(HERE.parent.parent)) for f, (g, _) in
                             FAMILIES.items()},
                "skew": list(SKEW), "objective": OBJECTIVE, "model": MODEL,
                "train_config": config, "knn_settings": [list(x) for x in SETTINGS],
                "tokens": "all V rows (32 grammar symbols, [BOS], [EOS])",
                "cpu": cpu_name(), "train_seconds_one_core": round(seconds),
                "command": command}
    document = calibration_document(rows, settings)
    PACKAGED.write_text(json.dumps(document, indent=1) + "\n", "utf-8")
    head = ["# DH diagnostic calibration: measured tables", "",
            "Written by `calibrate.py analyse` (do not edit by hand); the reading is in "
            "README.md. Commands:", "", "```", command, "```", "",
            f"CPU: {cpu_name()}; training {seconds / 60:.1f} min on one thread "
            f"({len(timing)} ensembles of tied + untied, {rows[0]['n_seeds']} seeds each, "
            f"{config.get('steps', '?')} steps); date {document['date']}.", "",
            "Intervals: [95% CI] the Student-t interval of the mean over seeds; [95% PI] the "
            "prediction interval of one more model, which is what a single model's reading "
            "is compared with.", ""]
    text = "\n".join(head + table_lines(rows)) + "\n"
    (HERE / "results.md").write_text(text, "utf-8")
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--levels", default=None, help="comma list (default: each family's own)")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--steps", type=int, default=6000)
    p.add_argument("--every", type=int, default=500)
    a = sub.add_parser("analyse")
    a.add_argument("grid", type=Path)
    args = parser.parse_args()
    if args.command == "train":
        args.out.mkdir(parents=True, exist_ok=True)
        for family in args.families.split(","):
            levels = (FAMILIES[family][1] if args.levels is None
                      else tuple(map(int, args.levels.split(","))))
            for level in levels:
                seconds = train_level(args.out, family, level, args.seeds, args.steps,
                                      args.every)
                print(f"done {family} {level} ({seconds:.0f} s)", flush=True)
                if seconds:
                    with open(args.out / "timing.jsonl", "a", encoding="utf-8") as handle:
                        handle.write(json.dumps({"family": family, "level": level,
                                                 "seconds": seconds, "cpu": cpu_name()}) + "\n")
        return
    analyse(args.grid)


if __name__ == "__main__":
    main()
