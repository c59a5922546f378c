"""The `dhwt` command line: a thin face over the package. It parses, calls, and prints; no logic.

Every error a user can cause surfaces as one line `error: <message>` on stderr with exit code 2
(`--debug` shows the traceback instead).
"""

from __future__ import annotations

import sys
from collections import Counter

import click

from dhwt.errors import LINE, DhwtError, Interrupted, shorten


class _OnceEach:
    """Refuses a single-valued option given more than once (click would keep the last silently:
    `--seeds 1 --seeds 2` would train seed 2 alone). Options that take several values (multiple,
    count) may repeat; eager ones (--help, --version) act before anything else."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        _, _, order = self.make_parser(ctx).parse_args(args=list(args))  # a dry run: the order
        counts = Counter(p for p in order if isinstance(p, click.Option) and not p.multiple
                         and not p.count and not p.is_eager)
        for option, n in counts.items():
            if n > 1:
                names = " / ".join(f"'{name}'" for name in option.opts + option.secondary_opts)
                raise click.UsageError(f"Option {names} given {n} times; it holds one value: "
                                       "give it once", ctx)
        return super().parse_args(ctx, args)


class _Command(_OnceEach, click.Command):
    """A dhwt command (see _OnceEach)."""


class _Group(_OnceEach, click.Group):
    """The dhwt group; its commands are _Command. Ctrl-C reaches main() as click's Abort
    without the blank line click would print first (main ends the terminal's "^C" line)."""

    command_class = _Command

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise click.exceptions.Abort() from exc


@click.group(cls=_Group,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="dhwt")
@click.option("--debug", is_flag=True,
              help="Show full tracebacks instead of one-line errors (also after the command).")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """dhwt: token embeddings, tying, and the distributional hypothesis.

    \b
    Typical flow:
      dhwt synth --grammar parity                         # a language and its exact truth
      dhwt train --grammar parity --tie-schedule untie@5000 --steps 10000 --out runs/u5k
      dhwt analyze runs/u5k --out reports/u5k              # pair closeness over training
      dhwt study experiments/exor_small.toml --out runs/exor-small   # all of it, from one TOML
      dhwt verify-theorems                                # the theorems of proofs/, checked

    Every command explains itself: dhwt COMMAND --help.
    """
    ctx.obj = {"debug": debug}


@cli.command("synth", context_settings={"max_content_width": 100})
@click.option("--grammar", "-g", required=True, metavar="NAME|PATH",
              help="A built-in grammar (parity, parity-dh, parity-nocnd, four-cases) or the path "
                   "of a grammar TOML (format: synthetic/README.md).")
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE",
              help="Override a spec key before validation; repeatable. KEY is dotted into the "
                   "TOML, VALUE is a TOML value: n_bits=5, classes.1.skew=0.8, "
                   "'classes.0.p=[0.2, 0.8]', states.s.0.p=0.3.")
@click.option("--out", metavar="DIR", type=click.Path(),
              help="Write the dataset here (spec.toml, vocab.json, strings.npz, truth.json). "
                   "Omitted: print the summary only, write nothing.")
@click.option("--valid-fraction", type=float, default=0.1, show_default=True,
              help="Share of class strings held out for validation (at least one if > 0).")
@click.option("--test-fraction", type=float, default=0.1, show_default=True,
              help="Share of class strings held out for testing (at least one if > 0).")
@click.option("--seed", type=int, default=14, show_default=True,
              help="Seed of the shuffle that assigns class strings to splits.")
@click.option("--overwrite", is_flag=True,
              help="Replace --out if it is a dataset dhwt made (never a folder of yours, the "
                   "working directory or one holding the grammar).")
