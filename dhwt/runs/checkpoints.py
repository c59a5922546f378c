"""Checkpoint files: written atomically, checksummed, the last few kept, the newest found by scanning.

A checkpoint is `checkpoints/step_XXXXXXX.pt`: a short header line `dhwt-checkpoint sha256=<hex>`
followed by the bytes of a `torch.save` of a plain dict. The header makes truncation or corruption
detectable before anything is trusted; loading uses `weights_only=True`, so the dict may hold only
tensors and plain Python values (the trainer stores every RNG state in such a form). Tensors are
saved from CPU copies (`cpu_copy`) and read onto the CPU (`map_location`), so a checkpoint does
not depend on the device that trained: one written on a GPU loads on a machine without one.

Writing goes to a temporary file in the same directory, fsynced, then `os.replace`d onto its
final name: a kill at any moment leaves either the old set of checkpoints or the new one, never a
half-written file under a checkpoint name (stray temporaries are ignored and cleaned up).

Resolving the newest checkpoint (`latest_checkpoint`) scans the directory for well-named files and
verifies the newest one. If it is truncated or corrupt, that is an error that names the file and
the previous one to fall back to; the choice to delete a damaged file is left to the user rather
than silently resuming from an older state.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from pathlib import Path

import torch

from dhwt.directories import LEFTOVER, atomic_write_bytes
from dhwt.errors import DhwtError
from dhwt.filenames import CHECKPOINT, step_names

_MAGIC = b"dhwt-checkpoint sha256="
_NAME = step_names(CHECKPOINT)
KEEP = 2


def checkpoint_path(directory: Path, step: int) -> Path:
    """Where the checkpoint of `step` lives."""
    return directory / CHECKPOINT.format(step)


def save_checkpoint(directory: Path, step: int, state: dict[str, object], keep: int = KEEP) -> Path:
    """Write `state` as the checkpoint of `step` atomically, then delete all but the newest `keep`.

    Examples:
        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> tmp = tempfile.TemporaryDirectory()
        >>> folder = Path(tmp.name)
        >>> for step in (100, 200, 300):
        ...     _ = save_checkpoint(folder, step, {"step": step, "weight": torch.ones(2)})
        >>> [path.name for path in list_checkpoints(folder)]  # the newest KEEP = 2
        ['step_0000200.pt', 'step_0000300.pt']
        >>> path, state = latest_checkpoint(folder)
        >>> state["step"], state["weight"].tolist()
        (300, [1.0, 1.0])
        >>> _ = path.write_bytes(path.read_bytes()[:-10])  # cut short, as by a full disk
        >>> latest_checkpoint(folder)
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: checkpoint .../step_0000300.pt is truncated or corrupt (checksum
        mismatch, ... bytes); delete it to resume from step_0000200.pt
        >>> tmp.cleanup()
    """
    directory.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    path = checkpoint_path(directory, step)
    atomic_write_bytes(path, _MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink()
    return path


def cpu_copy(value: object) -> object:
    """`value` (a state dict, nested dicts, lists and tuples of tensors) with every tensor on the
    CPU: what a checkpoint saves, so that it loads on a machine without the training's device.
    CPU tensors are kept as they are (no copy)."""
    if torch.is_tensor(value):
        return value.detach().cpu()
    if isinstance(value, dict):
        return type(value)((k, cpu_copy(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(cpu_copy(v) for v in value)
    return value


def list_checkpoints(directory: Path) -> list[Path]:
    """Well-named checkpoint files in `directory`, oldest step first (temporaries excluded)."""
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.iterdir() if _NAME.fullmatch(p.name)), key=checkpoint_step)


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, object]:
    """Read and verify one checkpoint; DhwtError if it is truncated, corrupt or not a checkpoint.

    Its tensors land on `map_location` (the CPU by default) whatever device saved them, so a
    checkpoint written on a GPU reads on a machine without one."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DhwtError(f"cannot read checkpoint {path}: {exc.strerror}") from None
    header, newline, payload = raw.partition(b"\n")
    if not header.startswith(_MAGIC) or not newline:
        raise DhwtError(f"checkpoint {path} is not a dhwt checkpoint (bad header)")
    if hashlib.sha256(payload).hexdigest().encode() != header[len(_MAGIC):]:
        raise DhwtError(f"checkpoint {path} is truncated or corrupt (checksum mismatch, "
                        f"{len(raw)} bytes)")
    return torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)


def checkpoint_step(path: Path) -> int:
    """The step of a well-named checkpoint file."""
    match = _NAME.fullmatch(path.name)
    if match is None:
        raise ValueError(f"{path} is not named like a checkpoint")
    return int(match.group(1))


def common_step(directories: Sequence[Path]) -> int | None:
    """The newest step of which every directory holds a checkpoint (runs trained as one group
    write theirs step by step, so a kill can leave some a step behind); None if there is none."""
    common = set.intersection(*({checkpoint_step(p) for p in list_checkpoints(d)}
                                for d in directories))
    return max(common) if common else None


def latest_checkpoint(directory: Path, at_most: int | None = None
                      ) -> tuple[Path, dict[str, object]]:
    """The newest checkpoint in `directory` (of a step <= `at_most`, if given) and its
    contents, verified, on the CPU.

    Raises DhwtError when there is none, or when the newest is damaged; the message then names the
    previous checkpoint, which `--resume` uses once the damaged file is deleted.
    """
    paths = [p for p in list_checkpoints(directory)
             if at_most is None or checkpoint_step(p) <= at_most]
    if not paths:
        raise DhwtError(f"no checkpoint to resume from in {directory}; start the run again with "
                        "--overwrite")
    try:
        return paths[-1], load_checkpoint(paths[-1])
    except DhwtError as exc:
        fallback = (f"; delete it to resume from {paths[-2].name}" if len(paths) > 1
                    else "; no earlier checkpoint is left, start the run again with --overwrite")
        raise DhwtError(f"{exc}{fallback}") from None


def remove_stray_temporaries(directory: Path) -> None:
    """Delete temporaries left by a process killed mid-write (they never carry a final name)."""
    if directory.is_dir():
        for p in directory.iterdir():
            if LEFTOVER.fullmatch(p.name):
                p.unlink()
