"""The directories dhwt writes (runs, studies, datasets): created all at once, replaced only if
dhwt made them, and written by one process at a time.

Each holds two hidden files:

    .dhwt   what it is, {"kind": "run" | "study" | "dataset"}, written when dhwt creates it.
            `--overwrite` replaces only a directory with this marker and of the same kind.
    .lock   held (flock) by the process writing the directory, its PID inside for the message a
            second writer gets. The kernel releases it when the process ends, so the lock of a
            killed writer never blocks the next one.

`create` builds a new directory in a hidden staging directory beside the target, locked from
the start, and renames it into place only when complete; an old directory it replaces is moved
aside first and deleted only after the new one is in place (restored if that fails). It never
replaces the working directory or one of its ancestors, nor a directory that holds one of the
command's inputs.

Examples:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from dhwt.directories import create, kind_of, lock
    >>> tmp = tempfile.TemporaryDirectory()
    >>> target = Path(tmp.name) / "runs" / "a"
    >>> writer = create(target, "run")           # made at once (parents too), marked, locked
    >>> sorted(p.name for p in target.iterdir()), kind_of(target)
    (['.dhwt', '.lock'], 'run')
    >>> lock(target)                             # a second writer is refused while it is held
    Traceback (most recent call last):
      ...
    dhwt.errors.DhwtError: .../runs/a is being written by process ...
    >>> writer.release()
    >>> with lock(target):                       # free again: continue writing it
    ...     _ = (target / "metrics.jsonl").write_text("")
    >>> create(target, "run")                    # never replaced without overwrite
    Traceback (most recent call last):
      ...
    dhwt.errors.DhwtError: .../runs/a already exists
    >>> create(target, "dataset", overwrite=True)  # nor by another kind
    Traceback (most recent call last):
      ...
    dhwt.errors.DhwtError: .../runs/a holds a dhwt run, not a dataset; --overwrite replaces ...
    >>> create(target, "run", overwrite=True).release()  # a run replaces a run of dhwt's
    >>> sorted(p.name for p in target.iterdir())
    ['.dhwt', '.lock']
    >>> tmp.cleanup()
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from dhwt.errors import DhwtError

MARKER = ".dhwt"
LOCK = ".lock"
KINDS = ("run", "study", "dataset")


class Lock:
    """The write lock of one directory, held until `release` or the end of the process.

    `path` follows the directory when it is renamed (the lock is on the open file), so a staging
    directory's lock is the new directory's lock once it is in place. `value` is what the
    creation's `fill` returned."""

    def __init__(self, path: Path, fd: int, value: Any = None) -> None:
        self.path, self._fd, self.value = path, fd, value

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def held(maybe: Lock | None) -> AbstractContextManager:
    """`maybe` to hold in a with statement, or nothing (a process of a torchrun launch that does
    not write holds no lock)."""
    return maybe if maybe is not None else nullcontext()


