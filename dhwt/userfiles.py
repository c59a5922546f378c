"""Files a user gives, read whole: numpy arrays (.npy, .npz) and TOML; and safetensors files
(checkpoints, snapshots, matrices), opened by one loader.

Each way such a file can be unreadable (missing, empty, cut short, of another format, nested
deeper than the parser can go) is one DhwtError naming the file, never a library's exception:
numpy's EOFError on an empty file would reach the CLI as if Ctrl-C had been pressed, and a deeply
nested TOML exhausts tomllib's recursion.

Examples:
    >>> parse_toml('a = 1', "config file c.toml")
    {'a': 1}
    >>> parse_toml('a = ' + '[' * 2000 + ']' * 2000, "config file c.toml")
    Traceback (most recent call last):
      ...
    dhwt.errors.DhwtError: config file c.toml nests arrays or tables too deeply ... levels)
"""

from __future__ import annotations

import tomllib
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import numpy as np

from dhwt.errors import DhwtError, reason

_NPY = b"\x93NUMPY"
_ZIP = (b"PK\x03\x04", b"PK\x05\x06")  # a member first, or an empty archive

T = TypeVar("T")


def load_npy(path: str | Path, what: str) -> np.ndarray:
    """The array of the .npy file `path`; DhwtError 'cannot read `path` as `what`: why'.

    Examples:
        >>> import tempfile
        >>> empty = Path(tempfile.mkdtemp()) / "tokens.npy"
        >>> empty.write_bytes(b"")
        0
        >>> load_npy(empty, "an array of token ids")
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: cannot read ... as an array of token ids: the file is empty
    """
    return _load(path, what, (_NPY,), ".npy",
                 lambda file: np.load(file, allow_pickle=False))


def load_npz(path: str | Path, what: str) -> dict[str, np.ndarray]:
    """Every array of the .npz archive `path`, by name; DhwtError as load_npy's."""
    def arrays(file: object) -> dict[str, np.ndarray]:
        with np.load(file, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    return _load(path, what, _ZIP, ".npz", arrays)


def _load(path: str | Path, what: str, magic: tuple[bytes, ...], kind: str,
          read: Callable[[object], T]) -> T:
    def refuse(why: str) -> DhwtError:
        return DhwtError(f"cannot read {path} as {what}: {why}")

    try:
        with open(path, "rb") as file:
            head = file.read(max(map(len, magic)))
            if not head:
                raise refuse("the file is empty")
            if not any(head.startswith(m) for m in magic):
                raise refuse(f"it is not a {kind} file")
            file.seek(0)
            return read(file)
    except OSError as exc:
        raise refuse(exc.strerror or reason(exc)) from None
    except (EOFError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise refuse(reason(exc)) from None


@contextmanager
def open_safetensors(path: str | Path, what: str, *, missing: str | None = None,
                     framework: str = "numpy") -> Iterator[object]:
    """The safetensors file `path` opened lazily (safetensors.safe_open: its header read, each
    tensor when asked, as numpy arrays or, `framework` "pt", torch tensors); any error of
    safetensors while it is open becomes DhwtError 'cannot read `what`: why', and a file that
    does not exist '`missing`' where given.

    Examples:
        >>> import tempfile
        >>> bad = Path(tempfile.mkdtemp()) / "m.safetensors"
        >>> _ = bad.write_bytes(b"not a header")
        >>> with open_safetensors(bad, "m.safetensors") as f:
        ...     f.keys()
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: cannot read m.safetensors: ...
    """
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework=framework) as file:
            yield file
    except DhwtError:
        raise
    except FileNotFoundError as exc:
        raise DhwtError(missing or f"cannot read {what}: {reason(exc)}") from None
    except Exception as exc:  # safetensors raises its own types for corrupt files
        raise DhwtError(f"cannot read {what}: {reason(exc)}") from None


def parse_toml(text: str, what: str) -> dict:
    """The TOML `text` of `what` (e.g. "config file c.toml"); DhwtError '`what` is not valid
    TOML: why' or, past the parser's depth, that it nests too deeply."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DhwtError(f"{what} is not valid TOML: {reason(exc)}") from None
    except RecursionError:
        raise DhwtError(f"{what} nests arrays or tables too deeply for the TOML reader "
                        "(hundreds of levels)") from None
