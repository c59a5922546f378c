"""docs/tutorial.py runs as written (so that it never rots): it writes only into the folder it is
given, and prints the exact truth, the training, and measurements in their ranges."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dhwt.runs import load_run

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial.py"


@pytest.mark.slow  # a python process that trains: about 5 s
def test_the_tutorial_runs_and_writes_only_into_its_folder(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(TUTORIAL), str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "Bayes optimum: cross-entropy 0.509 nats, accuracy 0.70" in text
    assert "0a/0b: sem True, cnd False" in text and "1a/1b: sem True, cnd True" in text
    assert "trained tied and untied to step 300 as one ensemble" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "closeness.png", "data", "tied", "untied"]
    figure = (out / "closeness.png").read_bytes()
    assert figure.startswith(b"\x89PNG") and len(figure) > 10_000
    for name in ("tied", "untied"):
        assert load_run(out / name).steps == [0, 50, 100, 150, 200, 250, 300]
        fit = re.search(rf"^{name}: exact cross-entropy per seed \[(.*)\], accuracy \[(.*)\]$",
                        text, re.M)
        assert fit is not None
        assert all(float(x) >= 0.509 for x in fit.group(1).split(","))  # never below Bayes
        assert all(0.0 <= float(x) <= 0.70 for x in fit.group(2).split(","))
    matches = re.findall(r"^untied seed \d: input vs output KNN overlap ([\d.]+) "
                         r"\(chance ([\d.]+)\)$", text, re.M)
    assert len(matches) == 5
    assert all(0.0 <= float(x) <= 1.0 for pair in matches for x in pair)
    assert len(re.findall(r"^(tied|untied) output \S+: normalised distance [\d.]+ at step 0, "
                          r"[\d.]+ at the end$", text, re.M)) == 4


@pytest.mark.slow  # trains: about 5 s
def test_the_closeness_figure_starts_its_axes_at_0(tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("tutorial", TUTORIAL)
    tutorial = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tutorial)
    drawn = []
    monkeypatch.setattr(tutorial, "save", lambda fig, path: drawn.append(fig) or path)
    tutorial.main(tmp_path / "out")
    (fig,) = drawn
    assert [ax.get_ylim()[0] for ax in fig.axes] == [0, 0]  # a distance: 0 is its origin
