"""The directories dhwt writes (runs, studies, datasets, report folders): created all at once,
replaced only if dhwt made them and holds nothing else, and written by one process at a time.

Each run, study and dataset holds two hidden files:

    .dhwt   what it is, {"kind": "run" | "study" | "dataset"}, written when dhwt creates it.
            `--overwrite` replaces only a directory with this marker and of the same kind.
    .lock   held (flock) by the process writing the directory, its PID inside for the message a
            second writer gets. The kernel releases it when the process ends, so the lock of a
            killed writer never blocks the next one.

What dhwt wrote is known by name, at every depth: dhwt.filenames.LAYOUTS gives, per kind,
every name (or pattern of names) dhwt writes in such a directory and in each of its folders
(checkpoints/step_NNNNNNN.pt, figures/training.png, ...), the dhwt directories nested in it (a
study's data/ and runs/NAME/, a run's data/), checked by their own kind's, and besides them
only .dhwt, .lock and the hidden temporaries of its writes. Anything else, at any depth (a
user's notes, figures/mine.png, a subfolder, a study file put there), makes `--overwrite` refuse,
naming every such file and folder at once: replacing the directory would delete them.

`create` builds a new directory in a hidden staging directory beside the target, locked from
the start, and renames it into place only when complete; an old directory it replaces is moved
aside first and deleted only after the new one is in place (restored if that fails). It never
replaces the working directory or one of its ancestors, nor a directory that holds one of the
command's inputs.

A report folder (`analyze --out`, ...) has no marker: an earlier report is known by its record
file, which only its command writes (`check_report_dir`), and replaced only if it holds nothing
but what its command's layout names, at any depth; `replace_report` replaces it whole the same
way, so an interrupted or narrower report never mixes with an older one. No report folder, and
no other output a command is given (`knn --per-token`, `synth --out`), may lie inside a run,
study or dataset directory (`check_outside`): those hold only what dhwt writes there.

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
import re
import shutil
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

from dhwt import filenames
from dhwt.filenames import FILE, Layout
from dhwt.errors import DhwtError, Interrupted, brief

MARKER = ".dhwt"
LOCK = ".lock"
KINDS = tuple(filenames.LAYOUTS)
T = TypeVar("T")
#: The hidden leftovers of dhwt's writes (atomic_write_bytes, create) killed half-way.
LEFTOVER = re.compile(r"\..+\.(tmp|staging|replaced)-\d+")


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
    directory not marked as a dhwt `kind` directory, or one that holds any of `inputs` (paths
    the command reads; None entries are skipped) or anything dhwt did not write (`foreign`); any
    other non-empty directory without `overwrite` (the message ends with `exists`, a hint on
    what to do, so the hint is only given where `overwrite` would be allowed). An empty
    directory counts as absent.

    Examples:
        >>> check_target(Path("new-run"), "run", overwrite=False)  # nothing there yet
        False
        >>> check_target(Path("."), "run", overwrite=True)
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: . is the working directory; give a new directory for the run
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    target = Path(target)
    resolved = _check_place(target, str(target), kind)
    if not target.exists():
        return False
    if not target.is_dir():
        raise DhwtError(f"{target} exists and is not a directory")
    if not any(target.iterdir()):
        return False
    found = kind_of(target)
    if found is None:
        raise DhwtError(f"{target} was not made by dhwt (no {MARKER} marker inside), so "
                        f"--overwrite leaves it alone; move or delete it yourself")
    if found != kind:
        raise DhwtError(f"{target} holds a dhwt {found}, not a {kind}; --overwrite replaces only "
                        f"a {kind} (move or delete it yourself)")
    for path in (p for p in inputs if p is not None):
        where = resolve(Path(str(path)))
        if resolved == where or resolved in where.parents:
            raise DhwtError(f"{target} holds {path}, which this command reads; --overwrite "
                            f"would delete it")
    others = foreign(target, kind)
    if others:
        raise DhwtError(f"{target} holds {brief(others, str, len(others))}, which dhwt did not "
                        f"write and a replacement would delete; move "
                        f"{'it' if len(others) == 1 else 'them'} out first")
    if not overwrite:
        raise DhwtError(f"{target} already exists{'; ' + exists if exists else ''}")
    return True


def foreign(directory: Path, kind: str) -> list[str]:
    """What `directory`, a dhwt `kind` directory, holds that dhwt did not write, at any depth:
    paths relative to it, in order (`stray` from the kind's layout, dhwt.filenames.LAYOUTS, and
    its marker and lock).

    Examples:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> for name in ("config.toml", "NOTES.txt", "figures/training.png", "figures/mine.png",
        ...              "data/spec.toml", "data/mine.toml", "checkpoints/step_0000010.pt"):
        ...     (folder / name).parent.mkdir(exist_ok=True)
        ...     _ = (folder / name).write_text("")
        >>> _ = (folder / "data" / MARKER).write_text('{"kind": "dataset"}')
        >>> foreign(folder, "run")
        ['NOTES.txt', 'data/mine.toml', 'figures/mine.png']
    """
    return stray(Path(directory), {**filenames.LAYOUTS[kind], MARKER: FILE, LOCK: FILE})


def stray(directory: Path, layout: Layout) -> list[str]:
    """What `directory` holds that `layout` (dhwt.filenames) does not name, at any depth: paths
    relative to it, in order. An entry not named, or not what its name is for (a folder where
    the layout has a file, a file or link where it has a folder, a directory that is not a dhwt
    one of the kind named), counts whole, its contents not listed; the hidden leftovers of
    dhwt's writes (LEFTOVER) never count."""
    found: list[str] = []
    for entry in sorted(directory.iterdir()):
        name = entry.name
        if LEFTOVER.fullmatch(name):
            continue
        what = next((v for k, v in layout.items()
                     if k == name or (isinstance(k, re.Pattern) and k.fullmatch(name))), None)
        folder = entry.is_dir() and not entry.is_symlink()
        if what == FILE and (entry.is_file() or entry.is_symlink()):
            continue
        if isinstance(what, dict) and folder:
            found.extend(f"{name}/{inner}" for inner in stray(entry, what))
        elif isinstance(what, str) and what in KINDS and folder and kind_of(entry) == what:
            found.extend(f"{name}/{inner}" for inner in foreign(entry, what))
        else:
            found.append(name)
    return found


