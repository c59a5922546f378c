"""What `dhwt synth` does: load a grammar, compute its exact ground truth, optionally write the
dataset, and return the summary to print. Every check runs before anything touches the disk."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dhwt.directories import check_target
from dhwt.languages.dataset import EXISTS, write_dataset
from dhwt.languages.language import OBJECTIVES, load_language
from dhwt.languages.spec import parse_assignments
from dhwt.languages.splits import (SPLIT_SEED, SPLITS, TEST_FRACTION, VALID_FRACTION,
                                   check_split_options, split_of, train_strings)
from dhwt.languages.summary import format_summary
from dhwt.languages.truth import compute_truth


def synth(grammar: str, assignments: Sequence[str] = (), out: str | Path | None = None, *,
          valid_fraction: float = VALID_FRACTION, test_fraction: float = TEST_FRACTION,
          seed: int = SPLIT_SEED, overwrite: bool = False) -> str:
    """Summary text of the grammar (a built-in name or a TOML path) with `KEY=VALUE`
    assignments applied; with `out`, the dataset is written there too."""
    check_split_options(valid_fraction, test_fraction, seed)  # even when nothing is written
    inputs = [grammar] if Path(grammar).is_file() else []
    if out is not None:
        check_target(Path(out), "dataset", overwrite=overwrite, inputs=inputs, exists=EXISTS)
    language = load_language(grammar, parse_assignments(assignments))
    if language.split is not None:
        split = split_of(language, valid_fraction, test_fraction, seed)
        train = split == 0
    else:
        split = None if out is None else split_of(language, valid_fraction, test_fraction, seed)
        train = train_strings(len(language.probs), valid_fraction, test_fraction, seed)
    truths = {objective: compute_truth(language, objective) for objective in OBJECTIVES}
    summary = format_summary(language, truths, train)
    if out is None:
        return f"{summary}\n(no --out given: nothing written)"
    write_dataset(language, out, valid_fraction=valid_fraction, test_fraction=test_fraction,
                  seed=seed, overwrite=overwrite, inputs=inputs, truths=truths)
    sizes = ", ".join(f"{name} {int((split == i).sum())}" for i, name in enumerate(SPLITS))
    how = f"seed {seed}" if language.split is None else "the language's own split"
    return f"{summary}\nwrote {out}: spec.toml, vocab.json, strings.npz, truth.json " \
           f"(strings: {sizes}; {how})"