def synth_cmd(grammar: str, assignments: tuple[str, ...], out: str | None,
              valid_fraction: float, test_fraction: float, seed: int, overwrite: bool) -> None:
    """Build a synthetic language with its exact ground truth, and print a summary.

    \b
    The summary gives the vocabulary, the symbol classes, and for both objectives (masked and
    causal LM) which symbol pairs are semantically / conditionally equivalent, where the
    distributional hypothesis (DH) holds, symbols never predicted, and the Bayes-optimal
    accuracy and cross-entropy (EXor default: accuracy 0.70). Splits are by class string;
    variants are drawn afresh each time a string is served.

    \b
    Examples:
      dhwt synth --grammar parity                         # the paper's EXor: summary only
      dhwt synth --grammar parity --out data/parity
      dhwt synth --grammar parity --set strings=paper     # the authors' 127 strings, 114/12/1
      dhwt synth --grammar parity --set n_bits=5 --set classes.1.skew=0.8 --out data/p5
      dhwt synth --grammar my_grammar.toml --out data/mine --overwrite
    """
    from dhwt.languages.synth import synth

    click.echo(synth(grammar, assignments, out, valid_fraction=valid_fraction,
                     test_fraction=test_fraction, seed=seed, overwrite=overwrite))


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
@click.option("--objective", type=click.Choice(["mlm", "clm"]),
              help="Masked (bidirectional) or causal language modelling.  [default: mlm]")