def check_outside(path: str | Path, what: str) -> None:
    """DhwtError if `path` lies inside a run, study or dataset directory of dhwt's (an ancestor
    carries its marker): such a directory holds only what dhwt writes there (a report or a file
    put in it would block its --overwrite; a dataset in it is what its runs read). `what` names
    `path` in the message (e.g. "--out DIR").

    Examples:
        >>> check_outside("reports/new", "--out reports/new")
    """
    resolved, cwd = resolve(Path(path)), Path.cwd().resolve()
    for parent in resolved.parents:
        kind = kind_of(parent)
        if kind is not None:
            shown = parent.relative_to(cwd) if parent.is_relative_to(cwd) else parent
            raise DhwtError(f"{what} is inside {shown}, a dhwt {kind} directory, which holds "
                            "only what dhwt writes there; give a path outside it")


def check_output_file(path: str | Path, what: str, inputs: Iterable[object],
                      ours: Callable[[Path], bool]) -> None:
    """DhwtError unless the file `path` may be written (replaced, if it exists): its path prints,
    it lies outside dhwt's directories (`check_outside`), it is none of `inputs` (paths the
    command reads; None entries skipped) and lies in none, and an existing `path` is a file
    that `ours` recognises as this output of dhwt's, never anything else. `what` names the
    option (e.g. "--per-token"); nothing is touched."""
    path = Path(path)
    check_printable(path)
    resolved = resolve(path)
    for given in (p for p in inputs if p is not None):
        where = resolve(Path(str(given)))
        if resolved == where or where in resolved.parents:
            raise DhwtError(f"{what} {path} is {'' if resolved == where else 'inside '}{given}, "
                            "which this command reads; give another file")
    check_outside(path, f"{what} {path}")
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise DhwtError(f"{what} {path} exists and is not a file; give a new file")
    if path.exists() and not ours(path):
        raise DhwtError(f"{what} {path} exists and was not written by dhwt as this output; "
                        "give a new file, or move or delete it yourself")


def check_printable(path: Path) -> None:
    r"""DhwtError if the path of a directory dhwt is to write holds a character that does not
    print (a newline, a tab...): its name would break every message, listing and figure title
    that shows it.

    Examples:
        >>> check_printable(Path("runs/未来"))
        >>> check_printable(Path("runs/a\nb"))
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: 'runs/a\nb' holds a character that does not print; give a ...
    """
    if not str(path).isprintable():
        raise DhwtError(f"{str(path)!r} holds a character that does not print; give a name of "
                        "printable characters")


def _check_place(target: Path, name: str, what: str) -> Path:
    """`target` resolved; DhwtError (naming it `name`) unless a `what` directory may be written
    there: its path prints, and it is neither the working directory, nor an ancestor of it,
    nor a symbolic link."""
    check_printable(target)
    resolved, cwd = resolve(target), Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        where = ("the working directory" if resolved == cwd
                 else "an ancestor of the working directory")
        raise DhwtError(f"{name} is {where}; give a new directory for the {what}")
    if target.is_symlink():
        raise DhwtError(f"{name} is a symbolic link; give the directory itself")
    return resolved


