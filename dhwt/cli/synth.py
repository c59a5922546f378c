"""`dhwt synth`: its options and help; what it does is dhwt.commands.synth."""

from __future__ import annotations

import click

from dhwt import defaults
from dhwt.cli.group import cli
from dhwt.cli.options import emit, json_option, seed_option


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
@click.option("--valid-fraction", type=float, default=defaults.VALID_FRACTION, show_default=True,
              help="Share of class strings held out for validation (at least one if > 0).")
@click.option("--test-fraction", type=float, default=defaults.TEST_FRACTION, show_default=True,
              help="Share of class strings held out for testing (at least one if > 0).")
@seed_option("Seed of the shuffle that assigns class strings to splits.",
             default=defaults.SPLIT_SEED)
@click.option("--overwrite", is_flag=True,
              help="Replace --out if it is a dataset dhwt made (never a folder of yours or one "
                   "holding a file of yours, the working directory, one holding the grammar, "
                   "or the data/ of a run or study).")
@json_option("Print the JSON document instead of the summary (per objective the Bayes optimum and "
             "every symbol pair's relations).")
def synth_cmd(grammar: str, out: str | None, as_json: bool, **options: object) -> None:
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
    from dhwt.commands.synth import SynthOptions, synth_command

    emit(synth_command(grammar, out, SynthOptions(**options), as_json))
