"""The README is a front door that works as written: its Python runs (importing only dhwt), its
two commands come first, every file it links to exists, and it stays short with one figure. The
getting-started page's Python runs as written too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text("utf-8")


def _blocks(language: str, text: str = README) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.M | re.S)


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "MPLBACKEND": "Agg",
                                            "PYTHONPATH": str(ROOT)})


def test_the_two_commands_come_first():
    first = _blocks("bash")[0]
    assert [line.split()[:2] for line in first.splitlines()] == [["make", "study"],
                                                                ["make", "test"]]


def test_the_readme_is_short_with_one_figure():
    assert len(README.splitlines()) <= 160
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README)
    assert len(figures) == 1 and (ROOT / figures[0]).is_file()


def test_every_file_the_readme_links_to_exists():
    links = [link.split("#")[0] for link in re.findall(r"\]\(([^)]+)\)", README)
             if not link.startswith(("http://", "https://"))]
    assert links
    assert [link for link in links if not (ROOT / link).exists()] == []


def test_the_python_imports_only_dhwt():
    (code,) = _blocks("python")
    imported = re.findall(r"^(?:from|import) (\S+)", code, re.M)
    assert imported and all(name.split(".")[0] == "dhwt" for name in imported)


@pytest.mark.slow  # a python process that trains two runs of 3 seeds: about 15 s
def test_the_python_runs_as_written(tmp_path):
    (code,) = _blocks("python")
    done = _run(code, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    optimum, overlap, report = done.stdout.splitlines()[-3:]
    assert optimum == "0.509"
    assert 0.0 <= float(overlap) <= 1.0
    assert Path(tmp_path / report).is_file() and report.endswith("report.md")
    assert sorted(p.name for p in (tmp_path / "runs" / "quick").iterdir()) == [
        "data", "report", "tied", "untied"]


@pytest.mark.slow  # trains two runs of 5 seeds: about 15 s
def test_the_getting_started_python_runs_as_written(tmp_path):
    (code,) = _blocks("python", (ROOT / "docs" / "getting-started.md").read_text("utf-8"))
    done = _run(code, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    optimum, distance, overlaps = done.stdout.splitlines()[-3:]
    assert round(float(optimum), 3) == 0.509 and float(distance) >= 0.0
    assert all(0.0 <= float(x) <= 1.0 for x in overlaps.split())