def resolve(path: Path) -> Path:
    """`path` absolute, every symbolic link followed; DhwtError if a link in it loops."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError):  # "Symlink loop" (RuntimeError before Python 3.13)
        raise DhwtError(f"{path}: a symbolic link in it loops (too many levels of symbolic "
                        "links); give a directory") from None


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
        _move_into_place(staging, target, old is not None)
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


def check_report_dir(out: str | Path, command: str, earlier: str, layout: Layout) -> bool:
    """Whether `out` holds an earlier report to replace; DhwtError unless it may be the report
    folder of `command`: new, empty, or an earlier report of that command (its file `earlier`,
    which only that command writes) that holds nothing but what `layout` (the command's,
    dhwt.filenames) names, at any depth. Refused too: the working directory or an ancestor of
    it, a symbolic link, a run, study or dataset directory of dhwt's and a folder inside one
    (`check_outside`).

    Examples:
        >>> check_report_dir("a-new-directory", "diagnose", "diagnose.json", {})
        False
    """
    target = Path(out)
    _check_place(target, f"--out {out}", "report")
    check_outside(target, f"--out {out}")
    blocker = next((p for p in (target, *target.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise DhwtError(f"--out {out}: {blocker} exists and is not a directory")
    if not target.is_dir() or not any(target.iterdir()):
        return False
    kind = kind_of(target)
    if kind is not None:
        raise DhwtError(f"--out {out} is a dhwt {kind} directory, not a {command} report; give "
                        "another directory")
    if not (target / earlier).is_file():
        raise DhwtError(f"--out {out} holds files but no earlier {command} report ({earlier}); "
                        "give a new or empty directory")
    others = stray(target, layout)
    if others:
        raise DhwtError(f"--out {out} holds {brief(others, str, len(others))}, which {command} "
                        f"did not write and replacing its earlier report would delete; move "
                        f"{'it' if len(others) == 1 else 'them'} out of {out} first")
    return True


def replace_report(out: str | Path, command: str, earlier: str, layout: Layout,
                   fill: Callable[[Path], T]) -> T:
    """Write the report folder `out` of `command` whole and return what `fill` returned:
    `fill(staging)` writes the report into a hidden staging directory beside `out`, which then
    takes the place of `out` (an earlier report is moved aside first, deleted once the new one is
    in place). Checked first as `check_report_dir`. If `fill` fails or Ctrl-C comes before the
    swap, `out` is left as it was (dhwt.errors.Interrupted says so); a write that fails is a
    DhwtError naming the report and the file."""
    target = Path(out)
    replace = check_report_dir(target, command, earlier, layout)
    parent = target.absolute().parent
    missing = [p for p in (parent, *parent.parents) if not p.exists()]
    staging = parent / f".{target.name}.staging-{os.getpid()}"
    interrupted: list[int] = []
    swapping: list[bool] = []

    def stop(signum: int, frame: object) -> None:
        interrupted.append(signum)
        if not swapping:  # the swap itself runs to its end
            raise KeyboardInterrupt

    ours = (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    if ours:  # a KeyboardInterrupt swallowed on its way out (in a __del__) still counts
        signal.signal(signal.SIGINT, stop)
    try:
        shutil.rmtree(staging, ignore_errors=True)
        parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
        value = fill(staging)
        if interrupted:
            raise KeyboardInterrupt
        swapping.append(True)
        _move_into_place(staging, target, replace)
    except OSError as exc:
        _undo(None, staging, missing)
        name = Path(exc.filename) if exc.filename else None
        if name is not None and staging not in name.parents and name.absolute() not in (
                staging, target.absolute(), parent, *missing):
            raise  # what failed was reading an input: the CLI names it
        where = f" ({target / name.relative_to(staging)})" if name and staging in name.parents \
            else ""
        raise DhwtError(f"cannot write the {command} report {out}: {exc.strerror or exc}"
                        f"{where}") from None
    except KeyboardInterrupt:
        _undo(None, staging, missing)
        raise Interrupted(f"interrupted; {out} was left as it was") from None
    except BaseException:
        _undo(None, staging, missing)
        raise
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if interrupted:
        raise Interrupted(f"interrupted; {out} had been written in full")
    return value


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A hidden temporary path beside `path` for a writer that needs a file name (savefig,
    np.savetxt, tokenizer.save): when the block ends, the file written there is fsynced and
    os.replace'd onto `path`; when it raises, the file is removed and `path` left as it was.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> folder = tempfile.TemporaryDirectory()
        >>> with atomic_path(Path(folder.name) / "a.txt") as tmp:
        ...     _ = tmp.write_text("whole")
        >>> [(p.name, p.read_text()) for p in Path(folder.name).iterdir()]
        [('a.txt', 'whole')]
        >>> folder.cleanup()
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        descriptor = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a fsynced temporary file in the same directory and os.replace
    (atomic_path)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def _move_into_place(staging: Path, target: Path, replace: bool) -> None:
    """Rename `staging` to `target`; an old `target` (to `replace`, locked by us if a dhwt
    directory) is moved aside first and deleted after, or put back if the rename fails."""
    trash = None
    if replace:
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
