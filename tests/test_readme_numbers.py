"""Numbers stated twice agree: the READMEs against the registry, the CLI's help against the README.

Each count or figure is read from the text and compared with its source (the theorem registry)
or with the other place that states it, so that a change to one cannot leave the other stale.
"""

from __future__ import annotations

import re
from pathlib import Path

from dhwt.theory.registry import THEOREMS, select

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text("utf-8")
PROOFS_README = (ROOT / "proofs" / "README.md").read_text("utf-8")


def _row(command: str) -> str:
    """The README's command-table row of `command`."""
    rows = [line for line in README.splitlines() if line.startswith(f"| `dhwt {command}")]
    assert len(rows) == 1, f"README has {len(rows)} table rows for dhwt {command}"
    return rows[0]


def test_readme_states_the_number_of_checks_verify_theorems_runs():
    row = _row("verify-theorems")
    default = re.search(r"\((\d+) checks", row)
    full = re.search(r"(\d+) with `--full`", row)
    assert default and full, row
    assert int(default.group(1)) == len(select())
    assert int(full.group(1)) == len(select(full=True))


def test_proofs_readme_states_the_number_of_checks():
    found = re.search(r"All (\d+) checks pass \((\d+) in the default mode", PROOFS_README)
    assert found, "proofs/README.md no longer states the counts this test reads"
    assert int(found.group(1)) == len(select(full=True))
    assert int(found.group(2)) == len(select())


def test_verify_theorems_help_lists_every_theorem(cli):
    code, out, _ = cli(["verify-theorems", "--help"])
    assert code == 0
    listed = re.search(r"of ((?:T\d+ ?)+)\)", " ".join(out.split()))
    assert listed, out
    assert listed.group(1).split() == list(THEOREMS)


def test_knn_help_and_readme_state_the_same_speed(cli):
    code, out, _ = cli(["knn", "--help"])
    assert code == 0
    help_ratios = set(re.findall(r"(\d\.\d+)x the time of", out))
    readme_ratios = set(re.findall(r"(\d\.\d+)x faiss's time", _row("knn")))
    assert help_ratios and help_ratios == readme_ratios
    assert "Intel Xeon" in _row("knn") and "Intel Xeon" in " ".join(out.split())


def test_knn_help_documents_the_precision_variable(cli):
    code, out, _ = cli(["knn", "--help"])
    assert code == 0
    flat = " ".join(out.split())
    assert "DHWT_KNN_PRECISION=float32|bfloat16|bfloat16-output" in flat


def test_readme_states_one_test_time():
    make_test = re.search(r"make test .*?about ([\d.]+) minutes", README)
    tiers = re.search(r"against about ([\d.]+) for all", README)
    assert make_test and tiers
    assert make_test.group(1) == tiers.group(1)
