"""The tables of experiments/corpus_dh/LOG.md: `dhwt corpus-dh` on the built-in grammars and
variants (exact and sampled counts) and on WikiText-2 under six tokenizers (order 1), or the
given runs (e.g. bpe:2048@2: tokenizer bpe:2048, order 2).

    python experiments/corpus_dh/tables.py synthetic
    DHWT_DATA=../shared/data TIKTOKEN_CACHE_DIR=../shared/data/gpt2/tiktoken_cache \
        python experiments/corpus_dh/tables.py wikitext [TOKENIZER@ORDER ...]

Each row is one `dhwt corpus-dh` call (printed above its table as the command line); the
tables are printed as Markdown and, for the built-in set (no TOKENIZER@ORDER given), written to
results-synthetic.md or results-wikitext.md beside this file, which the READMEs' numbers are
checked against.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from dhwt import CorpusDhOptions, corpus_dh
from dhwt.directories import atomic_path

HERE = Path(__file__).resolve().parent

PAIR_RATIO = "experiments/tying_price/pair-ratio.toml"
LANGUAGES = [
    ("parity", ()),
    ("parity-dh", ()),
    ("parity-nocnd", ()),
    ("four-cases", ()),
    ("parity", ("classes.1.skew=0.4",)),
    ("parity", ("classes.0.skew=0.0",)),
    ("parity-nocnd", ("classes.1.skew=0.0",)),
    (PAIR_RATIO, ()),
    (PAIR_RATIO, ("states.B.0.p=0.1", "states.B.1.p=0.9")),
]
#: (label, order, samples)
MODES = [("exact, order full", "full", None), ("exact, order 1", 1, None),
         ("exact, order 2", 2, None), ("1,000 strings, order full", "full", 1000),
         ("100,000 strings, order full", "full", 100_000),
         ("100,000 strings, order 2", 2, 100_000)]
TOKENIZERS = ["char", "bpe:257", "bpe:1024", "bpe:4096", "gpt2", "word"]


def _name(grammar: str, sets: tuple[str, ...]) -> str:
    short = "pair-ratio" if grammar == PAIR_RATIO else grammar
    return short + "".join(f" {s}" for s in sets)


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def synthetic(say: Callable[[str], None]) -> None:
    for label, order, samples in MODES:
        flags = f"--order {order}" + (f" --samples {samples} --seed 0" if samples else "")
        say(f"\n#### {label}\n\n`dhwt corpus-dh --grammar G [--set ...] {flags}`\n")
        say("| language | sem P | sem R | cnd P | cnd R | DH violation est. | exact | "
            "KNN overlap (chance, frequency null) |")
        say("|---|---|---|---|---|---|---|---|")
        est, exact = [], []
        start = time.perf_counter()
        for grammar, sets in LANGUAGES:
            result = corpus_dh(CorpusDhOptions(grammar=grammar, assignments=sets, order=order,
                                               samples=samples), progress=False)
            rel, knn = result.relations, result.match
            dh = rel.dh_violation
            est.append(dh.estimated)
            exact.append(dh.exact)
            say(f"| {_name(grammar, sets)} | {_num(rel.sem.precision)} | "
                f"{_num(rel.sem.recall)} | {_num(rel.cnd.precision)} | "
                f"{_num(rel.cnd.recall)} | {dh.estimated:.2f} "
                f"({'/'.join(map(str, dh.estimated_pairs))}) | {dh.exact:.2f} "
                f"({'/'.join(map(str, dh.exact_pairs))}) | "
                f"{knn.mean_overlap:.2f} ({knn.chance_overlap:.2f}, "
                f"{knn.frequency_null.overlap:.2f}) |")
        rho = spearmanr(est, exact).statistic if len(set(est)) > 1 else float("nan")
        say(f"\nSpearman (estimated vs exact violation over the {len(est)} languages): "
            f"{rho:.2f}; {time.perf_counter() - start:.1f} s")


def wikitext(runs: list[str], say: Callable[[str], None]) -> None:
    say("| tokenizer | order | V | tokens seen | compared | overlap | chance | frequency null "
        "[95%] | excess over null | Jaccard | overlap by frequency bucket (rarest to most "
        "frequent) | wall s |")
    say("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for run in runs or TOKENIZERS:
        tokenizer, _, order = run.partition("@")
        order = order or "1"
        start = time.perf_counter()
        result = corpus_dh(CorpusDhOptions(corpus=os.environ.get("DHWT_DATA", "wikitext-2"),
                                           tokenizer=tokenizer, order=int(order)),
                           progress=False)
        wall = time.perf_counter() - start
        tok, knn = result.tokens, result.match
        null = knn.frequency_null
        buckets = " / ".join(f"{b.mean_overlap:.3f}" for b in result.buckets)
        say(f"| {tokenizer} | {order} | {tok.vocabulary:,} | {tok.occurring:,} | "
            f"{tok.compared:,} | {knn.mean_overlap:.4f} | {knn.chance_overlap:.4f} | "
            f"{null.overlap:.4f} [{null.interval_95[0]:.4f}, "
            f"{null.interval_95[1]:.4f}] | {null.excess_overlap:+.4f} | "
            f"{knn.mean_jaccard:.4f} | {buckets} | {wall:.0f} |")
        top = ", ".join(f"{p.pair[0]!r}~{p.pair[1]!r} ({p.cos_in:+.2f}/"
                        f"{p.cos_out:+.2f})" for p in result.violating[:3])
        print(f"<!-- {tokenizer}: top violating pairs (cos_in/cos_out): {top} -->",
              file=sys.stderr)


def main(mode: str, runs: list[str]) -> None:
    """Print the tables of `mode` (synthetic or wikitext); the built-in set also goes to its
    results file, which appears whole when the last table is done."""
    if mode == "wikitext" and runs:
        wikitext(runs, print)
        return
    with atomic_path(HERE / f"results-{mode}.md") as tmp, tmp.open("w", encoding="utf-8") as out:
        def say(text: str) -> None:
            print(text, flush=True)
            out.write(text + "\n")

        say(f"# corpus_dh: {mode}\n\nWritten by `python experiments/corpus_dh/tables.py {mode}`.\n")
        if mode == "synthetic":
            synthetic(say)
        else:
            wikitext([], say)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main(sys.argv[1], sys.argv[2:])
