"""Embedding matrices from files, for analyses that compare two spaces (`dhwt knn`, similarity),
and the token lists and weights that go with them (`read_tokens`, `read_weights`).

A matrix is named by one string:
- `FILE.npy`: a 2-D (V, d) or 3-D (S, V, d) array;
- `FILE.safetensors` / `FILE.pt` / `FILE.pth`: the tensor named `side` (default "input", as in
  dhwt snapshots; any tensor name of the file) or the only tensor in the file; `.pt` is read with torch.load(weights_only=True)
  and may hold a tensor or a dict of tensors;
- `RUN_DIR@STEP` or `RUN_DIR@last`: the snapshot embeddings/step_XXXXXXX.safetensors of a dhwt run.
  A path that exists is that file or folder, @ or not: the run `untie@2000` is `untie@2000@last`.
3-D arrays (an ensemble's members) give the row `member`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dhwt.runs.snapshots import read_snapshot, snapshot_files
from dhwt.errors import DhwtError, brief, reason
from dhwt.userfiles import load_npy, open_safetensors

SIDES = ("input", "output")

#: How a torch.save file starts: a zip archive (since torch 1.6), or a pickle (before).
_TORCH = (b"PK\x03\x04", b"\x80")


@dataclass(frozen=True)
class Matrix:
    """A (V, d) matrix and a one-line description of where it came from."""

    values: np.ndarray
    label: str
    vocab: tuple[str, ...] | None = None


def matrix_source(spec: str) -> str:
    """The path `spec` reads: the file (or folder) itself, or RUN_DIR of RUN_DIR@STEP.

    Examples:
        >>> matrix_source("a.npy"), matrix_source("runs/u@last")
        ('a.npy', 'runs/u')
    """
    return spec.rpartition("@")[0] if "@" in spec and not Path(spec).exists() else spec


def load_matrix(spec: str, *, side: str = "input", member: int = 0) -> Matrix:
    """The matrix named by `spec` (see the module doc)."""
    path = Path(spec)
    vocab = None
    if "@" in spec and not path.exists():
        if side not in SIDES:
            raise DhwtError(f"a snapshot has the sides 'input' and 'output', not {side!r}")
        run_dir, _, step = spec.rpartition("@")
        snap = read_snapshot(_snapshot_file(run_dir, step))
        values, vocab = getattr(snap, side), snap.vocab
        label = f"{run_dir} step {snap.step} {side}"
    elif path.is_dir():
        steps = brief(snapshot_files(spec), str)
        raise DhwtError(f"{spec} is a run directory: name one of its snapshots, {spec}@last or "
                        f"{spec}@STEP (steps {steps})")
    elif not path.is_file():
        raise DhwtError(f"{spec} is not a file (nor RUN_DIR@STEP of an existing run)")
    elif path.stat().st_size == 0:
        raise DhwtError(f"{spec} is an empty file; a matrix file holds a (V, d) array")
    elif path.suffix == ".npy":
        values, label = load_npy(path, "a .npy array"), spec
    elif path.suffix == ".safetensors":
        values, key = _pick(_read_safetensors(path), side, spec)
        label = f"{spec} [{key}]"
    elif path.suffix in (".pt", ".pth"):
        values, key = _pick(_read_torch(path), side, spec)
        label = f"{spec} [{key}]" if key else spec
    else:
        raise DhwtError(f"{spec}: unknown format {path.suffix!r}; use .npy, .safetensors, .pt, "
                        ".pth or RUN_DIR@STEP")
    values = np.asarray(values)
    if values.ndim == 3:
        if not 0 <= member < values.shape[0]:
            raise DhwtError(f"{spec} holds {values.shape[0]} members; member {member} does not "
                            "exist")
        values, label = values[member], f"{label} member {member}"
    if values.ndim != 2:
        raise DhwtError(f"{spec} holds an array of shape {values.shape}; expected (V, d) or "
                        "(S, V, d)")
    return Matrix(values=values, label=f"{label} ({values.shape[0]} x {values.shape[1]})",
                  vocab=vocab)


def _snapshot_file(run_dir: str, step: str) -> Path:
    files = snapshot_files(run_dir)
    if step == "last":
        return list(files.values())[-1]
    if not step.isdigit():
        raise DhwtError(f"{run_dir}@{step}: the step must be a whole number or 'last'")
    if int(step) not in files:
        raise DhwtError(f"{run_dir} has no snapshot at step {int(step)}; snapshots: "
                        f"{brief(files, str)}")
    return files[int(step)]


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    with open_safetensors(path, f"{path} as safetensors") as f:
        return {name: f.get_tensor(name) for name in f.keys()}


def _read_torch(path: Path) -> dict[str, np.ndarray] | np.ndarray:
    import torch

    with open(path, "rb") as file:
        if not file.read(4).startswith(_TORCH):
            raise DhwtError(f"{path} is not a file written by torch.save (neither a zip archive "
                            "nor a pickle)")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle, zip and torch errors alike
        raise DhwtError(f"cannot read {path} with torch.load(weights_only=True): "
                        f"{reason(exc)}") from None
    if isinstance(obj, torch.Tensor):
        return obj.float().numpy()
    if isinstance(obj, dict):
        return {k: v.float().numpy() for k, v in obj.items() if isinstance(v, torch.Tensor)}
    raise DhwtError(f"{path} holds a {type(obj).__name__}, not a tensor or a dict of tensors")


def _pick(content: dict[str, np.ndarray] | np.ndarray, side: str,
          spec: str) -> tuple[np.ndarray, str]:
    """The tensor named `side`, or the only tensor; with the key it was found under."""
    if not isinstance(content, dict):
        return content, ""
    if side in content:
        return content[side], side
    if len(content) == 1:
        return next(iter(content.items()))[::-1]
    raise DhwtError(f"{spec} holds tensors {brief(sorted(content))}; none is named {side!r}; "
                    "name one with the side option")


def read_tokens(path: str) -> np.ndarray:
    """Token ids from a .npy file or a text file of whole numbers (whitespace separated); at
    least one."""
    values = _read_numbers(path, "token ids")
    if not values.size:
        raise DhwtError(f"token ids file {path} names no token")
    if not np.array_equal(values, np.round(values)):
        raise DhwtError(f"{path} must hold whole-number token ids")
    return values.astype(np.int64).ravel()


def read_weights(path: str, what: str = "weights") -> np.ndarray:
    """One non-negative weight per token (`what`: "token counts" in messages about counts)
    from a .npy file or a text file."""
    return _read_numbers(path, what).astype(np.float64).ravel()


def _read_numbers(path: str, what: str) -> np.ndarray:
    if not Path(path).exists():
        raise DhwtError(f"{what} file {path} does not exist")
    try:
        if path.endswith(".npy"):
            return np.asarray(load_npy(path, f"an array of {what}"), np.float64)
        return np.array([float(t) for t in Path(path).read_text().split()], np.float64)
    except (OSError, TypeError, ValueError, UnicodeDecodeError) as exc:
        raise DhwtError(f"cannot read {what} from {path}: {reason(exc)}") from None