@click.option("--architecture", type=click.Choice(["transformer", "lstm", "mixer"]),
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
@click.option("--lr-schedule", type=click.Choice(["constant", "cosine", "periodic-cosine"]),
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
@click.option("--device", metavar="cpu|cuda|cuda:N|auto",
              help="Where to train: cpu (bit-exact resume), cuda (cuda:0; under torchrun each "
                   "process takes cuda:LOCAL_RANK and nccl), cuda:N (one process), auto (cuda if "
                   "a GPU is seen, else cpu). --resume may change it.  [default: cpu]")
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
              help="Replace RUN_DIR if it is a run dhwt made and holds none of this command's "
                   "inputs.")
@click.option("--resume", is_flag=True,
              help="Continue RUN_DIR from its newest checkpoint, bit for bit.")
def train_cmd(config_file: str | None, out: str, overwrite: bool, resume: bool,
              **options: object) -> None:
    """Train one model per seed (all seeds at once) and write a run directory.

    \b
    RUN_DIR gets: config.toml (resolved config, written first), metrics.jsonl (per evaluation,
    member and split: loss, accuracy, lr, tied, gap), embeddings/step_XXXXXXX.safetensors
    (input and output matrices, (S, V, d)), checkpoints/, figures/training.png, report.md
    (report.html: the same page with its figure, for a browser), and for a corpus
    token_counts.npy (training count per token id, for `dhwt analyze --tokens seen`), and with
    planted twins (twins = N or a list in --config) twins.json (the pairs and their relations).
    Defaults are the paper's EXor setting: 1 layer, 1 head, d_model 4, d_ff 4, gelu, post-LN,
    no positions, N(0,1) embeddings, full batch, AdamW lr 5e-4 (betas 0.9/0.999, eps 1e-12,
    weight decay 0.1), periodic cosine (T_max 10000, eta_min 1e-5). Every other setting (model
    size, warmup, clipping, splits, vary / init_from / redraw / freeze for init studies...) goes
    in --config; see a run's config.toml for the keys and experiments/wikitext/ for examples.

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

    given = {k: v for k, v in options.items() if v is not None and v != ()}
    result = train_command(given, config_file=config_file, out=out, overwrite=overwrite,
                           resume=resume)
    if result is not None:  # None on the processes of a torchrun launch that do not write
        click.echo(_trained(result, resume))


def _trained(result, resume: bool) -> str:  # noqa: ANN001 (a RunResult, imported lazily)
    """What `dhwt train` did, in one line, after a line per repair a resume made."""
    where = f"run directory: {result.run_dir} (see report.md)"
    if not resume:
        return f"trained {result.step} steps in {result.seconds:.1f} s; {where}"
    if not result.touched:
        return (f"{result.run_dir} is already trained to step {result.step}; nothing to do (to "
                f"train on, --resume --steps M with M > {result.step})")
    notes = "".join(f"{note}\n" for note in result.notes)
    if result.start == result.step:
        return f"{notes}training had reached step {result.step}; wrote its report; {where}"
    return (f"{notes}resumed at step {result.start} and trained to step {result.step} "
            f"({result.step - result.start} steps) in {result.seconds:.1f} s; {where}")


@cli.command("verify-theorems", context_settings={"max_content_width": 100})
@click.option("--full", is_flag=True,
              help="Also run the long empirical checks (models trained with dhwt.training on "
                   "EXor; minutes, not seconds).")
@click.option("--only", metavar="T1,T2,...",
              help="Run only these theorems (comma-separated, of T1 T2 T3 T4 T5).  [default: all]")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of every random instance and training run (each check derives its own "
                   "generator from it and its name).")
def verify_theorems_cmd(full: bool, only: str | None, seed: int) -> int:
    """Check the theorems of proofs/ symbolically, numerically and against trained models.

    \b
    Prints one line per check: theorem, kind (symbolic | numeric | empirical), check,
    prediction, measured value, PASS/FAIL. Exit code 0 when nothing failed, 1 when a check
    failed, 2 for bad options. Default mode takes well under a minute on 2 CPU cores.

    \b
    Examples:
      dhwt verify-theorems
      dhwt verify-theorems --only T1,T4 --seed 3
      dhwt verify-theorems --full
    """
    from dhwt.commands import train
    from dhwt.theory.runner import verify_theorems

    return verify_theorems(only=only, full=full, seed=seed, echo=click.echo, train=train)


@cli.command("study", context_settings={"max_content_width": 100})
@click.argument("study_file", metavar="STUDY.toml", type=click.Path(dir_okay=False))
@click.option("--out", required=True, metavar="DIR", type=click.Path(file_okay=False),
              help="Study directory: study.toml, data/ (grammar studies), runs/NAME/, "
                   "analysis/NAME/ (text studies), figures/, report.md and report.html "
                   "(the same report as one self-contained page).")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing study directory instead of continuing it (only a study "
                   "dhwt made that holds none of the study's inputs).")
def study_cmd(study_file: str, out: str, overwrite: bool) -> None:
    """Run a whole study: build the dataset, train every run, analyse, report.

    \b
    STUDY.toml (examples in experiments/, format in the docstring of dhwt/commands/study.py):
      [study]     name, description (for the report), group (default true)
      [data]      a grammar (built-in name or path), or a corpus with tokenizer and seq_len
      [train]     settings shared by every run (the keys of a run's config.toml)
      [[runs]]    a name and what differs, e.g. tie_schedule = "untie@5000"
      [analysis]  pairs, measure (grammar studies only)

    A grammar study's report compares pair closeness in the input and output matrices with the
    pairs' exact relations, and accuracy with the Bayes optimum. A text study's report gives
    loss and valid / test perplexity, and analysis/NAME/ per run KNN match between its members
    over training and the DH diagnostic. A run may start from another: init_from = "NAME" (an
    earlier run of the study) or a path with a / (a relative one is taken from DIR, so
    "../other/runs/NAME" is a run of a study written beside this one).

    Runs that differ only in tie_schedule and seeds train as one ensemble (the EXor grid of
    tied and untied x 5 seeds: one batched computation of 10 members), each run directory the
    same, to float tolerance, as the run trained alone. group = false in [study] trains them one
    after another (for models whose combined ensemble would not fit in memory).

    Killed half-way? Run the same command again: finished runs are kept, interrupted ones resume
    from their last checkpoint. Added a [[runs]] table to the file? The same command trains only
    the new run (changing [data], [train] or an existing run needs --overwrite).

    \b
    Examples:
      dhwt study experiments/exor_small.toml --out runs/exor-small
      DHWT_DATA=../shared/data dhwt study experiments/wikitext/butterfly.toml \\
          --out runs/wt2-butterfly
    """
    from dhwt.commands.study import load_study, run_study

    report = run_study(load_study(study_file), out, overwrite=overwrite)
    click.echo(f"study report: {report}")


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
@click.option("--measure", type=click.Choice(["normalised", "raw", "cosine"]), default="normalised",
              show_default=True, help="What the main closeness figure shows (synthetic runs).")
@click.option("--similarity", "measures", default="knn", show_default=True,
              metavar="knn,cka,procrustes,mutual-knn|none",
              help="Similarity of embedding spaces at every snapshot, comma separated: knn (KNN "
                   "match with its chance level, and the DH diagnostic of untied members), cka "
                   "(linear CKA), procrustes (relative error after orthogonal alignment), "
                   "mutual-knn (cosine overlap); none to skip.")
@click.option("--k", type=int,
              help="Neighbours per token for KNN match (self excluded). Skipped when the "
                   "vocabulary is not larger than k.  [default: 10, capped at (tokens - 1) // 2 "
                   "for small vocabularies]")
@click.option("--metric", type=click.Choice(["ip", "cos", "l2"]), default="ip", show_default=True,
              help="KNN neighbours by raw inner product (the reference study's), cosine or "
                   "Euclidean distance.")
@click.option("--members", default="all", show_default=True, metavar="all|0,1,...",
              help="Members of each run to compare (0-based, in seed order); every two chosen "
                   "members are a pair, across runs too.")
@click.option("--tokens", type=click.Choice(["all", "seen"]), default="all", show_default=True,
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
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the chance level's random directions.")
@click.option("--score", type=click.Choice(["overlap", "jaccard"]), default="overlap",
              show_default=True,
              help="KNN score the figures plot: |A∩B|/k (the reference code's) or Jaccard "
                   "|A∩B|/|A∪B| (its text's); the tables and files hold both.")
def analyze_cmd(run_dirs: tuple[str, ...], out: str, pairs: str | None, measure: str,
                **similarity: object) -> None:
    """Report on run directories: closeness or loss, and embedding similarity over training.

    Reads each run's snapshots and metrics (never a live model). Synthetic runs: the paper's figure
    layout (the tied matrix, or input and output, one curve per pair with a 95% band over seeds),
    loss and accuracy against the Bayes optimum, final values with each pair's exact relation. Text
    runs: loss, accuracy and perplexity (valid; test at the last step). Both: with two or more
    members (or runs), KNN match between them at every snapshot for the input and the output
    matrices beside its chance level; for each untied member the DH diagnostic (its own input vs
    output neighbourhoods) with a one-line reading on tying. Each matrix and its chance stand-in is
    searched once per snapshot (8192 tokens x 128: about 0.6 s each on 2 cores).

    \b
    Examples:
      dhwt analyze runs/tied runs/untied --pairs 0a:0b,1a:1b --out reports/exor
      dhwt analyze runs/wt2-cpu --tokens seen --similarity knn,cka --out reports/wt2
      dhwt analyze runs/seed1 runs/seed2 --members 0 --k 20 --out reports/init
    """
    from dhwt.commands.analyze import analyze
    from dhwt.report.run_similarity import SimilarityOptions

    options = SimilarityOptions(**similarity)
    click.echo(f"report: {analyze(run_dirs, out, pairs=pairs, measure=measure, similarity=options)}")


@cli.command("knn", context_settings={"max_content_width": 100})
@click.argument("a_spec", metavar="A")
@click.argument("b_spec", metavar="B")
@click.option("--k", type=int,
              help="Neighbours per token (self excluded); below the number of tokens.  "
                   "[default: 10, capped at (tokens - 1) // 2 for small vocabularies]")
@click.option("--metric", type=click.Choice(["ip", "cos", "l2"]), default="ip",
              show_default=True,
              help="Raw inner product (the reference study's), cosine, or Euclidean distance.")
@click.option("--score", type=click.Choice(["both", "jaccard", "overlap"]), default="both",
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
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the random directions of the chance baseline.")
@click.option("--per-token", metavar="FILE.csv", type=click.Path(dir_okay=False),
              help="Also write token,intersection,jaccard,overlap,weight per token.")
@click.option("--device", default="cpu", show_default=True, metavar="cpu|cuda|cuda:N|auto",
              help="Where the neighbour search runs (a GPU searches every row against all rows "
                   "there; the re-rank stays float64 on the CPU; the result is the same).")
def knn_cmd(a_spec: str, b_spec: str, **options: object) -> None:
    """KNN Match Similarity of two embedding matrices A and B (same tokens).

    \b
    A and B: FILE.npy, FILE.safetensors, FILE.pt/.pth, or RUN_DIR@STEP / RUN_DIR@last (a dhwt
    run's snapshot). For each token, its k nearest neighbours (exact, self excluded) in A and
    in B are compared; the mean Jaccard and overlap are printed with the chance level of
    norm-matched random directions (shared row norms alone give several percent under ip).
    Two 50257 x 512 spaces, k=10: 7.3 s on a 2-core Intel Xeon with AMX, 0.43x the time of two
    exact faiss searches there, 1.0 GB peak memory (experiments/wikitext/README.md).
    The candidate pass runs in bfloat16 where a probe finds that faster and exact-summing,
    else float32; DHWT_KNN_PRECISION=float32|bfloat16 forces one. Either way the neighbours
    are re-ranked and certified in float64: the result does not depend on it.

    \b
    Examples:
      dhwt knn runs/seed1@16000 runs/seed2@16000
      dhwt knn runs/u@last runs/u@last --side-a input --side-b output   # DH diagnostic
      dhwt knn a.npy b.safetensors --metric cos --tokens seen.txt --per-token knn.csv
    """
    from dhwt.commands.knn import KnnOptions, knn_command

    click.echo(knn_command(a_spec, b_spec, KnnOptions(**options)))


@cli.command("diagnose", context_settings={"max_content_width": 100})
@click.argument("path", metavar="PATH")
@click.option("--k", type=int,
              help="Neighbours per token (self excluded).  [default: 10, capped at (tokens - 1) "
                   "// 2 for small vocabularies]")
@click.option("--metric", type=click.Choice(["ip", "cos", "l2"]), default="ip",
              show_default=True,
              help="Raw inner product (what the logits use), cosine, or Euclidean distance.")
@click.option("--queries", default="auto", show_default=True, metavar="auto|all|N",
              help="Tokens whose neighbours are searched: all (exact), or N seeded query "
                   "tokens, each exact against all rows, with a 95% interval on the mean; auto: "
                   "all up to 65,536 tokens, else 4,096.")
@click.option("--chance-queries", type=int, default=512, show_default=True,
              help="Query tokens of the chance level's estimate (norm-matched random "
                   "stand-ins); 0 skips it.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the sampled queries and of the chance stand-ins.")
@click.option("--step", default="last", show_default=True, metavar="N|last",
              help="Run directories: the snapshot step to read.")
@click.option("--counts", metavar="FILE", type=click.Path(dir_okay=False),
              help="One count per token id (text or .npy): agreement by frequency bucket. Run "
                   "directories use their token_counts.npy when present.")
@click.option("--corpus", metavar="FILE", type=click.Path(dir_okay=False),
              help="Checkpoints: a UTF-8 text file to count tokens in with the checkpoint's "
                   "tokenizer.json, for frequency buckets.")
@click.option("--top", type=int, default=10, show_default=True,
              help="Tokens in each per-token table (most and least agreement).")
@click.option("--device", default="cpu", show_default=True, metavar="cpu|cuda|cuda:N|auto",
              help="Where the neighbour search runs (a GPU searches every query against all "
                   "rows there; the re-rank stays float64 on the CPU).")
@click.option("--out", metavar="DIR", type=click.Path(file_okay=False),
              help="Write DIR/report.md (and .html), DIR/diagnose.json, "
                   "DIR/figures/diagnose.png: a new "
                   "or empty directory, or the report of an earlier diagnose (replaced).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the JSON document instead of the summary (the overlap under "
                   "input_output_knn_overlap).")
def diagnose_cmd(path: str, out: str | None, as_json: bool, **options: object) -> None:
    """The DH diagnostic of a dhwt run directory or a pretrained checkpoint.

    \b
    PATH: a dhwt run directory (each member at the chosen snapshot, with its tie history: the
    reading is withheld right after an untie, while both matrices are still one copy), or a
    Hugging Face checkpoint folder (config.json and model.safetensors, or shards with
    model.safetensors.index.json; tokenizer.json for token strings), read offline without
    transformers. Layouts: GPT-2, GPT-NeoX / Pythia, Llama / Mistral / Qwen2 / Gemma / OLMo /
    Phi-3, OPT, original OLMo and Phi. A tied model is recognised and said to be tied.

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
    """
    from dhwt.commands.diagnose import DiagnoseOptions, check_out, diagnose_path
    from dhwt.report import diagnose_report

    settings = DiagnoseOptions(**options)
    if out is not None:
        check_out(out)
    result = diagnose_path(path, settings)
    if out is not None:
        report = diagnose_report.write(result, out, settings.top)
        click.echo(f"report: {report}", err=as_json)
    if as_json:
        import json

        click.echo(json.dumps(diagnose_report.document(result, settings.top), indent=1))
    else:
        click.echo(diagnose_report.text(result))


@cli.command("corpus-dh", context_settings={"max_content_width": 100})
@click.option("--grammar", "-g", metavar="NAME|PATH",
              help="Count a built-in grammar (parity, parity-dh, parity-nocnd, four-cases) or a "
                   "grammar TOML, read as a causal LM: exact expected counts, and its exact "
                   "relations to compare with.")
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE",
              help="Override a key of the grammar's spec, as `dhwt synth --set`; repeatable.")
@click.option("--samples", type=int, metavar="N",
              help="Grammars: count N strings drawn from it instead of the exact expectation "
                   "(finite data).")
@click.option("--corpus", metavar="wikitext-2|PATH",
              help="Count natural text: WikiText-2 (found as `dhwt train --corpus` finds it; its "
                   "folder or archive, or DHWT_DATA), a folder with train/valid/test.txt, or one "
                   "UTF-8 text file. The train split is read as one token stream.")
@click.option("--tokenizer", metavar="char|word|bpe:N|gpt2",
              help="Tokenizer of --corpus: characters, words, a byte-level BPE of N >= 257 "
                   "tokens trained on the train split, or GPT-2's (TIKTOKEN_CACHE_DIR offline).")
@click.option("--order", default="1", show_default=True, metavar="N|full",
              help="Context length: the previous N tokens ([BOS] before the start); full (a "
                   "grammar's longest string) makes the relations exact.")
@click.option("--dim", type=int, default=100, show_default=True,
              help="Dimensions kept by the truncated SVD of the PPMI profiles (capped at the "
                   "matrix size).")
@click.option("--k", type=int,
              help="Neighbours per token (self excluded).  [default: 10, capped at (tokens - 1) "
                   "// 2 for small vocabularies]")
@click.option("--tolerance", type=float, metavar="T",
              help="Grammars: a pair is predicted in a relation when its distance is at most T "
                   "(sem: weighted mean total variation; cnd: relative L1).  [default: 1e-9 for "
                   "exact counts, 0.05 with --samples]")
@click.option("--buckets", type=int, default=5, show_default=True,
              help="Frequency buckets (equal numbers of tokens sorted by count).")
@click.option("--top", type=int, default=10, show_default=True,
              help="Most DH-violating pairs listed (grammars: by the estimated relations; a "
                   "corpus: by neighbourhood cosines).")
@click.option("--min-count", type=float, metavar="N",
              help="Tokens of the listed DH-violating pairs are counted at least N times (rarer "
                   "ones have near-degenerate profiles).  [default: 100 for --corpus, 0 for "
                   "--grammar]")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of --samples' draws, the SVD start vector, the chance level and the "
                   "frequency-matched null's permutations.")
@click.option("--null-bins", type=int, default=20, show_default=True,
              help="Frequency bins of the frequency-matched null (equal numbers of compared "
                   "tokens sorted by count, at least 2 each): the output space is relabelled by "
                   "permuting tokens within a bin.")
@click.option("--permutations", type=int, default=200, show_default=True,
              help="Within-bin permutations drawn for the frequency-matched null's 95% range "
                   "and p-value (its level is the exact expectation).")
@click.option("--out", metavar="DIR", type=click.Path(file_okay=False),
              help="Also write DIR/report.md (and .html), DIR/corpus_dh.json, "
                   "DIR/per_token.csv and "
                   "DIR/figures/overlap_by_frequency.png: a new or empty directory, or the "
                   "report of an earlier corpus-dh (replaced).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the JSON document instead of the text (the overlap under "
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
      dhwt corpus-dh --grammar parity --set classes.1.skew=0.4 --order full --samples 2000
      dhwt corpus-dh --corpus ../shared/data --tokenizer char --out reports/wt2-char
      TIKTOKEN_CACHE_DIR=../shared/data/gpt2/tiktoken_cache \\
          dhwt corpus-dh --corpus ../shared/data --tokenizer gpt2 --json > gpt2-dh.json
    """
    from dhwt.commands.corpus_dh import CorpusDhOptions, corpus_dh_command, parse_order

    settings = CorpusDhOptions(order=parse_order(order), assignments=assignments, **options)
    click.echo(corpus_dh_command(settings, as_json=as_json, out=out))


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning user errors into `error: ...` and exit code 2."""
    args, debug = _debug_first(sys.argv[1:] if argv is None else argv)
    try:
        code = cli.main(args=args, prog_name="dhwt", standalone_mode=False)
    except DhwtError as exc:
        if debug:
            raise
        click.echo(f"error: {shorten(exc, LINE)}", err=True)
        sys.exit(2)
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:
        cause = exc if isinstance(exc, Interrupted) else exc.__cause__
        if isinstance(cause, EOFError):  # click's Abort wraps EOFError too: a bug, not Ctrl-C
            raise cause from None
        if isinstance(cause, Interrupted):  # the command says what it kept
            message = str(cause)
        elif _command_of(args).strip() in ("synth", "train"):
            message = "interrupted; nothing was written"  # before a run could keep anything
        else:
            message = "interrupted"
        newline = "\n" if sys.stderr.isatty() else ""  # after the terminal's "^C", not a blank line
        click.echo(f"{newline}error: {message}", err=True)
        sys.exit(130)
    except OSError as exc:  # a full disk or a path that cannot be written: say which, briefly
        if debug:
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        click.echo(f"error: {shorten(f'{exc.strerror or exc}{where}', LINE)}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        if debug:
            raise
        message = shorten(exc.format_message(), LINE)
        click.echo(f"error: {message} (see `dhwt {_command_of(args)}--help`)", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


def _debug_first(args: list[str]) -> tuple[list[str], bool]:
    """(args with --debug moved before the command, whether it was given): --debug belongs to
    the group, and a user may well add it after the command (`dhwt knn --debug A B`). Arguments
    after `--` are left as they are."""
    end = args.index("--") if "--" in args else len(args)
    head = [a for a in args[:end] if a != "--debug"]
    debug = len(head) < end
    return (["--debug"] if debug else []) + head + args[end:], debug


def _command_of(args: list[str]) -> str:
    """The subcommand named in `args`, with a trailing space, or '' when there is none."""
    names = [a for a in args if not a.startswith("-")]
    return f"{names[0]} " if names and names[0] in cli.commands else ""
