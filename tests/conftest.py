"""Fixtures every test room shares: the `dhwt` command line run in-process and as the installed
console script, datasets and tasks built once per session, interrupting a run at a step, and
comparing saved states bit for bit. (Tests run with --import-mode=importlib, so helpers are
shared as fixtures.)"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

from dhwt.cli import main
from dhwt.languages import Task, load_language, load_task, write_dataset

CONSOLE_SCRIPT = Path(sys.executable).parent / "dhwt"


def pytest_configure(config: pytest.Config) -> None:
    """One thread per pytest-xdist worker (and per process it starts): `make test` runs a worker
    per core, and two workers of two threads each on two cores spin against each other."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
Outcome = tuple[int, str, str]  # exit code, stdout, stderr


@pytest.fixture(scope="session")
def cli() -> Callable[[Sequence[object]], Outcome]:
    """cli(args) -> (exit code, stdout, stderr) of the real entry point run in-process (args
    may be paths or numbers). Its own capture, not capsys, so module fixtures may use it too."""
    def run(args: Sequence[object]) -> Outcome:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            with pytest.raises(SystemExit) as info:
                main([str(a) for a in args])
        return info.value.code, out.getvalue(), err.getvalue()
    return run


@pytest.fixture(scope="session")
def console() -> Callable[..., list[Outcome]]:
    """console(*arg_lists, cwd) -> [(exit code, stdout, stderr), ...]: the installed `dhwt`
    script, one fresh process per argument list, all running at once."""
    def run(*arg_lists: Sequence[object], cwd: Path) -> list[Outcome]:
        procs = [subprocess.Popen([str(CONSOLE_SCRIPT), *map(str, args)], cwd=cwd,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for args in arg_lists]
        return [_finish(proc) for proc in procs]
    return run


def _finish(proc: subprocess.Popen) -> Outcome:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


@pytest.fixture(scope="session")
def make_dataset(tmp_path_factory) -> Callable[..., Path]:
    """make_dataset(grammar="parity", overrides=None, valid_fraction=0.1, test_fraction=0.0,
    seed=14) -> a dataset directory of that grammar and split, built once per session (tests
    read it; none may write into it)."""
    built: dict[tuple, Path] = {}

    def build(grammar: str = "parity", overrides: dict | None = None,
              valid_fraction: float = 0.1, test_fraction: float = 0.0, seed: int = 14) -> Path:
        key = (grammar, tuple(sorted((overrides or {}).items())), valid_fraction,
               test_fraction, seed)
        if key not in built:
            path = tmp_path_factory.mktemp("datasets") / grammar
            write_dataset(load_language(grammar, overrides), path,
                          valid_fraction=valid_fraction, test_fraction=test_fraction, seed=seed)
            built[key] = path
        return built[key]
    return build


@pytest.fixture(scope="session")
def make_task(make_dataset) -> Callable[..., Task]:
    """make_task(objective="mlm", **make_dataset's arguments) -> the Task of that dataset."""
    def build(objective: str = "mlm", **dataset: object) -> Task:
        return load_task(make_dataset(**dataset), objective)
    return build


@pytest.fixture(scope="session")
def file_tree() -> Callable[[Path], dict[str, tuple[str, int]]]:
    """file_tree(root) -> every file under root with a hash of its bytes and its modification
    time, but the writers' locks (dhwt.directories), which each command takes: compare two to
    see that a command touched nothing."""
    def tree(root: Path) -> dict[str, tuple[str, int]]:
        return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(),
                                           p.stat().st_mtime_ns)
                for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}
    return tree


@pytest.fixture
def at_step(monkeypatch) -> Callable[[int, Callable[[], None]], None]:
    """at_step(step, action): in the next run, `action()` is called once step `step` is recorded
    and its progress bar ("train") shows it, before update `step` + 1 is computed; later runs go
    on untouched. The progress bar is the seam: it moves once per step, after the step's record."""
    from tqdm import tqdm

    import dhwt.training.trainer as trainer

    def arm(step: int, action: Callable[[], None]) -> None:
        class Bar(tqdm):
            def __init__(self, *args, **kwargs) -> None:
                super().__init__(*args, **kwargs)
                self.shown = kwargs.get("initial", 0)  # a disabled bar keeps no count
                self.watch = kwargs.get("desc") == "train"

            def update(self, n: float | None = 1) -> bool | None:
                shown = super().update(n)
                self.shown += n or 0
                if self.watch and self.shown == step:
                    monkeypatch.setattr(trainer, "tqdm", tqdm)
                    action()
                return shown

        monkeypatch.setattr(trainer, "tqdm", Bar)
    return arm


@pytest.fixture
def interrupt_at(at_step) -> Callable[[int], None]:
    """interrupt_at(step): the next run dies with KeyboardInterrupt (as if killed) when it is
    about to compute update `step` + 1; later runs go on normally."""
    def interrupt() -> None:
        raise KeyboardInterrupt

    return lambda step: at_step(step, interrupt)


def _assert_same(a: object, b: object) -> None:
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        assert a == b


@pytest.fixture(scope="session")
def assert_same() -> Callable[[object, object], None]:
    """assert_same(a, b): nested checkpoint values (dicts, lists, tuples) equal, tensors bit for
    bit (same dtype, same values)."""
    return _assert_same
