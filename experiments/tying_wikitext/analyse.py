"""Read the WikiText-2 tying studies: the learning-rate sweep, tied vs untied, the untie sweep.

    python experiments/tying_wikitext/analyse.py --sweep runs/tw-lr --fair runs/tw-fair \
        --untie runs/tw-untie

writes experiments/tying_wikitext/results.md (every table) and figures/curves.png. Per run and
seed: the final valid and test perplexity (full splits); over seeds mean ± the 95% Student-t
interval (dhwt.analysis.intervals), and each run's difference from untied paired by seed (a
seed fixes the body's init and the data order in every run). Where untying helps: each final
model's cross-entropy on every valid token, averaged per token type over seeds, compared by
the type's train frequency and by the untied models' own per-token DH diagnostic (input vs
output KNN overlap, k = 10, over the tokens seen in training).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from dhwt.analysis.intervals import summarise
from dhwt import knn_match, load_run
from dhwt.runs.metrics import metric_table

HERE = Path(__file__).parent
CHUNK = 128  # valid windows per forward pass in the per-token evaluation
LOSS_SPAN = 1.2  # nats shown on the loss panels, from just below the lowest loss


def runs_of(study: Path) -> dict[str, Path]:
    """The run directories of a study, by name, in the order the study file lists them."""
    return {p.name: p for p in sorted((study / "runs").iterdir()) if p.is_dir()}


def final(records: list[dict], split: str) -> np.ndarray:
    """(members,) the loss of `split` at the last step that evaluated it."""
    return metric_table(records, split, "loss")[1][-1]


def sweep_table(studies: list[Path]) -> list[str]:
    """Valid loss after the sweep's steps, arms by learning rate; each arm's best marked."""
    found: dict[str, dict[str, float]] = {}
    for name, path in {n: p for study in studies for n, p in runs_of(study).items()}.items():
        arm, lr = name.rsplit("-lr", 1)
        found.setdefault(arm, {})[lr] = float(final(load_run(path).metrics(), "valid")[0])
    lrs = sorted({lr for cells in found.values() for lr in cells}, key=float)
    lines = ["| arm | " + " | ".join(f"lr {lr}" for lr in lrs) + " |",
             "|---|" + "---:|" * len(lrs)]
    for arm, cells in found.items():
        best = min(cells, key=cells.get)
        row = [(f"**{cells[lr]:.4f}**" if lr == best else f"{cells[lr]:.4f}") if lr in cells
               else "" for lr in lrs]
        lines.append(f"| {arm} | " + " | ".join(row) + " |")
    return lines


def final_table(runs: dict[str, Path]) -> list[str]:
    """Valid and test perplexity per run over seeds, and the paired difference from untied."""
    found = {}
    for name, path in runs.items():
        run = load_run(path)
        records = run.metrics()
        found[name] = run, {s: np.exp(final(records, s)) for s in ("valid", "test")}
    base = found["untied"][1]
    lines = ["| run | schedule | valid ppl | test ppl | valid - untied (paired) | "
             "test - untied (paired) | seeds |", "|---|---|---:|---:|---:|---:|---|"]
    for name, (run, ppl) in found.items():
        diff = {s: summarise(ppl[s] - base[s]).text(2) if name != "untied" else ""
                for s in ppl}
        values = " / ".join(f"{v:.2f}" for v in ppl["valid"])
        lines.append(f"| {name} | {run.config.tying.tie_schedule} | "
                     f"{summarise(ppl['valid']).text(2)} | {summarise(ppl['test']).text(2)} | "
                     f"{diff['valid']} | {diff['test']} | valid {values} |")
    return lines


def curves_figure(runs: dict[str, Path], out: Path) -> None:
    """Train-sample and valid loss over steps: each run's mean over seeds, its seeds' range as a
    band, switches marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    styles = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1))]
    low, gaps = np.inf, []
    for index, (name, path) in enumerate(runs.items()):
        run = load_run(path)
        records = run.metrics()
        steps, train = metric_table(records, "train", "loss")
        _, valid = metric_table(records, "valid", "loss")
        low = min(low, np.nanmin(train), np.nanmin(valid))
        label = name
        if steps[-1] > 0 and valid[1:].mean(1).max() > LOSS_SPAN + valid[-1].mean():
            label += f" (valid {valid[1:].mean(1).max():.1f} after its switch)"
        style = dict(linestyle=styles[index % len(styles)], color=f"C{index}", label=label)
        for ax, table in zip(axes[:2], (train, valid)):
            ax.plot(steps, table.mean(1), **style)
            ax.fill_between(steps, table.min(1), table.max(1), color=f"C{index}", alpha=0.15)
        gap = (train - valid).mean(1)[1:]
        gaps.extend(gap)
        axes[2].plot(steps[1:], gap, **style)
        for event in run.config.tying.tie_schedule.events:
            for ax in axes:
                ax.axvline(event.step, color=f"C{index}", linewidth=0.7, alpha=0.6)
    titles = ("train loss (fixed sample of 1,024 train windows)", "valid loss (full split)",
              "train - valid loss (WikiText-2's valid is easier than train)")
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in axes[:2]:
        ax.set_ylim(low - 0.05, low - 0.05 + LOSS_SPAN)
    # the few points just after a tie by the mean fall far below the rest: keep them off the scale
    axes[2].set_ylim(np.percentile(gaps, 5) - 0.02, max(gaps) + 0.01)
    axes[1].legend(fontsize=8, title="mean of 3 seeds; band: min-max; lines: switches",
                   title_fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def member_token_loss(path: Path, step: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(members, V) summed cross-entropy on the valid tokens of each type, per member of the
    run's model at the checkpoint of `step` (default: the final one), and (V,) how often each
    type is a valid target."""
    run = load_run(path)
    model, batch = run.model(step).eval(), run.task.eval_batch("valid")
    vocab, members = len(run.task.vocab), model.members
    sums = torch.zeros(members, vocab, dtype=torch.float64)
    with torch.no_grad():
        for start in range(0, len(batch.inputs), CHUNK):
            inputs = batch.inputs[start:start + CHUNK]
            targets = batch.targets[start:start + CHUNK]
            logits = model(inputs.expand(members, -1, -1))
            keep = targets >= 0
            for m in range(members):
                ce = torch.nn.functional.cross_entropy(logits[m][keep], targets[keep],
                                                       reduction="none")
                sums[m].index_add_(0, targets[keep], ce.double())
    counts = np.bincount(batch.targets[batch.targets >= 0].numpy(), minlength=vocab)
    return sums.numpy(), counts


def per_token_loss(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(V,) summed cross-entropy on the valid tokens of each type, averaged over the run's
    members, and (V,) how often each type is a valid target."""
    sums, counts = member_token_loss(path)
    return sums.mean(axis=0), counts


def dh_per_member(path: Path, step: int | None = None) -> np.ndarray:
    """(members, V) each untied member's per-token overlap of input and output neighbourhoods
    (k 10, raw inner product, among tokens seen in training) at the snapshot of `step` (default:
    the newest); nan for unseen tokens."""
    run = load_run(path)
    seen = np.flatnonzero(run.task.token_counts() > 0)
    snapshot = run.embeddings(step)
    result = np.full((snapshot.input.shape[0], len(run.task.vocab)), np.nan)
    for m in range(snapshot.input.shape[0]):
        result[m, seen] = knn_match(snapshot.input[m], snapshot.output[m], tokens=seen).overlap
    return result


def dh_per_token(path: Path) -> np.ndarray:
    """(V,) the untied members' mean per-token overlap of input and output neighbourhoods (k 10,
    raw inner product, among tokens seen in training); nan for unseen tokens."""
    return dh_per_member(path).mean(axis=0)


def where_tables(runs: dict[str, Path]) -> list[str]:
    """Per-token gains of untying over tied, by train frequency and by the DH diagnostic."""
    losses = {name: per_token_loss(path) for name, path in runs.items()}
    counts = losses["untied"][1]
    train_counts = load_run(runs["untied"]).task.token_counts()
    total = counts.sum()
    names = [n for n in runs if n != "tied"]
    present = np.flatnonzero(counts > 0)
    order = present[np.argsort(train_counts[present])]
    # five frequency buckets of equal valid-token mass (rarest first)
    edges = np.searchsorted(np.cumsum(counts[order]) / total, [0.2, 0.4, 0.6, 0.8])
    buckets = np.split(order, edges)
    lines = ["Loss reduction from the tied model, nats per valid token of the bucket (positive: "
             "better than tied); buckets of equal valid-token mass by train frequency:", "",
             "| train count | types | valid tokens | tied loss | " +
             " | ".join(f"{n}" for n in names) + " |", "|---|---:|---:|---:|" + "---:|" * len(names)]
    for ids in buckets:
        c = counts[ids]
        tied = (losses["tied"][0][ids]).sum() / c.sum()
        gains = [tied - losses[n][0][ids].sum() / c.sum() for n in names]
        lines.append(f"| {train_counts[ids].min()}-{train_counts[ids].max()} | {len(ids)} | "
                     f"{c.sum()} | {tied:.3f} | " + " | ".join(f"{g:+.3f}" for g in gains) + " |")
    overall = [(losses["tied"][0].sum() - losses[n][0].sum()) / total for n in names]
    lines.append(f"| all | {len(present)} | {total} | {losses['tied'][0].sum() / total:.3f} | "
                 + " | ".join(f"{g:+.3f}" for g in overall) + " |")
    dh = dh_per_token(runs["untied"])
    known = present[~np.isnan(dh[present])]
    gain = (losses["tied"][0][known] - losses["untied"][0][known]) / counts[known]
    rho, p = stats.spearmanr(dh[known], gain)
    rho_f, _ = stats.spearmanr(dh[known], train_counts[known])
    rho_g, _ = stats.spearmanr(gain, train_counts[known])
    partial = (rho - rho_f * rho_g) / np.sqrt((1 - rho_f**2) * (1 - rho_g**2))
    lines += ["", "By the untied models' own per-token DH diagnostic (overlap of a token's 10 "
              "input and 10 output neighbours, mean of 3 seeds), tied minus untied loss:", "",
              "| DH overlap | types | valid tokens | mean gain per token | median train count |",
              "|---|---:|---:|---:|---:|"]
    for low, high in ((0, 0.0), (0.0, 0.05), (0.05, 0.1), (0.1, 0.2), (0.2, 1.01)):
        pick = (dh[known] <= high) if high == 0 else (dh[known] > low) & (dh[known] <= high)
        ids = known[pick]
        if not len(ids):
            continue
        c = counts[ids]
        g = (losses["tied"][0][ids].sum() - losses["untied"][0][ids].sum()) / c.sum()
        label = "0" if high == 0 else f"({low:.2f}, {min(high, 1):.2f}]"
        lines.append(f"| {label} | {len(ids)} | {c.sum()} | {g:+.3f} | "
                     f"{int(np.median(train_counts[ids]))} |")
    lines += ["", f"Spearman correlation over {len(known)} types between the DH overlap and the "
              f"per-type gain of untied over tied: {rho:+.3f} (p = {p:.2g}); between the DH "
              f"overlap and train frequency: {rho_f:+.3f}; between the gain and train frequency: "
              f"{rho_g:+.3f}; partial (DH overlap and gain, train frequency held fixed): "
              f"{partial:+.3f}."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", type=Path, nargs="+", required=True,
                        help="lr_sweep.toml's study dir (or several holding parts of it)")
    parser.add_argument("--fair", type=Path, required=True, help="fair.toml's study dir")
    parser.add_argument("--untie", type=Path, help="untie.toml's study dir")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    runs = runs_of(args.fair)
    runs = {n: runs[n] for n in ("untied", "tied", "untied-tie50") if n in runs}
    if args.untie is not None:
        runs.update(runs_of(args.untie))
    text = ["# WikiText-2 tying: measured tables (written by analyse.py)", "",
            "## Learning-rate sweep (valid loss, 400 steps, seed 1)", "", *sweep_table(args.sweep),
            "", "## Final perplexity (mean ± 95% t-interval over seeds; paired by seed)", "",
            *final_table(runs), "", "## Where untying helps (valid split)", "",
            *where_tables(runs), ""]
    (args.out / "results.md").write_text("\n".join(text))
    curves_figure(runs, args.out / "figures" / "curves.png")
    print("\n".join(text))


if __name__ == "__main__":
    main()
