"""`dhwt analyze RUN_DIR...`: the closeness report of any run directories of one language.

The language (and its exact relations) comes from the first run's config: RUN_DIR/data for a run
built with `--grammar`, else the dataset the config names. Every run must share its vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dhwt.analysis.snapshots import read_snapshot, snapshot_paths
from dhwt.errors import DhwtError
from dhwt.languages import load_task
from dhwt.report.runs_report import write_runs_report
from dhwt.training import run_dir as layout
from dhwt.training.config import TrainConfig


def parse_pairs(text: str) -> tuple[tuple[str, str], ...]:
    """`"0a:0b,1a:1b"` -> (("0a", "0b"), ("1a", "1b"))."""
    pairs = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 2 or not all(parts):
            raise DhwtError(f"bad --pairs {text!r}: write pairs as A:B joined by commas, "
                            f"e.g. 0a:0b,1a:1b")
        pairs.append((parts[0], parts[1]))
    return tuple(pairs)


def analyze(run_dirs: Sequence[str | Path], out: str | Path, *, pairs: str | None = None,
            measure: str = "normalised") -> Path:
    """Write out/report.md and out/figures/ for `run_dirs`; return the report's path."""
    dirs = [Path(d) for d in run_dirs]
    if not dirs:
        raise DhwtError("give at least one run directory")
    for d in dirs:
        if not (d / layout.CONFIG).is_file():
            raise DhwtError(f"{d} is not a dhwt run directory (no {layout.CONFIG})")
    vocabularies = {d: read_snapshot(snapshot_paths(d)[0]).vocab for d in dirs}
    if len(set(vocabularies.values())) > 1:
        raise DhwtError("the runs have different vocabularies: "
                        + "; ".join(f"{d}: {list(v)}" for d, v in vocabularies.items()))
    config = TrainConfig.from_toml(dirs[0] / layout.CONFIG)
    data = dirs[0] / layout.DATA if config.grammar is not None else Path(str(config.data))
    if not data.is_dir():
        raise DhwtError(f"the dataset of {dirs[0]} ({data}) is missing")
    names = [d.name for d in dirs]
    if len(set(names)) < len(names):
        names = [f"{d.parent.name}/{d.name}" for d in dirs]
    if len(set(names)) < len(names):
        raise DhwtError("two run directories have the same name; give distinct runs")
    return write_runs_report(
        dict(zip(names, dirs)), load_task(data, config.objective), Path(out),
        title="Closeness of symbol pairs", intro=[f"Runs: {', '.join(str(d) for d in dirs)}."],
        pairs=parse_pairs(pairs) if pairs else None, measure=measure)
