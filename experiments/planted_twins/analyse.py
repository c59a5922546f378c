"""The planted-twins study's analysis (README.md): distances, T1's log-ratio, the price of tying,
and recovery by the DH diagnostics, from the runs run.py trained.

    DHWT_DATA=../shared/data python experiments/planted_twins/analyse.py OUT

Writes results.md and figures/distances.png beside this file (--name NAME: NAME.md and
figures/NAME-distances.png) and OUT/analysis.json.

- Distances: every snapshot's twin-pair distance over the mean distance of 200 random pairs of
  different ordinary tokens (seen in training, no twin, no marker, no [MASK]; default_rng(0)),
  dhwt.analysis.closeness's normalised measure, averaged over the twin pairs; input and output
  matrices of untied runs, the one matrix of tied runs.
- T1 and the price: each member's final checkpoint on the valid split's first EVAL_WINDOWS
  windows (masked LM: the split's fixed masks, dhwt.text.text_task). T1: the logit
  difference z_a - z_b at positions whose target is a twin, mean over positions. Price: tied
  minus untied mean loss on positions whose target is a twin, minus the same difference on the
  same positions of the control corpus (there the target is w), paired by seed; for cnd twins
  (a marker shifts positions) the control side is every position whose target is a twinned w.
- Recovery: `dhwt corpus-dh`'s pair ranking (dhwt.analysis.corpus_dh.violating_pairs, as the
  command ranks a corpus's pairs, order 1, dim 100, its default k) on the planted train stream,
  and `dhwt diagnose --json --top 2N` (the 2N tokens whose input and output neighbourhoods agree
  least) of each untied run: precision and recall of the planted pairs / twin tokens at the top
  against chance (a random order of the same candidates).
Intervals: mean ± the 95% Student-t half-width over the 3 seeds (t(0.975, 2) = 4.30),
dhwt.analysis.intervals.summarise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from dhwt.analysis import corpus_dh as cdh  # noqa: E402
from dhwt import load_run, pair_closeness  # noqa: E402
from dhwt.analysis.intervals import summarise  # noqa: E402
from dhwt.languages.language import MASK  # noqa: E402
from dhwt.runs.run import is_finished, load_config_text  # noqa: E402
from dhwt.text.twins import MARKER  # noqa: E402

EVAL_WINDOWS = 1024
CHUNK = 64
BASELINE_PAIRS = 200
#: corpus-dh's frequency null is not used here: few permutations keep the analysis short.
PERMUTATIONS = 10


def twins_of(run) -> dict | None:  # noqa: ANN001
    return json.loads(run.twins_file.read_text()) if run.twins_file.is_file() else None


def baseline_pairs(run, truth: dict | None) -> list[tuple[str, str]]:  # noqa: ANN001
    vocab = run.vocab
    counts = np.load(run.token_counts_file)
    planted = {t for q in (truth or {"pairs": []})["pairs"] for t in (q["a"], q["b"])}
    ordinary = [i for i, t in enumerate(vocab)
                if counts[i] > 0 and t not in planted and t not in (MARKER, MASK)]
    rng = np.random.default_rng(0)
    pairs = []
    while len(pairs) < BASELINE_PAIRS:
        a, b = rng.choice(ordinary, 2, replace=False)
        pairs.append((vocab[a], vocab[b]))
    return pairs


def matched_pairs(truth: dict) -> list[tuple[str, str]]:
    """BASELINE_PAIRS random pairs (a_i, a_j), i != j: two different twinned words, as frequent
    as the twins (default_rng(0))."""
    words = [q["a"] for q in truth["pairs"]]
    rng = np.random.default_rng(0)
    return [tuple(words[i] for i in rng.choice(len(words), 2, replace=False))
            for _ in range(BASELINE_PAIRS)] if len(words) > 1 else []


def distances(run, truth: dict) -> dict[str, np.ndarray]:  # noqa: ANN001
    """side -> (T, S) normalised twin distance, mean over pairs (side + "_matched": against
    matched_pairs instead of random ordinary pairs); and the steps."""
    snapshots = run.snapshots()
    pairs = [(q["a"], q["b"]) for q in truth["pairs"]]
    bases = {"": baseline_pairs(run, truth), "_matched": matched_pairs(truth)}
    sides = ("input",) if run.config.tying.tie_schedule.initial_tied else ("input", "output")
    out = {"steps": np.array([s.step for s in snapshots])}
    for side in sides:
        for suffix, base in bases.items():
            if base:
                close = pair_closeness(snapshots, side, pairs, base)
                out[("tied" if len(sides) == 1 else side) + suffix] = close.normalised.mean(-1)
    return out


def position_stats(run, truth: dict | None, control_ids: list[int] | None):  # noqa: ANN001
    """Per member: mean loss on twin-target positions (or, for the control, on positions whose
    target is in control_ids), the mask of those positions, and the mean logit difference
    z_a - z_b over twin-target positions (None for the control)."""
    task = load_config_text(run.config.replace(eval_windows=EVAL_WINDOWS))
    batch = task.eval_batch("valid")
    model = run.model().eval()
    members = len(run.config.members.seeds)
    targets = batch.targets
    if truth is not None:
        a_ids = torch.tensor([q["ids"][0] for q in truth["pairs"]])
        b_ids = torch.tensor([q["ids"][1] for q in truth["pairs"]])
        chosen = torch.isin(targets, torch.cat([a_ids, b_ids]))
    else:
        chosen = torch.isin(targets, torch.tensor(control_ids))
    losses = torch.zeros(members, *targets.shape)
    diffs = []
    with torch.no_grad():
        for start in range(0, len(targets), CHUNK):
            part = slice(start, start + CHUNK)
            inputs = batch.inputs[part].expand(members, -1, -1)
            padding = None if batch.padding is None else batch.padding[part].expand(
                members, -1, -1)
            logits = model(inputs, padding).float()
            t = targets[part].clamp(min=0)
            losses[:, part] = -torch.log_softmax(logits, -1).gather(
                -1, t.expand(members, -1, -1).unsqueeze(-1)).squeeze(-1)
            if truth is not None:
                here = chosen[part]
                pair = torch.full((len(run.vocab) + 1,), -1, dtype=torch.long)
                pair[a_ids] = torch.arange(len(a_ids))
                pair[b_ids] = torch.arange(len(b_ids))
                k = pair[t[here]]
                z = logits[:, here]
                diffs.append(z.gather(-1, a_ids[k].expand(members, -1).unsqueeze(-1)).squeeze(-1)
                             - z.gather(-1, b_ids[k].expand(members, -1).unsqueeze(-1))
                             .squeeze(-1))
    mean_loss = (losses * chosen).sum(dim=(1, 2)) / chosen.sum()
    diff = torch.cat(diffs, dim=1) if diffs else None
    return {"loss": mean_loss.numpy(), "chosen": chosen, "targets": targets,
            "diff_mean": None if diff is None else diff.mean(dim=1).numpy(),
            "diff_std": None if diff is None else diff.std(dim=1).numpy(),
            "positions": int(chosen.sum())}


def recovery_corpus_dh(run, truth: dict) -> dict:  # noqa: ANN001
    """corpus-dh's pair ranking on the planted train stream: precision/recall of the planted
    pairs at the top N and 10 N, against a random order of the same candidate pairs."""
    from dhwt.text.corpus import load_wikitext2
    from dhwt.text.token_cache import tokenize_corpus
    from dhwt.text.twins import plant_twins

    data = run.config.data
    tokens = tokenize_corpus(load_wikitext2(data.data), data.tokenizer)
    planted = plant_twins(tokens.ids, tokens.vocab, data.twins, p=data.twin_p,
                          kind=data.twin_kind, seed=data.twin_seed)
    counts = cdh.count_stream(planted.ids["train"], planted.vocab, 1)
    found = cdh.neighbourhoods(counts, dim=100, permutations=PERMUTATIONS)
    everything = cdh.violating_pairs(found, 10 ** 9)
    truth_pairs = {tuple(sorted(q["ids"])) for q in truth["pairs"]}
    ranked = [tuple(sorted((a, b))) for a, b, _, _ in everything]
    candidates = len(ranked)
    in_candidates = sum(p in truth_pairs for p in set(ranked))
    n = len(truth_pairs)
    rows = {}
    for top in (n, 10 * n):
        hits = sum(p in truth_pairs for p in ranked[:top])
        rows[top] = {"precision": hits / max(min(top, candidates), 1), "recall": hits / n}
    ranks = [i + 1 for i, p in enumerate(ranked) if p in truth_pairs]
    return {"candidates": candidates, "planted_candidates": in_candidates,
            "chance_precision": in_candidates / max(candidates, 1), "top": rows,
            "median_rank": float(np.median(ranks)) if ranks else None,
            "k": int(found.near_in.indices.shape[1]), "tokens": int(len(found.tokens))}


def recovery_diagnose(run, truth: dict) -> dict:  # noqa: ANN001
    """`dhwt diagnose --json --top 2N`: share of twin tokens among each member's 2N
    least-agreeing tokens, against their share of all tokens."""
    twin_tokens = {t for q in truth["pairs"] for t in (q["a"], q["b"])}
    top = len(twin_tokens)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-m", "dhwt", "diagnose", str(run.path), "--json",
                           "--top", str(top)], env=env, capture_output=True, text=True,
                          check=True)
    report = json.loads(done.stdout)
    precision = [sum(row["token"] in twin_tokens for row in s["disagree_most"]) / top
                 for s in report["subjects"]]
    overlap = [s["input_output_knn_overlap"]["mean"] for s in report["subjects"]]
    return {"precision": precision, "chance": top / report["tokens"], "top": top,
            "overlap": overlap}


def text(values, digits: int = 3) -> str:  # noqa: ANN001
    return summarise(np.asarray(values, dtype=float), bimodal=False).text(digits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--name", default="results", help="results file name (no .md)")
    parser.add_argument("--to", type=Path, default=HERE, help="where results and figures go")
    args = parser.parse_args()
    runs = {p.name: load_run(p) for p in sorted((args.out / "runs").iterdir())
            if is_finished(p)}
    lines = ["# Planted twins: results", "",
             f"From `analyse.py {args.out}` over the finished runs ({len(runs)}): "
             + ", ".join(runs) + ".", ""]
    saved: dict[str, object] = {}

    # 1. distances
    lines += ["## 1. Twin pairs against random pairs (normalised distance, 1 = random pairs)",
              "", "Final snapshot; mean over the planted pairs, then mean ± 95% t-interval over "
              "seeds 1-3. Input and output: untied run; tied: the tied run's one matrix.", "",
              "Matched: against pairs of two different twinned words (as frequent as the "
              "twins) instead of random pairs.", "",
              "| arm | untied input | untied output | tied | input at step 0 | input, matched | "
              "output, matched | tied, matched |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    curves = {}
    for name, run in runs.items():
        if not name.endswith("-untied") or twins_of(run) is None:
            continue
        arm = name.removesuffix("-untied")
        truth = twins_of(run)
        d = distances(run, truth)
        tied = runs.get(f"{arm}-tied")
        dt = distances(tied, truth) if tied is not None else None
        curves[arm] = (d, dt)
        cells = [text(d["input"][-1]), text(d["output"][-1]), text(dt["tied"][-1]) if dt else "",
                 text(d["input"][0])]
        cells += [text(x[key][-1]) if x is not None and key in x else "" for x, key in
                  ((d, "input_matched"), (d, "output_matched"), (dt, "tied_matched"))]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    saved["distances"] = {arm: {k: v.tolist() for k, v in d.items()} | (
        {"tied": dt["tied"].tolist()} if dt else {}) for arm, (d, dt) in curves.items()}
    if curves:
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
        for arm, (d, dt) in curves.items():
            for ax, (key, source) in zip(axes, (("input", d), ("output", d), ("tied", dt))):
                if source is None:
                    continue
                mean = source[key].mean(axis=1)
                line, = ax.plot(source["steps"], mean, label=arm)
                ax.fill_between(source["steps"], source[key].min(axis=1),
                                source[key].max(axis=1), color=line.get_color(), alpha=0.15)
        for ax, title in zip(axes, ("untied input", "untied output", "tied")):
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
            ax.set_title(title)
            ax.set_xlabel("step")
        axes[0].set_ylabel("twin distance / random-pair distance")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        (args.to / "figures").mkdir(parents=True, exist_ok=True)
        prefix = "" if args.name == "results" else f"{args.name}-"
        fig.savefig(args.to / "figures" / f"{prefix}distances.png", dpi=120)

    # 2 and 3. T1 and the price
    stats = {}
    for name, run in runs.items():
        truth = twins_of(run)
        if truth is None:
            continue
        stats[name] = position_stats(run, truth, None)
        stats[name]["truth"] = truth
    lines += ["", "## 2. T1: untied output rows against the log-ratio", "",
              "z_a - z_b (logit of twin a minus twin b) at valid positions whose target is a "
              f"twin (first {EVAL_WINDOWS} windows; masked LM: the fixed masks); mean over "
              "positions per seed, then mean ± t-interval over seeds; T1's value "
              "log((1 - p) / p) when the model is calibrated; spread: the standard deviation "
              "over positions (mean over seeds).", "",
              "| run | positions | mean z_a - z_b | T1 | spread over contexts |",
              "|---|---:|---:|---:|---:|"]
    for name, s in stats.items():
        relation = s["truth"]["pairs"][0]["relations"][runs[name].config.data.objective]
        t1 = relation["log_ratio"]
        lines.append(f"| {name} | {s['positions']:,} | {text(s['diff_mean'])} | "
                     f"{'' if t1 is None else f'{t1:.3f}'} | {s['diff_std'].mean():.2f} |")
    lines += ["", "## 3. The price of tying on twin targets", "",
              "Mean loss (nats) on valid positions whose target is a twin: tied minus untied in "
              "the twin corpus, minus tied minus untied on the same positions of the control "
              "corpus (target w there), paired by seed; mean ± t-interval over seeds. T4's "
              "bound for merged rows without a bias: kl(1-p || 1/2) per twin-target token "
              "(0 at p = 0.5, 0.368 at p = 0.1; n/a for cnd twins, whose ratio is 1).", "",
              "| arm | tied - untied (twins) | tied - untied (control, same positions) | "
              "price | T4 B(0) |", "|---|---:|---:|---:|---:|"]
    price_rows, controls = {}, {}
    for name in stats:
        if not name.endswith("-untied"):
            continue
        arm = name.removesuffix("-untied")
        objective, corpus = arm.split("-", 1)
        tied_name, control_u, control_t = (f"{arm}-tied", f"{objective}-control-untied",
                                           f"{objective}-control-tied")
        if tied_name not in stats or control_u not in runs or control_t not in runs:
            continue
        truth = stats[name]["truth"]
        w_ids = [q["ids"][0] for q in truth["pairs"]]
        twin_diff = stats[tied_name]["loss"] - stats[name]["loss"]
        same = truth["kind"] == "sem"
        control = {}
        for c in (control_u, control_t):
            if (c, tuple(w_ids)) not in controls:
                controls[c, tuple(w_ids)] = position_stats(runs[c], None, w_ids)
            control[c] = controls[c, tuple(w_ids)]
            if same and not torch.equal(control[c]["chosen"], stats[name]["chosen"]):
                raise SystemExit(f"{c}: the control's w positions are not {name}'s twin "
                                 "positions (windows or masks differ)")
        control_diff = control[control_t]["loss"] - control[control_u]["loss"]
        price = twin_diff - control_diff
        p = truth["p"]
        bound = (f"{(1 - p) * math.log(2 * (1 - p)) + p * math.log(2 * p):.3f}" if same
                 else "n/a")
        price_rows[arm] = {"twins": twin_diff.tolist(), "control": control_diff.tolist(),
                           "price": price.tolist()}
        lines.append(f"| {arm} | {text(twin_diff)} | {text(control_diff)} | {text(price)} | "
                     f"{bound} |")
    saved["price"] = price_rows
    saved["t1"] = {n: {"mean": s["diff_mean"].tolist(), "spread": s["diff_std"].tolist()}
                   for n, s in stats.items()}

    # 4. recovery
    lines += ["", "## 4. Recovery by the DH diagnostics", "",
              "`dhwt corpus-dh` pair ranking (pairs neighbours in either PPMI space, by "
              "|cos_in - cos_out|) on the planted train stream; chance: the planted share of "
              "the ranked candidates.", "",
              "| corpus | relation of the planted pairs (clm) | candidates | planted among them | "
              "precision@N | recall@N | precision@10N | recall@10N | chance precision | "
              "median rank |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    done_corpora, recovery = set(), {}
    for name, run in runs.items():
        truth = twins_of(run)
        corpus = name.split("-", 1)[1].rsplit("-", 1)[0]
        if truth is None or corpus in done_corpora:
            continue
        done_corpora.add(corpus)
        r = recovery_corpus_dh(run, truth)
        recovery[corpus] = r
        rel = truth["pairs"][0]["relations"]["clm"]
        n = len(truth["pairs"])
        tops = r["top"]
        lines.append(f"| {corpus} | sem {rel['sem']}, cnd {rel['cnd']} | {r['candidates']:,} | "
                     f"{r['planted_candidates']} | {tops[n]['precision']:.3f} | "
                     f"{tops[n]['recall']:.3f} | {tops[10 * n]['precision']:.3f} | "
                     f"{tops[10 * n]['recall']:.3f} | {r['chance_precision']:.2e} | "
                     f"{r['median_rank']} |")
    lines += ["", "`dhwt diagnose --json --top 2N` of each untied run: share of twin tokens "
              "among the 2N tokens whose input and output neighbourhoods agree least (per "
              "seed), against their share of the vocabulary.", "",
              "| run | twin share of the least-agreeing 2N (seeds 1, 2, 3) | chance | "
              "mean KNN overlap |", "|---|---|---:|---:|"]
    for name, run in runs.items():
        truth = twins_of(run)
        if truth is None or not name.endswith("-untied"):
            continue
        r = recovery_diagnose(run, truth)
        recovery[name] = r
        lines.append(f"| {name} | {', '.join(f'{x:.3f}' for x in r['precision'])} | "
                     f"{r['chance']:.3f} | {text(r['overlap'])} |")
    saved["recovery"] = recovery

    # losses from the runs' own metrics
    lines += ["", "## Valid loss (the runs' metrics, last evaluation)", "",
              "| run | valid loss | valid perplexity |", "|---|---:|---:|"]
    for name, run in runs.items():
        last = [m for m in run.metrics() if m["split"] == "valid"]
        step = max(m["step"] for m in last)
        values = [m["loss"] for m in last if m["step"] == step]
        lines.append(f"| {name} | {text(values)} | {math.exp(np.mean(values)):.1f} |")
    (args.to / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    (args.out / "analysis.json").write_text(json.dumps(saved, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
