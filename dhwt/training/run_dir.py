"""The run directory, created all at once or not at all.

Layout (DESIGN.md): config.toml (the resolved config, written first), metrics.jsonl,
checkpoints/, embeddings/, figures/, report.md, and data/ when the dataset was built from a
grammar for this run.

`create_run_dir` fills a hidden staging directory beside the target and renames it into place
only when everything in it (config, dataset, validation) succeeded, so a run that fails before
training leaves nothing behind. Missing parent directories are created (as `mkdir -p`) and
removed again if the creation fails. An existing target is refused unless `overwrite`; then it is
replaced only after the new one is complete.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from dhwt.errors import DhwtError

T = TypeVar("T")

CONFIG = "config.toml"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
EMBEDDINGS = "embeddings"
FIGURES = "figures"
REPORT = "report.md"
DATA = "data"


def refuse_existing(run_dir: Path, overwrite: bool) -> None:
    """DhwtError if `run_dir` exists and may not be replaced."""
    if run_dir.exists() and not overwrite:
        raise DhwtError(f"run directory {run_dir} already exists; pass --overwrite to replace it "
                        f"or --resume to continue it")
    if run_dir.exists() and not run_dir.is_dir():
        raise DhwtError(f"run directory {run_dir} exists and is not a directory")


def create_run_dir(run_dir: Path, config_toml: str, *, overwrite: bool = False,
                   fill: Callable[[Path], T] | None = None) -> T | None:
    """Create `run_dir` with config.toml (written first) and whatever `fill(staging_dir)` adds.

    `fill` may build a dataset and validate it; if it or anything else raises, the staging
    directory is removed and the exception propagates, leaving the file system as it was (an
    OSError, such as a full disk, as a DhwtError naming `run_dir`).
    Returns what `fill` returned.
    """
    run_dir = Path(run_dir)
    refuse_existing(run_dir, overwrite)
    parent = run_dir.absolute().parent
    blocker = next((p for p in (parent, *parent.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise DhwtError(f"cannot create run directory {run_dir}: {blocker} is not a directory")
    missing = [p for p in (parent, *parent.parents) if not p.exists()]
    staging = parent / f".{run_dir.name}.staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
        (staging / CONFIG).write_text(config_toml, encoding="utf-8")
        result = fill(staging) if fill is not None else None
        for sub in (CHECKPOINTS, EMBEDDINGS, FIGURES):
            (staging / sub).mkdir()
        if run_dir.exists():
            trash = parent / f".{run_dir.name}.replaced-{os.getpid()}"
            os.replace(run_dir, trash)
            os.replace(staging, run_dir)
            shutil.rmtree(trash)
        else:
            os.replace(staging, run_dir)
    except OSError as exc:  # a full disk, a permission: say where, in one line
        _remove(staging, missing)
        raise DhwtError(f"cannot create run directory {run_dir}: {exc.strerror or exc}") from None
    except BaseException:
        _remove(staging, missing)
        raise
    return result


def _remove(staging: Path, created: list[Path]) -> None:
    """Undo a failed creation: the staging directory, then the parents made for it (innermost
    first; one that something else has filled meanwhile stays)."""
    shutil.rmtree(staging, ignore_errors=True)
    for directory in created:
        try:
            directory.rmdir()
        except OSError:
            break
