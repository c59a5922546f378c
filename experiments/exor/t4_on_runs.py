"""T4 on the paper-size EXor runs: the price of the 0a-0b distance, per seed, from checkpoints.

For each member of each run (the newest checkpoint, float64, every masked context of the language
with its exact probability), prints:
- d0 = ||u_0a - u_0b||, the output (tied: the one) matrix's rows;
- need = log 9 / min_r ||h(r)||, the distance T1 requires at the pair's optimum (no output bias);
- pair KL = the pair's share of the excess cross-entropy, from the model's own logits;
- B(d0) = the least pair KL any bias-free head with rows that close can have (proofs/T4 (a));
- excess = the whole excess cross-entropy over the Bayes optimum.
T4 (a) predicts pair KL >= B(d0) for every member; the theorem holds for any bias-free linear head,
so a violation would mean the head is not U h (a bug), not a weak theorem.

    python experiments/exor/t4_on_runs.py runs/exor-parity/runs/tied runs/exor-parity/runs/untied
"""

from __future__ import annotations

import sys

import numpy as np

from dhwt.theory import softmax_regression as sr
from dhwt.theory.exor import run_members
from dhwt.theory.t4_tying_conflict import bernoulli_kl, merge_price


def main(run_dirs: list[str]) -> int:
    print("run | seed | d0 | need | pair KL | B(d0) | KL >= B | excess")
    print("---|---|---|---|---|---|---|---")
    held = True
    for run_dir in run_dirs:
        ctx, members = run_members(run_dir)
        if not {"0a", "0b"} <= set(ctx.truth.vocab):
            print(f"error: {run_dir}: its language has no 0a/0b pair (the parity grammar has)")
            return 2
        i, j = ctx.index("0a"), ctx.index("0b")
        p = ctx.truth.conditionals
        both = (p[:, i] > 0) & (p[:, j] > 0)
        weights = ctx.truth.context_probs[both] * (p[both, i] + p[both, j])
        a = np.log(p[both, i] / p[both, j])
        for seed, run in members:
            if run.b is not None:
                print(f"{run_dir} | {seed} | (output bias: T4 (a) does not apply)")
                continue
            d0 = float(np.linalg.norm(run.U[i] - run.U[j]))
            inst = sr.Instance(run.h[both], ctx.truth.context_probs[both], p[both])
            need = np.log(9) / float(np.linalg.norm(inst.features, axis=1).min())
            pair_kl = float(weights @ bernoulli_kl(a, run.logits[both, i] - run.logits[both, j]))
            price = merge_price(inst, d0, (i, j))
            ok = pair_kl >= price - 1e-9
            held &= ok
            print(f"{run_dir} | {seed} | {d0:.3f} | {need:.3f} | {pair_kl:.4f} | {price:.4f} | "
                  f"{'yes' if ok else 'NO'} | {run.excess(ctx):.4f}")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
