"""One door to a run directory: only dhwt/runs (and dhwt/filenames, the names' home) builds paths
inside a run directory; everything else in dhwt/ and experiments/ goes through dhwt.runs.Run
(`dhwt.load_run`) or the functions of dhwt.runs."""

from __future__ import annotations

import ast
from pathlib import Path

from dhwt import filenames

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = (ROOT / "dhwt" / "runs", ROOT / "dhwt" / "filenames.py")
#: Names only a run directory holds: a string equal to one builds a path into a run by hand.
RUN_ONLY = {filenames.CONFIG, filenames.METRICS, filenames.TOKEN_COUNTS, filenames.TWINS,
            filenames.CHECKPOINTS, filenames.FIGURE}
#: Run folders whose names are also plain words (members.vary = "embeddings"): a path only when
#: joined with `/`.
JOINED = {filenames.EMBEDDINGS, filenames.TENSORBOARD}
#: Snapshot and checkpoint files are step_XXXXXXX.safetensors / .pt (dhwt.runs.snapshots).
STEP_FILE = "step_"
#: The constants that name them (dhwt.filenames, re-exported by dhwt.runs.layout): joined with
#: `/` they build a path into a run by hand, as `run_dir / layout.METRICS` did in the writers
#: (they go through dhwt.runs.layout.run_paths). DATA only as `layout.DATA`: a study directory
#: has a data folder of its own.
RUN_NAMES = {"CONFIG", "METRICS", "TOKEN_COUNTS", "CHECKPOINTS", "FIGURE", "EMBEDDINGS",
             "TENSORBOARD"}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of `tree` (prose, where a run's layout is described)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def by_hand(source: str) -> list[tuple[int, str]]:
    """(line, string) of each place in `source` that names a path inside a run directory."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    names = _run_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            if node.value in RUN_ONLY or node.value.startswith(STEP_FILE) or \
                    f"/{STEP_FILE}" in node.value:
                found.append((node.lineno, node.value))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            found += [(node.lineno, side.value) for side in (node.left, node.right)
                      if isinstance(side, ast.Constant) and side.value in JOINED]
            found += [(node.lineno, name) for name in map(names.get, (node.left, node.right))
                      if name in RUN_NAMES or name == "layout.DATA"]
    return sorted(found)


def _run_names(tree: ast.AST) -> dict[ast.AST, str]:
    """The nodes of `tree` that read a name of dhwt.filenames or dhwt.runs.layout: `METRICS`
    imported from one of them, or `layout.METRICS` / `filenames.METRICS` (DATA read through
    layout as "layout.DATA"), each with that name."""
    homes = {"dhwt.filenames", "dhwt.runs.layout"}
    imported = {alias.asname or alias.name: alias.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module in homes
                for alias in node.names}
    modules = {alias.asname or alias.name for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and node.module in ("dhwt", "dhwt.runs")
               for alias in node.names if alias.name in ("filenames", "layout")}
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in imported:
            found[node] = imported[node.id]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id in modules):
            found[node] = "layout.DATA" if node.attr == "DATA" else node.attr
    return found


def test_by_hand_finds_run_paths_and_skips_words_and_prose():
    assert by_hand('rows = read_metrics(run / "metrics.jsonl")') == [(1, "metrics.jsonl")]
    assert by_hand('name = f"step_{step:07d}.safetensors"') == [(1, "step_")]
    assert by_hand('ids = path.stem.removeprefix("step_")') == [(1, "step_")]
    assert by_hand('path = f"{run}/step_{step:07d}.pt"') == [(1, "/step_")]
    assert by_hand('vary = "embeddings"\nfolder = run / "embeddings"') == [(2, "embeddings")]
    assert by_hand("'Reads metrics.jsonl.'\nrows = load_run(run).metrics()") == []
    assert by_hand("from dhwt.runs import layout\npath = run.run_dir / layout.CHECKPOINTS") == [
        (2, "CHECKPOINTS")]
    assert by_hand("from dhwt.runs import layout\nfrom dhwt.filenames import CONFIG\n"
                   "path = staging / layout.DATA\nsaved = run_dir / CONFIG") == [
        (3, "layout.DATA"), (4, "CONFIG")]
    assert by_hand("from dhwt.filenames import DATA\ndata = out / DATA\n"
                   "path = run_paths(run).metrics\nCONFIG = 'config.json'\nc = root / CONFIG") == []


def test_run_paths_are_built_in_dhwt_runs_only():
    files = [path for folder in ("dhwt", "experiments") for path in (ROOT / folder).rglob("*.py")
             if not any(path == allowed or allowed in path.parents for allowed in ALLOWED)]
    assert len(files) > 50
    found = {str(path.relative_to(ROOT)): by_hand(path.read_text("utf-8")) for path in files}
    offences = [f"{name}:{line}: {text!r}" for name, places in found.items()
                for line, text in places]
    assert not offences, ("paths inside a run directory built by hand (use dhwt.load_run's "
                          "Run):\n" + "\n".join(offences))
