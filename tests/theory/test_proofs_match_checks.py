"""proofs/ and the registry agree: each theorem file names every check that runs for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dhwt.theory.registry import THEOREMS

PROOFS = Path(__file__).resolve().parents[2] / "proofs"
FILES = {"T1": "T1_log_odds.md", "T2": "T2_contraction.md", "T3": "T3_input_symmetry.md",
         "T4": "T4_tying_conflict.md", "T5": "T5_masked_lm.md"}


@pytest.mark.parametrize("theorem", sorted(THEOREMS))
def test_proof_file_names_its_checks(theorem):
    text = (PROOFS / FILES[theorem]).read_text("utf-8")
    for check in THEOREMS[theorem]:
        assert f"`{check.name}`" in text, f"{FILES[theorem]} does not name check {check.name!r}"
    assert "*Our statement" in text
    for section in ("## Statement", "## Proof", "does not claim"):
        assert section in text


def test_readme_indexes_every_theorem():
    text = (PROOFS / "README.md").read_text("utf-8")
    for name in FILES.values():
        assert f"({name})" in text
