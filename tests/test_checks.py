"""One module of checks (dhwt.checks) and one home for the command line's defaults
(dhwt.defaults): both import without torch, the CLI restates no default, and the curated
top-level API (dhwt.__all__) resolves."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dhwt
from dhwt.checks import Integer, check_fields, check_matrix, check_int, need_int, parse_seeds
from dhwt.errors import DhwtError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("gone", ["dhwt.config.checks", "dhwt.languages.checks"])
def test_the_checks_have_one_module(gone):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(gone)
    assert parse_seeds("1-3") == [1, 2, 3]
    with pytest.raises(DhwtError, match="n_bits must be an integer from 1 to 20, got int 0"):
        need_int(0, "n_bits", 1, 20)
    with pytest.raises(DhwtError, match="steps must be >= 1, got 0"):
        check_int("steps", 0, low=1)


@pytest.mark.slow
def test_checks_defaults_cli_and_the_top_level_import_no_torch():
    code = ("import sys, dhwt, dhwt.checks, dhwt.defaults, dhwt.cli; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert out == "False\n"


def test_a_matrix_read_backwards_is_checked_as_any_other():
    """torch cannot view negative strides; the check once failed with its ValueError."""
    x = np.arange(12.0).reshape(4, 3)
    assert check_matrix(x[::-1, ::-1], "A").shape == (4, 3)
    with pytest.raises(DhwtError, match="NaN or infinite"):
        check_matrix(np.where(x == 5, np.nan, x)[::-1], "A")


def _restated(source: str) -> list[str]:
    """Options of `source` whose default is a number other than 0, or whose choices are a
    literal list: values that have a home elsewhere (dhwt.defaults)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(
            node.func, "id", "")
        if name == "Choice" and node.args and isinstance(node.args[0], (ast.List, ast.Tuple)):
            found.append(f"line {node.lineno}: Choice of a literal list")
        for keyword in node.keywords if name == "option" else ():
            value = keyword.value
            if (keyword.arg == "default" and isinstance(value, ast.Constant)
                    and type(value.value) in (int, float) and value.value != 0):
                found.append(f"line {node.lineno}: default {value.value!r}")
    return found


def test_the_cli_restates_no_default():
    assert _restated('@click.option("--seed", type=int, default=14)\ndef f(): pass') == [
        "line 1: default 14"]
    assert _restated('click.option("--m", type=click.Choice(["ip", "cos"]))') == [
        "line 1: Choice of a literal list"]
    for module in sorted((ROOT / "dhwt" / "cli").glob("*.py")):
        assert _restated(module.read_text("utf-8")) == [], module.name


def test_the_top_level_api_resolves_to_its_homes():
    assert {"load_run", "train_run", "train_group", "run_study", "StudyConfig", "knn_match",
            "analyze", "diagnose_path", "corpus_dh"} <= set(dhwt.__all__)
    for name in dhwt.__all__:
        value = getattr(dhwt, name)
        assert value.__name__ == name and value.__module__.startswith("dhwt.")
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        dhwt.nothing  # noqa: B018


def _options_classes() -> list[type]:
    """Every `*Options` class of dhwt and every class that declares CONSTRAINTS, found in the
    source (a new one is checked too)."""
    found = []
    for path in sorted((ROOT / "dhwt").rglob("*.py")):
        for node in ast.parse(path.read_text("utf-8")).body:
            declares = isinstance(node, ast.ClassDef) and any(
                isinstance(item, ast.Assign) and any(getattr(t, "id", "") == "CONSTRAINTS"
                                                     for t in item.targets)
                for item in node.body)
            if declares or (isinstance(node, ast.ClassDef) and node.name.endswith("Options")):
                module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                found.append(getattr(importlib.import_module(module), node.name))
    return found


def test_every_options_class_declares_the_constraints_of_each_field():
    classes = _options_classes()
    assert {"ModelConfig", "KnnOptions", "DiagnoseOptions"} <= {c.__name__ for c in classes}
    for cls in classes:
        names = {f.name for f in dataclasses.fields(cls)}
        assert set(cls.CONSTRAINTS) == names, cls.__name__
        assert "check_fields(self, self.CONSTRAINTS)" in inspect.getsource(cls.__post_init__)


def test_a_field_without_a_constraint_is_a_mistake_of_its_class():
    @dataclasses.dataclass(frozen=True)
    class Options:
        k: int = 1
        seed: int = 0

    with pytest.raises(TypeError, match="Options.seed declares no constraint"):
        check_fields(Options(), {"k": [Integer(1)]})


@pytest.mark.parametrize("args, message", [
    (["knn", "a.npy", "b.npy", "--k", "0"], "k must be >= 1, got 0"),
    (["knn", "a.npy", "b.npy", "--device", "gpu"], "device must be one of"),
    (["diagnose", ".", "--step", "4.5"], "step must be a whole number or 'last', got '4.5'"),
    (["diagnose", ".", "--queries", "some"],
     "queries must be a whole number or 'auto' or 'all', got 'some'"),
    (["diagnose", ".", "--queries", "0"], "queries must be >= 1, got 0"),
    (["diagnose", ".", "--chance-queries", "-1"], "chance_queries must be >= 0, got -1"),
    (["export", ".", "--to", "hf", "--out", "x", "--member", "-1"],
     "member must be >= 0, got -1"),
    (["corpus-dh", "--grammar", "parity", "--null-bins", "0"], "null_bins must be >= 1, got 0"),
    (["corpus-dh", "--grammar", "parity", "--order", "-2"],
     "order must be a whole number or 'full', got '-2'"),
    (["analyze", ".", "--out", "r", "--members", "0,0"], "bad --members '0,0'"),
])
def test_an_option_out_of_range_is_refused_before_anything_is_read(args, message, cli,
                                                                     tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing named exists: the options are checked first
    code, out, err = cli(args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
