"""`dhwt synth`: load a grammar, compute its exact ground truth, optionally write the dataset
(synthesize: a dhwt.languages.synthesis.Synthesis), and render it (the summary text, or
dhwt.report.synth_report's JSON document). Every check runs before anything touches the disk."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dhwt.directories import check_outside, check_target
from dhwt.languages.dataset import EXISTS, write_dataset
from dhwt.languages.language import OBJECTIVES, load_language
from dhwt.languages.spec import parse_assignments
from dhwt.languages.splits import (SPLIT_SEED, TEST_FRACTION, VALID_FRACTION,
                                   check_split_options, split_of, train_strings)
from dhwt.languages.synthesis import Synthesis
from dhwt.languages.truth import bayes_optimum, compute_truth
from dhwt.report.json_document import json_text
from dhwt.report.synth_report import document, summary_text


def synthesize(grammar: str, assignments: Sequence[str] = (), out: str | Path | None = None, *,
               valid_fraction: float = VALID_FRACTION, test_fraction: float = TEST_FRACTION,
               seed: int = SPLIT_SEED, overwrite: bool = False) -> Synthesis:
    """The grammar (a built-in name or a TOML path) with `KEY=VALUE` assignments applied and its
    truth; with `out`, the dataset is written there too."""
    check_split_options(valid_fraction, test_fraction, seed)  # even when nothing is written
    inputs = [grammar] if Path(grammar).is_file() else []
    if out is not None:  # never inside a run or study, whose runs read their dataset
        check_outside(out, f"--out {out}")
        check_target(Path(out), "dataset", overwrite=overwrite, inputs=inputs, exists=EXISTS)
    language = load_language(grammar, parse_assignments(assignments))
    if language.split is not None:
        split = split_of(language, valid_fraction, test_fraction, seed)
        train = split == 0
    else:
        split = None if out is None else split_of(language, valid_fraction, test_fraction, seed)
        train = train_strings(len(language.probs), valid_fraction, test_fraction, seed)
    truths = {objective: compute_truth(language, objective) for objective in OBJECTIVES}
    if out is not None:
        write_dataset(language, out, valid_fraction=valid_fraction, test_fraction=test_fraction,
                      seed=seed, overwrite=overwrite, inputs=inputs, truths=truths)
    small = train is not None and 2 * train.sum() <= len(train)
    train_optimum = {objective: bayes_optimum(language.subset(train), objective)
                     for objective in OBJECTIVES} if small else {}
    return Synthesis(language, truths, train, split, out,
                     seed if language.split is None else None, train_optimum)


def synth_command(grammar: str, assignments: Sequence[str], out: str | None, *,
                  valid_fraction: float, test_fraction: float, seed: int, overwrite: bool,
                  as_json: bool = False) -> str:
    """What `dhwt synth` prints: the summary, or (`as_json`) the JSON document."""
    result = synthesize(grammar, assignments, out, valid_fraction=valid_fraction,
                        test_fraction=test_fraction, seed=seed, overwrite=overwrite)
    return json_text(document(result)) if as_json else summary_text(result)
