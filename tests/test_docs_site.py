"""The documentation site builds as `make docs` builds it: offline, with --strict, so that a
broken link, a page missing from the site or an API name without its docstring fails here and
not only in CI. Skipped where mkdocs is not installed (the `docs` extra)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocstrings_handlers.python")
pytest.importorskip("mkdocs_click")
pytest.importorskip("material")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built from the repository's own mkdocs.yml into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.mark.slow  # a mkdocs process that reads the package's docstrings: about 10 s
def test_the_site_has_the_pages_the_documentation_promises(site):
    for page in ("index", "getting-started", "concepts/equivalence", "concepts/theorems",
                 "concepts/knn-match", "concepts/price-of-tying", "how-to/diagnose",
                 "how-to/corpus-dh", "how-to/plant-twins", "how-to/run-a-study", "how-to/gpu",
                 "how-to/export", "findings/index", "findings/main-job",
                 "proofs/T5_masked_lm", "reference/cli", "reference/api"):
        assert (site / f"{page}.html").is_file(), page
    studies = sorted(p.parent.name for p in (ROOT / "experiments").glob("*/README.md"))
    assert "tying_price" in studies
    for study in studies:  # every study's README is its findings page, figures and all
        page = (site / "experiments" / study / "index.html").read_text("utf-8")
        for figure in (ROOT / "experiments" / study / "figures").glob("*.png"):
            if f"figures/{figure.name}" in page:
                assert (site / "experiments" / study / "figures" / figure.name).is_file()


@pytest.mark.slow  # shares the build above
def test_the_reference_is_generated_from_the_code(site):
    cli = (site / "reference" / "cli.html").read_text("utf-8")
    for command in ("synth", "train", "study", "analyze", "knn", "diagnose", "export",
                    "corpus-dh", "verify-theorems"):
        assert f"dhwt {command}" in cli, command
    assert "--tie-schedule" in cli
    api = (site / "reference" / "api.html").read_text("utf-8")
    assert "load_run" in api and "knn_match" in api and "DhwtError" in api


@pytest.mark.slow  # shares the build above
def test_the_site_needs_no_network_to_read(site):
    """No web fonts or scripts from elsewhere: the built pages open from the disk, offline."""
    page = (site / "index.html").read_text("utf-8")
    assert "fonts.googleapis.com" not in page
    assert 'src="http' not in page and "href=\"https://fonts" not in page


def test_every_study_is_a_findings_page_of_the_site():
    nav = (ROOT / "mkdocs.yml").read_text("utf-8")
    for readme in (ROOT / "experiments").glob("*/README.md"):
        assert f": {readme.relative_to(ROOT).as_posix()}" in nav, readme


def test_make_docs_builds_strictly_into_an_ignored_folder():
    makefile = (ROOT / "Makefile").read_text("utf-8")
    assert "mkdocs build --strict" in makefile
    config = (ROOT / "mkdocs.yml").read_text("utf-8")
    assert "site_dir: build/site" in config
    assert shutil.which("git") is None or subprocess.run(
        ["git", "check-ignore", "-q", "build/site/index.html"], cwd=ROOT).returncode == 0
