"""`dhwt train`: its options and help; what it does is dhwt.commands.train."""

from __future__ import annotations

import click

from dhwt import defaults
from dhwt.cli.group import cli
from dhwt.cli.options import device_option, json_option


class _BatchSize(click.ParamType):
    """`full` or a positive integer."""

    name = "full|N"

    def convert(self, value, param, ctx):  # noqa: ANN001, ANN201 (click's signature)
        if isinstance(value, int) or value == "full":
            return value
        if str(value).isdigit():
            return int(value)
        self.fail(f"{value!r} is neither 'full' nor a whole number", param, ctx)


@cli.command("train", context_settings={"max_content_width": 100})
@click.option("--grammar", metavar="NAME|PATH",
              help="A built-in grammar (e.g. parity) or a grammar TOML; the dataset is built into "
                   "RUN_DIR/data.")
@click.option("--set", "set", multiple=True, metavar="KEY=VALUE",
              help="Override a key of --grammar's spec, as `dhwt synth --set`; repeatable.")
@click.option("--data", metavar="DIR",
              help="A dataset directory written by `dhwt synth`; with --corpus wikitext-2: the "
                   "WikiText-2 folder or archive (else WIKITEXT2_PATH, DHWT_DATA, HF datasets).")
@click.option("--corpus", metavar="wikitext-2|DIR",
              help="Natural text for causal or masked LM (--objective): WikiText-2, or a folder "
                   "with train.txt, valid.txt, test.txt. Needs --tokenizer and --seq-len.")
@click.option("--tokenizer", metavar="gpt2|bpe:N|word|char",
              help="Tokenizer of --corpus: GPT-2 BPE (tiktoken; TIKTOKEN_CACHE_DIR offline), a "
                   "byte-level BPE of N tokens trained on the train split, words, or "
                   "characters.")
@click.option("--seq-len", type=int, metavar="N",
              help="Context of --corpus runs: training windows of N tokens start anywhere; "
                   "valid/test are cut into consecutive windows of N (each token predicted once).")
@click.option("--eval-windows", type=int, metavar="N",
              help="Evaluate at most N windows of each split of --corpus (smoke tests).  "
                   "[default: all: perplexity over the whole valid and test splits]")
@click.option("--objective", type=click.Choice(defaults.OBJECTIVES),
              help="Masked (bidirectional) or causal language modelling.  [default: mlm]")
@click.option("--architecture", type=click.Choice(defaults.ARCHITECTURES),
              help="The paper's EXor models: transformer; lstm (2 layers, hidden 8, bidirectional "
                   "for mlm, projected back to d_model); mixer (MLP-Mixer, 1 layer, token mixing "
                   "4, channel mixing 8, relu, pre-LN; mlm only). Sizes go in --config.  "
                   "[default: transformer]")
@click.option("--tie-schedule", metavar="SCHEDULE",
              help="tied | untied | untie@N | tie@N[:in|:out|:mean] | switches joined by commas, "
                   "e.g. untie@2000,tie@8000:mean. A switch at step N acts after N updates.  "
                   "[default: tied]")
@click.option("--tie-penalty", type=float, metavar="LAMBDA",
              help="Soft tying while untied: add LAMBDA * ||E_in - E_out||^2 per member.  "
                   "[default: 0]")
@click.option("--seeds", metavar="SEEDS",
              help="Seeds trained together as one ensemble: 42-46, 1,2,5 or 1-3,7 (at most "
                   "100,000). Member i equals a solo run of seed i.  [default: 42]")
@click.option("--steps", type=int, help="Optimizer updates.  [default: 10000]")
@click.option("--batch-size", type=_BatchSize(), metavar="full|N",
              help="Strings per member per step (with --corpus: windows of --seq-len tokens), or "
                   "'full' (every training string once, weighted by probability; grammars "
                   "only).  [default: full]")
@click.option("--lr", type=float,
              help="Peak learning rate of the optimizer (AdamW, or SGD with optimizer = "
                   "\"sgd\" in --config).  [default: 5e-4]")
@click.option("--lr-schedule", type=click.Choice(defaults.LR_SCHEDULES),
              help="periodic-cosine is the paper's CosineAnnealingLR (T_max lr_period, stepped "
                   "every step); cosine decays once over the run.  [default: periodic-cosine]")
@click.option("--eval-every", type=int, metavar="N",
              help="Evaluate every N steps, at step 0 and at the last step (the test split: at "
                   "the last step only).  [default: 100]")
@click.option("--snapshot-every", type=int, metavar="N",
              help="Save input/output embeddings every N steps, at step 0 and at the last step.  "
                   "[default: 100]")
@click.option("--checkpoint-every", type=int, metavar="N",
              help="Checkpoint every N steps (the last 2 are kept).  [default: 1000]")
@click.option("--threads", type=int, metavar="N",
              help="torch CPU threads, 1 to 1024; 1 is fastest for tiny models, raise it for "
                   "large ones.  [default: 1]")
@device_option("Where to train: cpu (bit-exact resume), cuda (cuda:0; under torchrun each process "
               "takes cuda:LOCAL_RANK and nccl), cuda:N (one process), auto (cuda if a GPU is "
               "seen, else cpu). --resume may change it.  [default: cpu]", default=None)
