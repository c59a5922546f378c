"""`dhwt knn`: its options and help; what it does is dhwt.commands.knn."""

from __future__ import annotations

import click

from dhwt import defaults
from dhwt.cli.group import cli
from dhwt.cli.options import (device_option, emit, json_option, k_option, metric_option,
                              seed_option)


@cli.command("knn", context_settings={"max_content_width": 100})
@click.argument("a_spec", metavar="A")
@click.argument("b_spec", metavar="B")
@k_option("Neighbours per token (self excluded); below the number of tokens.")
@metric_option("Raw inner product (the reference study's), cosine, or Euclidean distance.")
@click.option("--score", type=click.Choice(defaults.KNN_SCORES), default="both",
              show_default=True, help="Jaccard |A∩B|/|A∪B|, overlap |A∩B|/k, or both.")
@click.option("--tokens", "tokens_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="Token ids to keep (text of whole numbers, or .npy), e.g. tokens seen in "
                   "training: neighbours are searched among them only and averaged over them.")
@click.option("--weights", "weights_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="One non-negative weight per token (text or .npy), e.g. training "
                   "frequencies: a weighted average instead of the plain mean.")
@click.option("--side-a", default="input", show_default=True, metavar="input|output|NAME",
              help="Matrix of A: a snapshot's input or output embeddings, or a tensor name in "
                   "a .safetensors/.pt file.")
@click.option("--side-b", default="input", show_default=True, metavar="input|output|NAME",
              help="Matrix of B, as --side-a (input vs output of one run: the DH diagnostic).")
@click.option("--member-a", type=int, default=0, show_default=True,
              help="Ensemble member of A (0-based, in seed order) when it holds several (S, V, d).")
@click.option("--member-b", type=int, default=0, show_default=True,
              help="Ensemble member of B (0-based, in seed order) when it holds several (S, V, d).")
@click.option("--baseline/--no-baseline", default=True, show_default=True,
              help="Also compute the chance level: the same measure on norm-matched random "
                   "directions (doubles the time).")
@seed_option("Seed of the random directions of the chance baseline.")
@click.option("--per-token", metavar="FILE.csv", type=click.Path(dir_okay=False),
              help="Also write token,intersection,jaccard,overlap,weight per token: a new file, "
                   "or one dhwt knn wrote (replaced).")
@device_option("Where the neighbour search runs (a GPU searches every row against all rows there; "
               "the re-rank stays float64 on the CPU; the result is the same).")
@json_option("Print the JSON document instead of the text (the means under mean_jaccard and "
             "mean_overlap, the chance level's under chance).")
def knn_cmd(a_spec: str, b_spec: str, as_json: bool, **options: object) -> None:
    """KNN Match Similarity of two embedding matrices A and B (same tokens).

    \b
    A and B: FILE.npy, FILE.safetensors, FILE.pt/.pth, or RUN_DIR@STEP / RUN_DIR@last (a dhwt
    run's snapshot). For each token, its k nearest neighbours (exact, self excluded) in A and
    in B are compared; the mean Jaccard and overlap are printed with the chance level of
    norm-matched random directions (shared row norms alone give several percent under ip).
    Two 50257 x 512 spaces, k=10: 7.3 s on a 2-core Intel Xeon with AMX, 0.43x the time of two
    exact faiss searches there, 1.0 GB peak memory (experiments/benchmarks/LOG.md).
    The candidate pass runs in bfloat16 (float32 sums, or sums rounded to bfloat16) where a
    probe finds that faster and exact-summing, else float32;
    DHWT_KNN_PRECISION=float32|bfloat16|bfloat16-output forces one. Either way the neighbours
    are re-ranked and certified in float64: the result does not depend on it.

    \b
    Examples:
      dhwt knn runs/seed1@16000 runs/seed2@16000
      dhwt knn runs/u@last runs/u@last --side-a input --side-b output   # DH diagnostic
      dhwt knn a.npy b.safetensors --metric cos --tokens seen.txt --per-token knn.csv
    """
    from dhwt.commands.knn import KnnOptions, knn_command

    emit(knn_command(a_spec, b_spec, KnnOptions(**options), as_json))
