"""Every study's README is a findings page in one shape: Question, Answer, Run, Figure and the
prediction as committed, short enough to read (the dated record beside it, in LOG.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHAPE = ["Question", "Answer", "Run", "Figure", "Prediction as committed"]
#: Not a study: the benchmarks' page holds measurements behind choices in the code.
OTHER = {"benchmarks"}
PAGES = sorted([p for p in (ROOT / "experiments").glob("*/README.md") if p.parent.name not in OTHER]
               + [ROOT / "docs" / "findings" / "main-job.md"])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.parent.name if p.name == "README.md"
                         else p.stem)
def test_a_findings_page_has_the_shape_and_length(page):
    text = page.read_text("utf-8")
    assert re.findall(r"^## (.+)$", text, re.M) == SHAPE
    assert len(text.splitlines()) <= 175


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.parent.name if p.name == "README.md"
                         else p.stem)
def test_a_findings_page_links_only_to_files_that_exist(page):
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text("utf-8")):
        if not link.startswith(("http://", "https://")):
            assert (page.parent / link).exists(), link
