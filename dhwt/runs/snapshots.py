"""Embedding snapshots: embeddings/step_XXXXXXX.safetensors, what analysis reads instead of a model.

Each file holds "input" and "output", float32 tensors of shape (S, V, d) (members in the order of
`seeds`; when tied, "output" equals "input"), and string metadata: step, tied ("true"/"false"),
seeds (JSON list), vocab (JSON list; index = token id). The trainer writes them (save_snapshot);
analysis reads them (read_snapshot) and never needs the trainer.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from dhwt.directories import LEFTOVER, atomic_write_bytes
from dhwt.errors import DhwtError
from dhwt.filenames import SNAPSHOT, step_names
from dhwt.runs import layout
from dhwt.userfiles import open_safetensors

_NAME = step_names(SNAPSHOT)


def snapshot_step(path: Path) -> int:
    """The step a snapshot file's name says."""
    match = _NAME.fullmatch(path.name)
    if not match:
        raise DhwtError(f"{path} is not a snapshot file name (step_XXXXXXX.safetensors)")
    return int(match.group(1))


def snapshot_path(directory: Path, step: int) -> Path:
    return directory / SNAPSHOT.format(step)


def save_snapshot(directory: Path, step: int, input_weight: torch.Tensor,
                  output_weight: torch.Tensor, *, tied: bool, seeds: list[int],
                  vocab: tuple[str, ...]) -> Path:
    """Write one snapshot atomically (temporary file, then os.replace); equal inputs give equal
    bytes.

    Examples:
        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> tmp = tempfile.TemporaryDirectory()
        >>> weight = torch.arange(6.0).reshape(1, 3, 2)  # 1 member, 3 tokens, d 2; tied
        >>> path = save_snapshot(Path(tmp.name), 500, weight, weight, tied=True, seeds=[7],
        ...                      vocab=("a", "b", "[MASK]"))
        >>> path.name, snapshot_step(path)
        ('step_0000500.safetensors', 500)
        >>> snapshot = read_snapshot(path)
        >>> snapshot.step, snapshot.tied, snapshot.seeds, snapshot.vocab
        (500, True, (7,), ('a', 'b', '[MASK]'))
        >>> snapshot.input[0].tolist()
        [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
        >>> again = save_snapshot(Path(tmp.name) / "again", 500, weight, weight, tied=True,
        ...                       seeds=[7], vocab=("a", "b", "[MASK]"))
        >>> again.read_bytes() == path.read_bytes()
        True
        >>> tmp.cleanup()
    """
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
            m = _NAME.fullmatch(p.name)
            if (m and int(m.group(1)) > step) or LEFTOVER.fullmatch(p.name):
                p.unlink()


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
    return _read(Path(path), tensors=True)


def check_snapshot(path: Path) -> Snapshot:
    """What read_snapshot reads of `path`, without the tensors (`input` and `output` are empty):
    a file that passes reads (safetensors checks that its header, tensor shapes and data cover
    the file exactly), at the cost of its header only."""
    return _read(path, tensors=False)


def _read(path: Path, tensors: bool) -> Snapshot:
    with open_safetensors(path, f"snapshot {path}",
                          missing=f"snapshot {path} does not exist") as f:
        meta = f.metadata() or {}
        if not {"input", "output"} <= set(f.keys()):
            raise DhwtError(f"cannot read snapshot {path}: no tensors input and output")
        arrays = {key: f.get_tensor(key) if tensors else np.empty((0, 0, 0), np.float32)
                  for key in ("input", "output")}
    missing = {"step", "tied", "seeds", "vocab"} - meta.keys()
    if missing:
        raise DhwtError(f"snapshot {path} lacks metadata {sorted(missing)}; not written by dhwt?")
    try:
        return Snapshot(
            step=int(meta["step"]),
            tied=json.loads(meta["tied"]),
            seeds=tuple(json.loads(meta["seeds"])),
            vocab=tuple(json.loads(meta["vocab"])),
            input=arrays["input"],
            output=arrays["output"],
        )
    except (ValueError, TypeError) as exc:
        raise DhwtError(f"cannot read snapshot {path}: bad metadata ({exc})") from None


def snapshot_paths(run_dir: str | Path) -> list[Path]:
    """The snapshot files of a run directory, in step order."""
    folder = Path(run_dir) / layout.EMBEDDINGS
    paths = sorted(p for p in folder.glob("*") if _NAME.fullmatch(p.name))
    if not paths:
        raise DhwtError(f"no embedding snapshots in {folder}; is {run_dir} a dhwt run directory?")
    return paths


def snapshot_files(run_dir: str | Path) -> dict[int, Path]:
    """The snapshot files of a run directory by step, in step order (DhwtError if none).

    Examples:
        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> tmp = tempfile.TemporaryDirectory()
        >>> weight = torch.zeros(1, 2, 2)
        >>> for step in (10, 0):
        ...     _ = save_snapshot(Path(tmp.name) / layout.EMBEDDINGS, step, weight, weight,
        ...                       tied=True, seeds=[7], vocab=("a", "b"))
        >>> {step: path.name for step, path in snapshot_files(tmp.name).items()}
        {0: 'step_0000000.safetensors', 10: 'step_0000010.safetensors'}
        >>> tmp.cleanup()
    """
    return {snapshot_step(path): path for path in snapshot_paths(run_dir)}


def vocabulary_difference(name_a: object, a: Sequence[str], name_b: object,
                          b: Sequence[str]) -> str:
    """How two vocabularies differ, in one short line: their sizes and the first token id where
    they part (a message must not print a 50,000-token vocabulary)."""
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    first = [repr(v[at]) if at < len(v) else "nothing" for v in (a, b)]
    return (f"{name_a} ({len(a):,} tokens) and {name_b} ({len(b):,} tokens) first differ at "
            f"token id {at}: {first[0]} vs {first[1]}")
