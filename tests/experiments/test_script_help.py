"""Every experiment script's `--help` opens with its docstring's first paragraph, whole: a
description cut at the docstring's first line break ended mid-sentence."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).parents[2] / "experiments"


def descriptions() -> list[tuple[str, str]]:
    """(script, the description its ArgumentParser gets), for each script whose parser's
    description is computed from its docstring."""
    found = []
    for script in sorted(EXPERIMENTS.rglob("*.py")):
        tree = ast.parse(script.read_text())
        doc = ast.get_docstring(tree, clean=False)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "ArgumentParser":
                for keyword in node.keywords:
                    if keyword.arg == "description" and "__doc__" in ast.unparse(keyword.value):
                        value = eval(ast.unparse(keyword.value), {"__doc__": doc})  # noqa: S307
                        found.append((str(script.relative_to(EXPERIMENTS)), value))
    return found


def test_some_scripts_are_found():
    assert len(descriptions()) >= 10


@pytest.mark.parametrize(("script", "description"), descriptions(),
                         ids=[script for script, _ in descriptions()])
def test_the_description_ends_a_sentence(script, description):
    assert description.rstrip().endswith((".", ":", "?", ")")), description[-60:]
