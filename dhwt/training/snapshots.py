"""Embedding snapshots: embeddings/step_XXXXXXX.safetensors, what analysis reads instead of a model.

Each file holds "input" and "output", float32 tensors of shape (S, V, d) (members in the order of
`seeds`; when tied, "output" equals "input"), and string metadata: step, tied ("true"/"false"),
seeds (JSON list), vocab (JSON list; index = token id). The reader is
dhwt.analysis.snapshots (analysis never needs the trainer).
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import torch

from dhwt.training.checkpoint import atomic_write_bytes

_NAME = re.compile(r"^step_(\d{7,})\.safetensors$")


def snapshot_path(directory: Path, step: int) -> Path:
    return directory / f"step_{step:07d}.safetensors"


def save_snapshot(directory: Path, step: int, input_weight: torch.Tensor,
                  output_weight: torch.Tensor, *, tied: bool, seeds: list[int],
                  vocab: tuple[str, ...]) -> Path:
    """Write one snapshot atomically (temporary file, then os.replace); equal inputs give equal
    bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    path = snapshot_path(directory, step)
    metadata = {"step": str(step), "tied": "true" if tied else "false",
                "seeds": json.dumps(list(seeds)), "vocab": json.dumps(list(vocab))}
    atomic_write_bytes(path, _safetensors_bytes(
        {"input": input_weight, "output": output_weight}, metadata))
    return path


def _safetensors_bytes(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> bytes:
    """A float32 safetensors file with its header in a fixed order, so equal snapshots are equal
    files (safetensors' own writer orders the metadata differently from process to process).
    Tensors on another device (a GPU run) are copied to the CPU first.

    Format: 8-byte little-endian header length, the JSON header (padded with spaces to a
    multiple of 8), then the tensors' little-endian bytes back to back.
    """
    header: dict[str, object] = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, tensor in tensors.items():
        blob = tensor.detach().cpu().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def remove_snapshots_after(directory: Path, step: int) -> None:
    """Delete snapshots newer than `step` (a resumed run writes them again, identically)."""
    if directory.is_dir():
        for p in directory.iterdir():
            m = _NAME.match(p.name)
            if (m and int(m.group(1)) > step) or (p.name.startswith(".") and ".tmp-" in p.name):
                p.unlink()
