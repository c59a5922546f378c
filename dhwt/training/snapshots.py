"""Embedding snapshots: embeddings/step_XXXXXXX.safetensors, what analysis reads instead of a model.

Each file holds "input" and "output", float32 tensors of shape (S, V, d) (members in the order of
`seeds`; when tied, "output" equals "input"), and string metadata: step, tied ("true"/"false"),
seeds (JSON list), vocab (JSON list; index = token id).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, safe_open, save_file

_NAME = re.compile(r"^step_(\d{7,})\.safetensors$")


def snapshot_path(directory: Path, step: int) -> Path:
    return directory / f"step_{step:07d}.safetensors"


def save_snapshot(directory: Path, step: int, input_weight: torch.Tensor,
                  output_weight: torch.Tensor, *, tied: bool, seeds: list[int],
                  vocab: tuple[str, ...]) -> Path:
    """Write one snapshot atomically (temporary file, then os.replace)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = snapshot_path(directory, step)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tensors = {"input": input_weight.detach().float().contiguous().clone(),
               "output": output_weight.detach().float().contiguous().clone()}
    metadata = {"step": str(step), "tied": "true" if tied else "false",
                "seeds": json.dumps(list(seeds)), "vocab": json.dumps(list(vocab))}
    save_file(tensors, str(tmp), metadata=metadata)
    os.replace(tmp, path)
    return path


def load_snapshot(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, object]]:
    """The tensors of one snapshot and its metadata decoded (step int, tied bool, lists)."""
    with safe_open(str(path), framework="pt") as fh:
        raw = fh.metadata()
    meta = {"step": int(raw["step"]), "tied": raw["tied"] == "true",
            "seeds": json.loads(raw["seeds"]), "vocab": json.loads(raw["vocab"])}
    return load_file(str(path)), meta


def remove_snapshots_after(directory: Path, step: int) -> None:
    """Delete snapshots newer than `step` (a resumed run writes them again, identically)."""
    if directory.is_dir():
        for p in directory.iterdir():
            m = _NAME.match(p.name)
            if (m and int(m.group(1)) > step) or (p.name.startswith(".") and ".tmp-" in p.name):
                p.unlink()