@click.option("--precision", type=click.Choice(defaults.PRECISIONS),
              help="fp32, or bf16-mixed: matrix products in bfloat16 (autocast), weights, "
                   "optimizer, LayerNorm, softmax and loss in float32; pays on GPUs and CPUs "
                   "with AMX or AVX512-BF16. tf32 = true (GPU) and compile = true go in "
                   "--config.  [default: fp32]")
@click.option("--tensorboard/--no-tensorboard", default=None,
              help="Also log metrics.jsonl's numbers (loss, accuracy, perplexity per split; lr, "
                   "tied, gap) as TensorBoard scalars in RUN_DIR/tensorboard, a folder per seed "
                   "(needs pip install 'dhwt[tensorboard]'). --resume may change it.  "
                   "[default: off]")
@click.option("--config", "config_file", metavar="FILE.toml",
              type=click.Path(dir_okay=False),
              help="A TOML of TrainConfig keys (flat, or one table per section as in a run's "
                   "config.toml); flags override it. Its paths (grammar, data, corpus, init_from) "
                   "are taken from the working directory, as flags are; a built-in grammar name "
                   "stays the built-in.")
@click.option("--out", required=True, metavar="RUN_DIR", type=click.Path(file_okay=False),
              help="The run directory to create (or continue with --resume).")
@click.option("--overwrite", is_flag=True,
              help="Replace RUN_DIR if it is a run dhwt made that holds none of this "
                   "command's inputs and nothing dhwt did not write.")
@click.option("--resume", is_flag=True,
              help="Continue RUN_DIR from its newest checkpoint, bit for bit.")
@json_option("Print what was trained as a JSON document (run directory, steps, the last "
             "evaluation of each member and split) instead of the line.")
def train_cmd(config_file: str | None, out: str, overwrite: bool, resume: bool, as_json: bool,
              **options: object) -> None:
    """Train one model per seed (all seeds at once) and write a run directory.

    \b
    RUN_DIR gets: config.toml (resolved config, written first), metrics.jsonl (per evaluation,
    member and split: loss, accuracy, lr, tied, gap), embeddings/step_XXXXXXX.safetensors
    (input and output matrices, (S, V, d)), checkpoints/, figures/training.png, report.md
    (report.html: the same page with its figure, for a browser), sessions.json (when each
    training session ran, and from which commit), and for a corpus
    token_counts.npy (training count per token id, for `dhwt analyze --tokens seen`), and with
    planted twins (twins = N or a list in --config) twins.json (the pairs and their relations).
    Defaults are the paper's EXor setting: 1 layer, 1 head, d_model 4, d_ff 4, gelu, post-LN,
    no positions, N(0,1) embeddings, full batch, AdamW lr 5e-4 (betas 0.9/0.999, eps 1e-12,
    weight decay 0.1), periodic cosine (T_max 10000, eta_min 1e-5). Every other setting (model
    size, warmup, clipping, splits, vary / init_from / redraw / freeze for init studies,
    optimizer = "population" for a fit to a synthetic language's exact objective with a
    certificate per member...) goes in --config; see a run's config.toml for the keys,
    experiments/wikitext/ and docs/how-to/population-fit.md for examples.

    \b
    Examples:
      dhwt train --grammar parity --tie-schedule untie@5000 --steps 10000 --out runs/u5k
      dhwt train --data data/parity --architecture mixer --steps 150000 --out runs/mixer
      dhwt train --config runs/u5k/config.toml --tie-schedule untied --out runs/untied
      dhwt train --corpus my_text/ --tokenizer word --seq-len 32 --objective clm \\
          --batch-size 16 --out runs/text
      DHWT_DATA=../shared/data dhwt train --config experiments/wikitext/cpu.toml --out runs/wt2-cpu
      dhwt train --out runs/u5k --resume

    A killed or interrupted run continues with `--out RUN_DIR --resume` and ends exactly as an
    uninterrupted one would (on the CPU); flags given with --resume may repeat the run's values,
    not change them, except --device and --tensorboard (where it runs and logs), and --steps M
    beyond the run's steps, which extends a run (finished or not) to M steps. Over an extension
    the constant and periodic-cosine lr schedules go on as in a run of M steps from the start;
    cosine (one decay over the run) is recomputed for M steps, so its lr rises again at the
    resume step. A finished run resumed without a larger --steps is left untouched.

    --overwrite replaces only a run directory that dhwt made (it holds a .dhwt marker) and that
    holds none of the command's inputs; never the working directory or an ancestor of it. While
    a run is written its directory is locked: a second `dhwt train` on it (fresh or --resume) is
    refused.
    """
    from dhwt.commands.train import train_command
    from dhwt.report.train_summary import trained

    given = {k: v for k, v in options.items() if v is not None and v != ()}
    result = train_command(given, config_file=config_file, out=out, overwrite=overwrite,
                           resume=resume)
    if result is not None:  # None on the processes of a torchrun launch that do not write
        click.echo(trained(result, resume, as_json))
