"""`dhwt diagnose`: its options and help; what it does is dhwt.commands.diagnose."""

from __future__ import annotations

import click

from dhwt import defaults
from dhwt.cli.group import cli
from dhwt.cli.options import (device_option, emit, json_option, k_option, metric_option,
                              seed_option)


@cli.command("diagnose", context_settings={"max_content_width": 100})
@click.argument("path", metavar="PATH")
@k_option("Neighbours per token (self excluded).")
@metric_option("Raw inner product (what the logits use), cosine, or Euclidean distance.")
@click.option("--queries", default="auto", show_default=True, metavar="auto|all|N",
              help="Tokens whose neighbours are searched: all (exact), or N seeded query "
                   "tokens, each exact against all rows, with a 95% interval on the mean; auto: "
                   "all up to 65,536 tokens, else 4,096.")
@click.option("--chance-queries", type=int, default=defaults.CHANCE_QUERIES, show_default=True,
              help="Query tokens of the chance level's estimate (norm-matched random "
                   "stand-ins); 0 skips it.")
@seed_option("Seed of the sampled queries and of the chance stand-ins.")
@click.option("--step", default="last", show_default=True, metavar="N|last",
              help="Run directories: the snapshot step to read.")
@click.option("--counts", metavar="FILE", type=click.Path(dir_okay=False),
              help="One count per token id (text or .npy): agreement by frequency bucket. Run "
                   "directories use their token_counts.npy when present.")
@click.option("--corpus", metavar="FILE", type=click.Path(dir_okay=False),
              help="Checkpoints: a UTF-8 text file to count tokens in with the checkpoint's "
                   "tokenizer.json, for frequency buckets.")
@click.option("--top", type=int, default=defaults.TOP, show_default=True,
              help="Tokens in each per-token table (most and least agreement).")
@device_option("Where the neighbour search runs (a GPU searches every query against all rows "
               "there; the re-rank stays float64 on the CPU).")
@click.option("--out", metavar="DIR", type=click.Path(file_okay=False),
              help="Write DIR/report.md (and .html), DIR/diagnose.json, "
                   "DIR/figures/diagnose.png: a new "
                   "or empty directory, or the report of an earlier diagnose (replaced).")
@json_option("Print the JSON document instead of the summary (the overlap under "
             "input_output_knn_overlap).")
def diagnose_cmd(path: str, out: str | None, as_json: bool, **options: object) -> None:
    """The DH diagnostic of a dhwt run directory or a pretrained checkpoint.

    \b
    PATH: a dhwt run directory (each member at the chosen snapshot, with its tie history: the
    reading is withheld right after an untie, while both matrices are still one copy), or a
    Hugging Face checkpoint folder (config.json and model.safetensors, or shards with
    model.safetensors.index.json; tokenizer.json for token strings), read offline without
    transformers. Layouts: GPT-2, GPT-NeoX / Pythia, Llama / Mistral / Qwen2 / Gemma / OLMo /
    Phi-3, OPT, original OLMo and Phi. A tied model is recognised and said to be tied. Or a
    Hugging Face Hub id ORG/NAME[@REVISION] (pip install 'dhwt[hub]'): the Hugging Face cache
    first (HF_HOME, HF_HUB_CACHE; HF_HUB_OFFLINE=1: nothing else), else only config.json, the
    tokenizer and the embeddings are fetched (HF_TOKEN for gated models), a large weights file
    by byte ranges. A path that exists, or whose first part is a folder here, is the path.

    \b
    Reported: the input-vs-output KNN match (overlap |N_in ∩ N_out| / k) with the norm-matched
    chance level, linear CKA and the Procrustes error, the tokens whose neighbourhoods agree
    least and most (decoded), and agreement by token frequency when counts are known.
    50,257 x 768 exact: about the time of one `dhwt knn` of the two matrices.

    \b
    Examples:
      dhwt diagnose runs/untied                             # a run, newest snapshot
      dhwt diagnose runs/u150 --step 1000 --out reports/u150-dh
      dhwt diagnose ~/models/pythia-160m --corpus wiki.train.raw --out reports/pythia
      dhwt diagnose ~/models/llama-3-8b --queries 4096 --json > llama-dh.json
      dhwt diagnose EleutherAI/pythia-160m@step1000          # a Hub id at a revision
    """
    from dhwt.checks import parse_count
    from dhwt.commands.diagnose import DiagnoseOptions, diagnose_command

    options["queries"] = parse_count("queries", options["queries"], ("auto", "all"))
    options["step"] = parse_count("step", options["step"], ("last",))
    emit(diagnose_command(path, DiagnoseOptions(**options), out, as_json))
