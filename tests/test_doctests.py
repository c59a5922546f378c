"""Every module under dhwt/ imports, and the Examples in its docstrings run as doctests (#14).

One test per module, found from the files (no module is imported to list them, so a package
that fails to import still has its modules listed, and each of them fails). `dhwt.__main__` is
not collected: importing it runs the command line. A module without examples passes once it
imports. The examples run in a fresh temporary working directory, so one that writes a
relative path cannot write into the repository.

The one skip: a module that imports an optional extra (`pip install 'dhwt[bench]'` or
`'dhwt[text]'`) at import time when that extra is not installed. Any other import error fails.
"""

from __future__ import annotations

import doctest
import importlib
import io
import pkgutil
from pathlib import Path

import pytest

import dhwt

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
#: Top-level import names of the optional extras in pyproject.toml, with their extra.
OPTIONAL = {"faiss": "bench", "transformers": "bench", "tiktoken": "text", "tokenizers": "text"}
NOT_IMPORTED = {"dhwt.__main__"}


def _modules(path: Path, prefix: str) -> list[str]:
    """Names of the modules and packages below `path`, packages recursed into by folder."""
    names = []
    for info in pkgutil.iter_modules([str(path)], prefix):
        names.append(info.name)
        if info.ispkg:
            names += _modules(path / info.name.rpartition(".")[2], info.name + ".")
    return names


MODULES = ["dhwt", *(name for name in _modules(Path(dhwt.__file__).parent, "dhwt.")
                     if name not in NOT_IMPORTED)]


def _import(name: str):  # noqa: ANN202
    """The module, or a skip if an optional extra it imports is missing (nothing else skips)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if top in OPTIONAL:
            pytest.skip(f"{name} imports {top}, of the optional extra "
                        f"'dhwt[{OPTIONAL[top]}]', which is not installed")
        raise


def test_modules_are_found():
    """The walk finds the packages and modules the examples live in."""
    assert {"dhwt.languages.language", "dhwt.models", "dhwt.runs.run",
            "dhwt.directories"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_examples(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    module = _import(name)
    report = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in doctest.DocTestFinder().find(module, name):
        runner.run(test, out=report.write)
    assert runner.failures == 0, (f"{runner.failures} of {runner.tries} examples failed in "
                                  f"{name}:\n{report.getvalue()}")
