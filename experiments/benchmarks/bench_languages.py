"""Benchmark of dhwt.languages: batch generation throughput and exact ground-truth time.

    .venv/bin/python experiments/benchmarks/bench_languages.py [--repeats 7]

1. Generation: Task.train_batch on EXor (N = 7) at the paper's full batch (every training string)
   and at larger sampled batches, in tokens/s (batch size x seq_len per batch); median over
   repeats. Target >= 1M tokens/s. Baseline, same run: a naive per-token Python sampler (the
   shape of the authors' code: redraw every variant and the mask position in Python loops).
2. Ground truth: compute_truth for EXor N = 7, both objectives, median over repeats. Target
   < 1 s. Baseline, same run: a brute-force truth that follows the definitions with Python
   dicts, on N = 6 (run once; N = 7 takes several times longer), against compute_truth on N = 6.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections import defaultdict

import torch

from dhwt import compute_truth, load_language
from dhwt.languages.splits import make_splits
from dhwt.languages.task import Task

BRUTE_BITS = 6  # the brute-force baseline's size (once); its time grows ~5x per bit


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def naive_batch(strings, variants, rng: random.Random, batch_size: int):
    """Per-token Python sampler: pick strings, draw each variant, pick a mask position."""
    batch = []
    for _ in range(batch_size):
        classes = rng.choice(strings)
        tokens = [rng.choices(variants[c][0], weights=variants[c][1])[0] for c in classes]
        spot = rng.randrange(len(tokens) - 1)  # never the label
        target = tokens[spot]
        tokens[spot] = "[MASK]"
        batch.append((tokens, spot, target))
    return batch


def naive_truth(n_bits: int, variants: dict) -> tuple[float, dict]:
    """EXor MLM truth by the definitions with dicts, computing what compute_truth computes:
    conditionals, semantic and conditional distances for every ordered pair, Bayes accuracy."""
    strings: dict[tuple, float] = defaultdict(float)
    for bits in itertools.product("01", repeat=n_bits):
        label = "EVEN" if bits.count("1") % 2 == 0 else "ODD"
        for combo in itertools.product(*[list(zip(*variants[b])) for b in bits]):
            p = 0.5**n_bits
            for _, q in combo:
                p *= q
            strings[tuple(v for v, _ in combo) + (label,)] += p
    joint: dict[tuple, dict] = defaultdict(lambda: defaultdict(float))
    for x, p in strings.items():
        for j in range(n_bits):
            joint[x[:j] + ("[MASK]",) + x[j + 1:]][x[j]] += p / n_bits
    cond = {r: {y: q / sum(ys.values()) for y, q in ys.items()} for r, ys in joint.items()}
    symbols = [v for b in "01" for v in variants[b][0]] + ["EVEN", "ODD"]
    sem, cnd = {}, {}
    for s1, s2 in itertools.permutations(symbols, 2):
        worst = 0.0
        for r in cond:
            for k, s in enumerate(r):
                if s == s1:
                    other = r[:k] + (s2,) + r[k + 1:]
                    worst = max(worst, 1.0 if other not in cond else max(
                        abs(cond[r].get(y, 0) - cond[other].get(y, 0))
                        for y in set(cond[r]) | set(cond[other])))
        sem[s1, s2] = worst
        cnd[s1, s2] = max(abs(ys.get(s1, 0) - ys.get(s2, 0)) for ys in cond.values())
    accuracy = sum(sum(ys.values()) * max(cond[r].values()) for r, ys in joint.items())
    return accuracy, {pair: max(d, sem[pair[::-1]]) <= 1e-9 for pair, d in sem.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    language = load_language("parity")
    split = make_splits(len(language.probs), 0.1, 0.1, 14)

    print("== generation throughput, EXor N=7 (tokens/s = batch x seq_len per second) ==")
    variants = {c.name: (list(c.variants), list(c.probs)) for c in language.classes}
    strings = [[language.classes[c].name for c in row] for row in language.strings]
    rng = random.Random(0)
    naive_n = 2000
    naive = median_time(lambda: naive_batch(strings, variants, rng, naive_n), args.repeats)
    naive_rate = naive_n * 8 / naive
    print(f"baseline naive Python sampler: {naive_rate:>12,.0f} tokens/s")
    for objective in ("mlm", "clm"):
        task = Task(language, split, objective)
        gen = torch.Generator().manual_seed(0)
        for batch_size in (None, 1024, 4096):
            rows = task.n_strings("train") if batch_size is None else batch_size
            per_call = 200 if batch_size is None else 50
            seconds = median_time(
                lambda: [task.train_batch(gen, batch_size) for _ in range(per_call)], args.repeats)
            rate = rows * task.seq_len * per_call / seconds
            label = f"full ({rows})" if batch_size is None else str(batch_size)
            print(f"{objective} batch {label:>10}: {rate:>12,.0f} tokens/s  "
                  f"{seconds / per_call * 1e6:8.0f} us/batch  x{rate / naive_rate:,.0f} vs naive"
                  f"  {'OK' if rate >= 1e6 else 'BELOW'} (target >= 1,000,000)")

    print("\n== exact ground truth ==")
    compute_truth(language, "mlm")  # warm-up (imports, allocator)
    for objective in ("mlm", "clm"):
        seconds = median_time(lambda: compute_truth(language, objective), args.repeats)
        print(f"EXor N=7 {objective}: {seconds:.3f} s  "
              f"{'OK' if seconds < 1 else 'ABOVE'} (target < 1 s)")
    both = median_time(lambda: [compute_truth(language, o) for o in ("mlm", "clm")], args.repeats)
    print(f"EXor N=7 both objectives: {both:.3f} s  {'OK' if both < 1 else 'ABOVE'} (target < 1 s)")
    small = load_language("parity", {"n_bits": BRUTE_BITS})
    ours = median_time(lambda: compute_truth(small, "mlm"), args.repeats)
    start = time.perf_counter()
    accuracy, sem = naive_truth(BRUTE_BITS, variants)
    brute = time.perf_counter() - start
    truth = compute_truth(small, "mlm")
    agree = abs(accuracy - truth.bayes_accuracy) < 1e-12 and all(
        sem[a, b] == bool(truth.sem[i, j]) for (i, a), (j, b)
        in itertools.permutations(enumerate(truth.symbols), 2))
    print(f"EXor N={BRUTE_BITS} mlm: brute-force dicts {brute:.3f} s, compute_truth {ours:.4f} s, "
          f"x{brute / ours:,.0f} faster; results agree: {agree}")


if __name__ == "__main__":
    main()
