"""dhwt from Python, in five minutes: build a language whose ground truth is known exactly, train
a tiny transformer on it tied and untied, read the runs back, and measure their embeddings.

    python docs/tutorial.py [OUT_DIR]     # default: a new temporary directory

Everything is written under OUT_DIR (the dataset, two run directories, one figure); nothing
else is touched. About 10-20 seconds on one CPU core. The numbers printed are what this run
measured: 300 steps and 3 seeds are far too few for conclusions (see README.md, "What the main
job shows", for a real study), so nothing here is asserted about them.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import dhwt
from dhwt import (TrainConfig, chance_baseline, knn_match, load_language, load_task,
                  pair_closeness, population_fit, train_group, write_dataset)
from dhwt.report.figures import new_figure, save, step_axis

#: The pairs to watch: 0a/0b are semantically but not conditionally equivalent (DH violated:
#: one vector cannot serve both roles), 1a/1b are both (DH holds).
PAIRS = [("0a", "0b"), ("1a", "1b")]
#: Pairs of different classes: the yardstick of the normalised distance.
BASELINE = [("0a", "1a"), ("0a", "1b"), ("0b", "1a"), ("0b", "1b")]


def main(out: Path) -> None:
    # 1. A language with exact ground truth: the paper's EXor (parity) task, at 3 bits. Every
    #    string is written to a dataset directory (here all of them train: no valid/test split).
    language = load_language("parity", {"n_bits": 3})
    write_dataset(language, out / "data", valid_fraction=0.0, test_fraction=0.0)
    task = load_task(out / "data", "mlm")  # masked LM: one bit or the label is masked
    truth = task.truth  # exact relations and the Bayes optimum of this objective
    print(f"vocabulary {task.vocab}; {task.n_strings('train')} strings")
    print(f"Bayes optimum: cross-entropy {truth.bayes_cross_entropy:.3f} nats, "
          f"accuracy {truth.bayes_accuracy:.2f}")
    for pair in truth.pairs():
        if (pair.first, pair.second) in PAIRS:
            print(f"  {pair.first}/{pair.second}: sem {pair.sem}, cnd {pair.cnd}")

    # 2. Train tied and untied. Both runs name the same dataset (the data is given once: a task
    #    that is not the config's data is refused) and differ only in tie_schedule, so they
    #    train as one ensemble of 2 x 5 members; each run directory is written as if alone.
    #    Full batch (every string, weighted by its probability), cosine lr decay, one thread.
    model = dict(d_model=16, n_layers=2, n_heads=4, d_ff=16)
    optim = dict(lr=1e-2, lr_schedule="cosine", steps=300, threads=1)
    record = dict(eval_every=50, snapshot_every=50, checkpoint_every=300)
    runs = [(TrainConfig(data=str(out / "data"), tie_schedule=schedule, seeds=[1, 2, 3, 4, 5],
                         **model, **optim, **record), out / schedule)
            for schedule in ("tied", "untied")]
    results = train_group(runs, task)
    print(f"trained {' and '.join(r.run_dir.name for r in results)} to step {results[0].step} "
          f"as one ensemble in {results[0].seconds:.1f} s")

    # 3. Read the runs back from disk, as any later analysis would.
    tied, untied = dhwt.load_run(out / "tied"), dhwt.load_run(out / "untied")
    print(f"snapshots at steps {untied.steps}")
    for run in (tied, untied):
        name = run.config.tying.tie_schedule
        # run.metrics(): metrics.jsonl, one line per evaluation step, member and split
        curve = [f"{m['loss']:.2f}" for m in run.metrics()
                 if m["split"] == "train" and m["member"] == 0]
        print(f"{name}, seed 1: loss on the training strings every 50 steps {' '.join(curve)}")
        # run.model(): the ensemble rebuilt from its last checkpoint; its exact fit over every
        # context of the language (run.task: the data the run names), to set against Bayes
        cross_entropy, accuracy = population_fit(run.model(), run.task.truth)
        print(f"{name}: exact cross-entropy per seed {np.round(cross_entropy, 3).tolist()}, "
              f"accuracy {np.round(accuracy, 2).tolist()}")

    # 4. Pair closeness over training: Euclidean distance of a pair's rows divided by the mean
    #    distance of the baseline pairs, per snapshot and member ([snapshot, member, pair]).
    fig = new_figure(8, 3)
    for ax, side in zip(fig.subplots(1, 2), ("input", "output")):
        for run in (tied, untied):
            snapshots = [run.embeddings(step) for step in run.steps]
            close = pair_closeness(snapshots, side, PAIRS, BASELINE)
            for p, (a, b) in enumerate(PAIRS):
                mean = close.normalised[:, :, p].mean(axis=1)  # over the members
                ax.plot(close.steps, mean, label=f"{run.config.tying.tie_schedule} {a}/{b}")
                if side == "output":
                    print(f"{run.config.tying.tie_schedule} {side} {a}/{b}: normalised "
                          f"distance {mean[0]:.2f} at step 0, {mean[-1]:.2f} at the end")
        ax.set_title(f"{side} embeddings")
        ax.set_ylabel("distance / baseline")
        ax.set_ylim(bottom=0)  # a distance: 0 is where the pair's two rows coincide
        step_axis(ax)
    ax.legend(fontsize=7)
    print(f"figure: {save(fig, out / 'closeness.png')}")

    # 5. KNN match of the untied model's input and output matrices (k = 2 of 7 tokens), member
    #    by member, against the chance level of norm-matched random matrices (same row norms,
    #    random directions). dhwt.diagnose adds CKA, Procrustes and intervals.
    final = untied.embeddings()  # the newest snapshot: input and output are (members, V, d)
    rng = np.random.default_rng(0)
    for s, seed in enumerate(final.seeds):
        match = knn_match(final.input[s], final.output[s], k=2)
        chance = chance_baseline(final.input[s], final.output[s], k=2, generator=rng)
        print(f"untied seed {seed}: input vs output KNN overlap {match.mean_overlap:.2f} "
              f"(chance {chance.mean_overlap:.2f})")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory(prefix="dhwt-tutorial-") as tmp:
            main(Path(tmp))
