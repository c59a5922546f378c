"""Embedding snapshots on disk: the only thing analysis reads from a training run.

A run writes `embeddings/step_XXXXXXX.safetensors` holding "input" and "output" tensors of shape
(S, V, d) (S ensemble members) with metadata "step", "tied", "seeds" and "vocab" (JSON strings).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import safe_open

from dhwt.errors import DhwtError


@dataclass(frozen=True)
class Snapshot:
    """Both embedding matrices of every member at one step."""

    step: int
    tied: bool
    seeds: tuple[int, ...]
    vocab: tuple[str, ...]
    input: np.ndarray  # (S, V, d)
    output: np.ndarray  # (S, V, d)


def read_snapshot(path: str | Path) -> Snapshot:
    """Read one snapshot file; DhwtError if it is missing or not a dhwt snapshot."""
    path = Path(path)
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            arrays = {key: f.get_tensor(key) for key in ("input", "output")}
    except FileNotFoundError:
        raise DhwtError(f"snapshot {path} does not exist") from None
    except Exception as exc:  # safetensors raises its own types for corrupt files
        raise DhwtError(f"cannot read snapshot {path}: {exc}") from None
    missing = {"step", "tied", "seeds", "vocab"} - meta.keys()
    if missing:
        raise DhwtError(f"snapshot {path} lacks metadata {sorted(missing)}; not written by dhwt?")
    return Snapshot(
        step=int(meta["step"]),
        tied=json.loads(meta["tied"]),
        seeds=tuple(json.loads(meta["seeds"])),
        vocab=tuple(json.loads(meta["vocab"])),
        input=arrays["input"],
        output=arrays["output"],
    )


def snapshot_paths(run_dir: str | Path) -> list[Path]:
    """The snapshot files of a run directory, in step order."""
    folder = Path(run_dir) / "embeddings"
    paths = sorted(folder.glob("step_*.safetensors"))
    if not paths:
        raise DhwtError(f"no embedding snapshots in {folder}; is {run_dir} a dhwt run directory?")
    return paths


def read_run(run_dir: str | Path) -> list[Snapshot]:
    """Every snapshot of a run, in step order."""
    return [read_snapshot(p) for p in snapshot_paths(run_dir)]


def vocabulary_difference(name_a: object, a: Sequence[str], name_b: object,
                          b: Sequence[str]) -> str:
    """How two vocabularies differ, in one short line: their sizes and the first token id where
    they part (a message must not print a 50,000-token vocabulary)."""
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    first = [repr(v[at]) if at < len(v) else "nothing" for v in (a, b)]
    return (f"{name_a} ({len(a):,} tokens) and {name_b} ({len(b):,} tokens) first differ at "
            f"token id {at}: {first[0]} vs {first[1]}")
