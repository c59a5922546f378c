"""`dhwt corpus-dh`: its options and help; what it does is dhwt.commands.corpus_dh."""

from __future__ import annotations

import click

from dhwt import defaults
from dhwt.cli.group import cli
from dhwt.cli.options import emit, json_option, k_option, seed_option


@cli.command("corpus-dh", context_settings={"max_content_width": 100})
@click.option("--grammar", "-g", metavar="NAME|PATH",
              help="Count a built-in grammar (parity, parity-dh, parity-nocnd, four-cases) or a "
                   "grammar TOML, read as a causal LM: exact expected counts, and its exact "
                   "relations to compare with.")
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE",
              help="Override a key of the grammar's spec, as `dhwt synth --set`; repeatable.")
@click.option("--samples", type=int, metavar="N",
              help="Grammars: count N strings drawn from it instead of the exact expectation "
                   "(finite data): the relations are then estimates, and the report warns when "
                   "the contexts occur fewer than 1 / tolerance^2 times on average.")
@click.option("--corpus", metavar="wikitext-2|PATH",
              help="Count natural text: WikiText-2 (found as `dhwt train --corpus` finds it; its "
                   "folder or archive, or DHWT_DATA), a folder with train/valid/test.txt, or one "
                   "UTF-8 text file. The train split is read as one token stream.")
@click.option("--tokenizer", metavar="char|word|bpe:N|gpt2",
              help="Tokenizer of --corpus: characters, words, a byte-level BPE of N >= 257 "
                   "tokens trained on the train split, or GPT-2's (TIKTOKEN_CACHE_DIR offline).")
@click.option("--order", default="1", show_default=True, metavar="N|full",
              help="Context length: the previous N tokens ([BOS] before the start); full (a "
                   "grammar's longest string) makes the relations exact (with exact counts: no "
                   "--samples).")
@click.option("--dim", type=int, default=defaults.DIM, show_default=True,
              help="Dimensions kept by the truncated SVD of the PPMI profiles (capped at the "
                   "matrix size).")
@k_option("Neighbours per token (self excluded).")
@click.option("--tolerance", type=float, metavar="T",
              help="Grammars: a pair is predicted in a relation when its distance is at most T "
                   "(sem: weighted mean total variation; cnd: relative L1).  [default: 1e-9 for "
                   "exact counts, 0.05 with --samples]")
@click.option("--buckets", type=int, default=defaults.BUCKETS, show_default=True,
              help="Frequency buckets (equal numbers of tokens sorted by count).")
@click.option("--top", type=int, default=defaults.TOP, show_default=True,
              help="Most DH-violating pairs listed (grammars: by the estimated relations; a "
                   "corpus: by neighbourhood cosines).")
@click.option("--min-count", type=float, metavar="N",
              help="Tokens of the listed DH-violating pairs are counted at least N times (rarer "
                   "ones have near-degenerate profiles).  [default: 100 for --corpus, 0 for "
                   "--grammar]")
@seed_option("Seed of --samples' draws, the SVD start vector, the chance level and the "
             "frequency-matched null's permutations.")
@click.option("--null-bins", type=int, default=defaults.NULL_BINS, show_default=True,
              help="Frequency bins of the frequency-matched null (equal numbers of compared "
                   "tokens sorted by count, at least 2 each): the output space is relabelled by "
                   "permuting tokens within a bin.")
@click.option("--permutations", type=int, default=defaults.PERMUTATIONS, show_default=True,
              help="Within-bin permutations drawn for the frequency-matched null's 95% range "
                   "and p-value (its level is the exact expectation).")
@click.option("--out", metavar="DIR", type=click.Path(file_okay=False),
              help="Also write DIR/report.md (and .html), DIR/corpus_dh.json, "
                   "DIR/per_token.csv and "
                   "DIR/figures/overlap_by_frequency.png: a new or empty directory, or the "
                   "report of an earlier corpus-dh (replaced).")
@json_option("Print the JSON document instead of the text (the overlap under "
             "input_output_knn_overlap).")
def corpus_dh_cmd(order: str, out: str | None, as_json: bool, assignments: tuple[str, ...],
                  **options: object) -> None:
    """Estimate the distributional hypothesis from counts alone, without training a model.

    \b
    Counts N(context, next token) with the context the previous --order tokens. A token's input
    profile is what follows it, p(y | u a); its output profile is how likely it is in each
    context, p(a | c). Both are weighted by PPMI (context smoothing 0.75), reduced by SVD and
    compared by cosine KNN match (overlap |N_in ∩ N_out| / k, Jaccard, chance level), overall,
    by frequency bucket, and (a corpus) pair by pair: the pairs close in one space and far in
    the other. For a grammar instead: the pairs found semantically (sem) and conditionally (cnd)
    equivalent from the counts, against the exact relations (precision, recall), the pairs in
    one and not the other (the DH-violating ones, furthest from the other first), and the
    estimated share of DH-violating pairs beside the exact one.

    \b
    Examples:
      dhwt corpus-dh --grammar four-cases --order full    # exact: one pair of each kind
      dhwt corpus-dh --grammar parity --set n_bits=3 --set classes.1.skew=0.4 --order full \\
          --samples 20000        # 20,000 strings drawn: the exact relations recovered
      dhwt corpus-dh --corpus ../shared/data --tokenizer char --out reports/wt2-char
      TIKTOKEN_CACHE_DIR=../shared/data/gpt2/tiktoken_cache \\
          dhwt corpus-dh --corpus ../shared/data --tokenizer gpt2 --json > gpt2-dh.json
    """
    from dhwt.analysis.corpus_dh_result import CorpusDhOptions
    from dhwt.checks import parse_count
    from dhwt.commands.corpus_dh import corpus_dh_command

    settings = CorpusDhOptions(order=parse_count("order", order, ("full",)),
                               assignments=assignments, **options)
    emit(corpus_dh_command(settings, as_json=as_json, out=out))
