"""`dhwt analyze`: its options and help; what it does is dhwt.commands.analyze."""

from __future__ import annotations

import click

from dhwt import defaults
from dhwt.cli.group import cli
from dhwt.cli.options import emit, json_option, k_option, metric_option, seed_option


@cli.command("analyze", context_settings={"max_content_width": 100})
@click.argument("run_dirs", nargs=-1, required=True, metavar="RUN_DIR...",
                type=click.Path(file_okay=False))
@click.option("--out", required=True, metavar="DIR", type=click.Path(file_okay=False),
              help="Where report.md, report.html (the same, one page with its figures), "
                   "figures/, similarity.csv/.json and analyze.json go: a new or empty "
                   "directory, or an earlier analyze report (replaced whole).")
@click.option("--pairs", metavar="A:B,C:D",
              help="Symbol pairs to track (synthetic runs; default: every pair of variants of "
                   "one class).")
@click.option("--measure", type=click.Choice(defaults.CLOSENESS_MEASURES),
              default="normalised", show_default=True,
              help="What the main closeness figure shows (synthetic runs).")
@click.option("--similarity", "measures", default="knn", show_default=True,
              metavar="knn,cka,procrustes,mutual-knn|none",
              help="Similarity of embedding spaces at every snapshot, comma separated: knn (KNN "
                   "match with its chance level, and the DH diagnostic of untied members), cka "
                   "(linear CKA), procrustes (relative error after orthogonal alignment), "
                   "mutual-knn (cosine overlap); none to skip.")
@k_option("Neighbours per token for KNN match (self excluded). Skipped when the vocabulary is not "
          "larger than k.")
@metric_option("KNN neighbours by raw inner product (the reference study's), cosine or Euclidean "
               "distance.")
@click.option("--members", default="all", show_default=True, metavar="all|0,1,...",
              help="Members of each run to compare (0-based, in seed order); every two chosen "
                   "members are a pair, across runs too.")
@click.option("--tokens", type=click.Choice(defaults.TOKEN_CHOICES), default="all",
              show_default=True,
              help="Compare all tokens, or only those seen in training (count > 0; neighbours "
                   "are then searched among them only).")
@click.option("--counts", metavar="FILE", type=click.Path(dir_okay=False),
              help="Training count per token id (text or .npy) for --tokens seen / --weighted "
                   "(default: RUN_DIR/token_counts.npy, written by the trainer for text).")
@click.option("--weighted", is_flag=True,
              help="Average KNN match over tokens weighted by their training counts.")
@click.option("--chance/--no-chance", default=True, show_default=True,
              help="KNN chance level: the same measure on norm-matched random directions "
                   "(doubles the time).")
@seed_option("Seed of the chance level's random directions.")
@click.option("--score", type=click.Choice(defaults.CURVE_SCORES), default="overlap",
              show_default=True,
              help="KNN score the figures plot: |A∩B|/k (the reference code's) or Jaccard "
                   "|A∩B|/|A∪B| (its text's); the tables and files hold both.")
@json_option("Also print the numbers as one JSON document (the final fit and closeness of "
             "synthetic runs, the similarity curves); the report line goes to stderr.")
def analyze_cmd(run_dirs: tuple[str, ...], out: str, pairs: str | None, measure: str,
                as_json: bool, **similarity: object) -> None:
    """Report on run directories: closeness or loss, and embedding similarity over training.

    Reads each run's snapshots and metrics (never a live model). Synthetic runs: the paper's figure
    layout (the tied matrix, or input and output, one curve per pair with a 95% band over seeds),
    loss and accuracy against the Bayes optimum, final values with each pair's exact relation. Text
    runs: loss, accuracy and perplexity (valid; test at the last step). Both: with two or more
    members (or runs), KNN match between them at every snapshot for the input and the output
    matrices beside its chance level; for each untied member the DH diagnostic (its own input vs
    output neighbourhoods) with a one-line reading on tying. Each matrix and its chance stand-in is
    searched once per snapshot (8192 tokens x 128: about 0.6 s each on 2 cores). Runs are labelled
    by their names, or by the shortest endings of their paths that tell them apart (STUDY_A/runs/tied,
    STUDY_B/runs/tied).

    \b
    Examples:
      dhwt analyze runs/tied runs/untied --pairs 0a:0b,1a:1b --out reports/exor
      dhwt analyze runs/wt2-cpu --tokens seen --similarity knn,cka --out reports/wt2
      dhwt analyze runs/seed1 runs/seed2 --members 0 --k 20 --out reports/init
    """
    from dhwt.analysis.runs_similarity import SimilarityOptions
    from dhwt.commands.analyze import analyze_command

    emit(analyze_command(run_dirs, out, pairs, measure, SimilarityOptions(**similarity), as_json))