def lock(directory: Path, what: str = "") -> Lock:
    """Take `directory`'s write lock (creating .lock); DhwtError naming the process that holds
    it. `what` names the directory in messages (default: the path)."""
    directory = Path(directory)
    name = what or str(directory)
    try:
        fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise DhwtError(f"cannot lock {name}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _holder(fd)
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise DhwtError(f"cannot lock {name}: {exc.strerror or exc}") from None
        raise DhwtError(f"{name} is being written by {holder}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return Lock(directory, fd)


def holder(directory: Path) -> str | None:
    """'process PID' if another process holds `directory`'s lock now, else None (reads only)."""
    try:
        fd = os.open(Path(directory) / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return _holder(fd)
    finally:
        os.close(fd)
    return None


def kind_of(directory: Path) -> str | None:
    """The kind dhwt marked `directory` with when it made it, or None (not dhwt's)."""
    try:
        kind = json.loads((Path(directory) / MARKER).read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        return None
    return kind if kind in KINDS else None


def check_target(target: Path, kind: str, *, overwrite: bool, inputs: Iterable[object] = (),
                 exists: str = "") -> bool:
    """Whether `target` holds something to replace; DhwtError unless dhwt may create a `kind`
    directory there. Nothing is touched.

    Refused: the working directory or an ancestor of it; a file or symbolic link; a non-empty
    directory without `overwrite` (the message ends with `exists`, a hint on what to do); with
    `overwrite`, one not marked as a dhwt `kind` directory, or one that holds any of `inputs`
    (paths the command reads; None entries are skipped). An empty directory counts as absent.

    Examples:
        >>> check_target(Path("new-run"), "run", overwrite=False)  # nothing there yet
        False
        >>> check_target(Path("."), "run", overwrite=True)
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: . is the working directory; give a new directory for the run
    """
    assert kind in KINDS
    target = Path(target)
    resolved, cwd = target.resolve(), Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        where = ("the working directory" if resolved == cwd
                 else "an ancestor of the working directory")
        raise DhwtError(f"{target} is {where}; give a new directory for the {kind}")
    if target.is_symlink():
        raise DhwtError(f"{target} is a symbolic link; give the directory itself")
    if not target.exists():
        return False
    if not target.is_dir():
        raise DhwtError(f"{target} exists and is not a directory")
    if not any(target.iterdir()):
        return False
    if not overwrite:
        raise DhwtError(f"{target} already exists{'; ' + exists if exists else ''}")
    found = kind_of(target)
    if found is None:
        raise DhwtError(f"{target} was not made by dhwt (no {MARKER} marker inside), so "
                        f"--overwrite leaves it alone; move or delete it yourself")
    if found != kind:
        raise DhwtError(f"{target} holds a dhwt {found}, not a {kind}; --overwrite replaces only "
                        f"a {kind} (move or delete it yourself)")
    for path in (p for p in inputs if p is not None):
        where = Path(str(path)).resolve()
        if resolved == where or resolved in where.parents:
            raise DhwtError(f"{target} holds {path}, which this command reads; --overwrite "
                            f"would delete it")
    return True


def create(target: Path, kind: str, fill: Callable[[Path], Any] | None = None, *,
           overwrite: bool = False, inputs: Iterable[object] = (), exists: str = "") -> Lock:
    """Create the `kind` directory `target` (marker, lock, then whatever `fill(staging)` adds)
    and return its lock, held, with `fill`'s result as `value`.

    Checks as `check_target` before anything is written; an old directory is replaced only
    once the new one is complete, and only while no other process writes it. If `fill` or the
    creation fails, nothing stays behind (the staging directory, parents made for it), and an
    OSError becomes a DhwtError naming `target`."""
    target = Path(target)
    replace = check_target(target, kind, overwrite=overwrite, inputs=inputs, exists=exists)
    old = lock(target, f"{kind} directory {target}") if replace else None  # before any work
    parent = target.absolute().parent
    blocker = next((p for p in (parent, *parent.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise DhwtError(f"cannot create {kind} directory {target}: {blocker} is not a directory")
    missing = [p for p in (parent, *parent.parents) if not p.exists()]
    staging = parent / f".{target.name}.staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    held = None
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
        held = lock(staging)
        (staging / MARKER).write_text(json.dumps({"kind": kind}) + "\n", encoding="utf-8")
        held.value = fill(staging) if fill is not None else None
        _move_into_place(staging, target, old)
    except OSError as exc:  # a full disk, a permission: say where, in one line
        _undo(held, staging, missing)
        raise DhwtError(f"cannot create {kind} directory {target}: {exc.strerror or exc}"
                        ) from None
    except BaseException:
        _undo(held, staging, missing)
        raise
    finally:
        if old is not None:
            old.release()
    held.path = target
    return held


def check_report_dir(out: str | Path, command: str, earlier: str) -> None:
    """Refuse `out` as the report folder of `command` unless it is new, empty, or holds an
    earlier report of that command (its file `earlier`, which only that command writes): the
    report's files would replace a user's files of the same names.

    Examples:
        >>> check_report_dir("a-new-directory", "diagnose", "diagnose.json")
    """
    target = Path(out)
    blocker = next((p for p in (target, *target.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise DhwtError(f"--out {out}: {blocker} exists and is not a directory")
    if target.is_dir() and any(target.iterdir()) and not (target / earlier).is_file():
        raise DhwtError(f"--out {out} holds files but no earlier {command} report ({earlier}); "
                        "give a new or empty directory")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a fsynced temporary file in the same directory and os.replace."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _move_into_place(staging: Path, target: Path, old: Lock | None) -> None:
    """Rename `staging` to `target`; an old `target` (locked by us: `old`) is moved aside first
    and deleted after, or put back if the rename fails."""
    trash = None
    if old is not None:
        trash = target.parent / f".{target.name}.replaced-{os.getpid()}"
        os.replace(target, trash)
    try:
        os.replace(staging, target)
    except OSError as exc:
        if trash is not None:
            os.replace(trash, target)
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):  # another process created it meanwhile
            raise DhwtError(f"{target} was created by {holder(target) or 'another process'} "
                            f"while this one prepared it") from None
        raise
    if trash is not None:
        shutil.rmtree(trash)


def _undo(held: Lock | None, staging: Path, created: list[Path]) -> None:
    """Undo a failed creation: the staging directory, then the parents made for it (innermost
    first; one that something else has filled meanwhile stays)."""
    if held is not None:
        held.release()
    shutil.rmtree(staging, ignore_errors=True)
    for directory in created:
        try:
            directory.rmdir()
        except OSError:
            break


def _holder(fd: int) -> str:
    """'process PID' from an open lock file, or 'another process' if it names none yet."""
    try:
        pid = os.pread(fd, 32, 0).decode().strip()
    except OSError:
        pid = ""
    return f"process {pid}" if pid.isdigit() else "another process"
