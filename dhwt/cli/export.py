"""`dhwt export`: its options and help; what it does is dhwt.commands.export."""

from __future__ import annotations

import click

from dhwt import defaults
from dhwt.cli.group import cli
from dhwt.cli.options import emit, json_option


@cli.command("export", context_settings={"max_content_width": 100})
@click.argument("run_dir", metavar="RUN")
@click.option("--to", type=click.Choice(defaults.EXPORT_TARGETS), required=True,
              help="hf: a Hugging Face checkpoint that transformers loads as GPT2LMHeadModel.")
@click.option("--out", metavar="DIR", required=True, type=click.Path(file_okay=False),
              help="Write DIR/config.json, DIR/model.safetensors (and tokenizer.json, "
                   "tokenizer_config.json) and DIR/dhwt_export.json: a new or empty directory, "
                   "or an earlier export (replaced).")
@click.option("--member", type=int, default=0, show_default=True,
              help="Ensemble member to export (0-based, in seed order).")
@click.option("--step", default="last", show_default=True, metavar="N|last",
              help="The checkpoint step to export (one the run keeps).")
@json_option("Print the JSON document of what was written (member, seed, step, tied, files, "
             "notes) instead of the line.")
def export_cmd(run_dir: str, out: str, as_json: bool, **options: object) -> None:
    """Export a member of a run as a checkpoint that transformers loads.

    \b
    Written for the architectures GPT-2 computes exactly: a causal transformer with learned
    positions, pre-LN, a final LayerNorm, gelu (transformers' exact "gelu", not GPT-2's
    "gelu_new") or relu, no emb_scale, logit_scale or output bias; tied (tie_word_embeddings) or
    untied. Anything else is refused with the reasons. A synthetic language's symbols get a
    word-level tokenizer.json. For lm-evaluation-harness, generation and probing tools.

    \b
    Examples:
      dhwt export runs/gpt --to hf --out exports/gpt
      dhwt export runs/gpt --to hf --member 2 --step 5000 --out exports/gpt-s2
    """
    from dhwt.checks import parse_count
    from dhwt.commands.export import ExportOptions, export_command

    options["step"] = parse_count("step", options["step"], ("last",))
    emit(export_command(run_dir, out, ExportOptions(**options), as_json))
