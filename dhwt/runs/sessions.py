"""A run's record of its training sessions (RUN_DIR/sessions.json): when each `dhwt train` call
on it started and ended (UTC), the steps it went from and to, and the code it ran (dhwt's version
and, where dhwt runs from a git checkout, its commit and whether the work tree differed from
it). So a study can show from its files that its runs began after its plan was committed.

A session is written when it starts (end and to_step null) and completed when it ends: a
killed session keeps its start. The newest session's to_step is where training last ended
(ended_at): the run's record that training finished (dhwt.runs.run.is_finished). Runs made
before this record have none (an empty list).

Examples:
    >>> import tempfile
    >>> from pathlib import Path
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = Path(folder.name) / "sessions.json"
    >>> start_session(path, from_step=0)
    >>> end_session(path, to_step=100)
    >>> [(s["from_step"], s["to_step"], s["end_utc"] >= s["start_utc"]) for s in read_sessions(path)]
    [(0, 100, True)]
    >>> ended_at(path)
    100
    >>> folder.cleanup()
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timezone
from functools import cache
from importlib import metadata
from pathlib import Path

from dhwt.directories import atomic_write_bytes

#: The package's folder, whose git checkout (if it is one) names the code a run ran.
PACKAGE = Path(__file__).resolve().parents[1]


def read_sessions(path: Path) -> list[dict[str, object]]:
    """The sessions recorded in `path`, oldest first; [] where there is no record."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []


def start_session(path: Path, from_step: int) -> None:
    """Record a session starting now from `from_step`."""
    session = {"start_utc": _now(), "end_utc": None, "from_step": from_step, "to_step": None,
               **code()}
    _write(path, [*read_sessions(path), session])


def end_session(path: Path, to_step: int) -> None:
    """Complete the newest session: it ended now, at `to_step`."""
    sessions = read_sessions(path)
    sessions[-1].update(end_utc=_now(), to_step=to_step)
    _write(path, sessions)


def ended_at(path: Path) -> int | None:
    """The step at which the newest session in `path` ended training; None where there is no
    record, or the newest session did not end (killed)."""
    sessions = read_sessions(path)
    return sessions[-1]["to_step"] if sessions else None


@cache
def code() -> dict[str, object]:
    """{"dhwt": the installed version, "commit": HEAD's hash, "modified": whether tracked files
    differ from it} of the git checkout dhwt runs from; commit and modified None where dhwt is
    not a tracked file of one (an installed wheel, even in a virtual environment inside
    someone's repository), the version None where dhwt is not installed. Read once a process:
    the code a process runs is the code it imported when it started."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=PACKAGE,
                                  capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    tracked = git("ls-files", "--error-unmatch", "__init__.py") is not None
    commit = git("rev-parse", "HEAD") if tracked else None
    status = None if commit is None else git("status", "--porcelain", "--untracked-files=no")
    try:
        version = metadata.version("dhwt")
    except metadata.PackageNotFoundError:
        version = None
    return {"dhwt": version, "commit": commit,
            "modified": None if status is None else bool(status)}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _write(path: Path, sessions: list[dict[str, object]]) -> None:
    atomic_write_bytes(path, (json.dumps(sessions, indent=1) + "\n").encode())
