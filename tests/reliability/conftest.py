"""Shared pieces of the reliability suites: a tiny dataset, `dhwt` in a subprocess (the CLI
in-process is tests/conftest.py's `cli`), and comparisons of whole run directories (bit for bit, or to float tolerance)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dhwt.directories import LOCK
from dhwt.languages import load_language, write_dataset
from dhwt.runs.checkpoints import list_checkpoints, load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
GLOBAL_RNGS = ("torch", "numpy", "python")


@pytest.fixture(scope="session")
def dataset(tmp_path_factory) -> Path:
    """EXor at 4 bits (16 class strings; 2 held out for validation): tiny and quick."""
    path = tmp_path_factory.mktemp("reliability") / "parity4"
    write_dataset(load_language("parity", {"n_bits": 4}), path, valid_fraction=0.1,
                  test_fraction=0.0, seed=14)
    return path


@pytest.fixture
def spawn():
    """spawn(args, code=None, **Popen kwargs) -> a running `python -m dhwt ARGS` (the console
    script's code path), or `python -c CODE ARGS`; killed at teardown if still running."""
    started: list[subprocess.Popen] = []

    def start(args: list[object], code: str | None = None, **kwargs) -> subprocess.Popen:
        head = ["-c", code] if code else ["-m", "dhwt"]
        env = dict(os.environ, MPLBACKEND="Agg", **kwargs.pop("env", {}))
        then = kwargs.pop("preexec_fn", None)

        def before() -> None:
            _default_sigint()
            if then is not None:
                then()

        started.append(subprocess.Popen([sys.executable, *head, *map(str, args)], cwd=ROOT,
                                        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, preexec_fn=before, **kwargs))
        return started[-1]

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _default_sigint() -> None:
    """Ctrl-C's default in the child: a suite started in the background by a shell without job
    control runs with SIGINT ignored, which children inherit, and the Ctrl-C tests would then
    see a run that never stops."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class RunDirs:
    """Comparisons of run directories (use through the `rundirs` fixture)."""

    @staticmethod
    def files(root: Path) -> dict[str, bytes]:
        """Every file under `root`, hidden ones too, by relative path; a lock file's bytes are
        those of the process that last held it (its PID), not the run's."""
        return {str(p.relative_to(root)): b"" if p.name == LOCK else p.read_bytes()
                for p in sorted(root.rglob("*")) if p.is_file()}

    @staticmethod
    def digest(root: Path) -> dict[str, str]:
        """Every file under `root` with a hash of its bytes (to check that nothing changed)."""
        return {name: hashlib.sha256(data).hexdigest()
                for name, data in RunDirs.files(root).items()}

    @staticmethod
    def checkpoint_states(run: Path) -> dict[str, dict]:
        """The loaded (verified) checkpoints of a run, by file name, without the global RNG
        states: the trainer never draws from torch's, numpy's or Python's global generator, so
        their states record the process's history (Python seeds its own from os.urandom), not
        the run's; every generator the run draws from (data, draw, dropout) is kept."""
        states = {p.name: load_checkpoint(p) for p in list_checkpoints(run / "checkpoints")}
        for state in states.values():
            for name in GLOBAL_RNGS:
                del state["rng"][name]
        return states

    @staticmethod
    def assert_same(a: object, b: object, where: str = "") -> None:
        """Nested dicts / lists equal, tensors bit for bit (dtype included)."""
        if torch.is_tensor(a):
            assert torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b), where
        elif isinstance(a, dict):
            assert a.keys() == b.keys(), where
            for key in a:
                RunDirs.assert_same(a[key], b[key], f"{where}/{key}")
        elif isinstance(a, (list, tuple)):
            assert len(a) == len(b), where
            for i, (x, y) in enumerate(zip(a, b)):
                RunDirs.assert_same(x, y, f"{where}/{i}")
        else:
            assert a == b, where

    @staticmethod
    def assert_identical_runs(expected: Path, actual: Path) -> None:
        """Two run directories hold the same files (no stray temporary anywhere), every file byte
        for byte equal, and the checkpoints (whose zip bytes are not reproducible) equal as states:
        weights, tying, optimizer, step and every RNG. sessions.json records when each training
        session ran, so it differs by nature: both end with a finished session at the same step,
        and the actual run's sessions start at steps that never go back (a resume starts from a
        checkpoint written after the previous session's start)."""
        a, b = RunDirs.files(expected), RunDirs.files(actual)
        assert sorted(a) == sorted(b)
        for name in a:
            if Path(name).name == "sessions.json":
                ours, theirs = json.loads(a[name]), json.loads(b[name])
                assert ours[-1]["to_step"] == theirs[-1]["to_step"] is not None, name
                starts = [s["from_step"] for s in theirs]
                assert starts == sorted(starts), name
            elif not name.endswith(".pt"):
                assert a[name] == b[name], name
        states_a, states_b = RunDirs.checkpoint_states(expected), RunDirs.checkpoint_states(actual)
        assert states_a.keys() == states_b.keys() and states_a
        RunDirs.assert_same(states_a, states_b)

    @staticmethod
    def metric_lines(run: Path) -> list[dict[str, object]]:
        """metrics.jsonl of a run, parsed."""
        return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="session")
def rundirs() -> type[RunDirs]:
    return RunDirs
