"""The command line as a package (issue 31 item 4): one module per command, the options several
commands share declared once (dhwt.cli.options), every command registered on the group."""

from __future__ import annotations

import ast
from importlib import import_module
from pathlib import Path

from dhwt.cli import cli

ROOT = Path(__file__).resolve().parents[2]
SHARED = {"--k", "--metric", "--seed", "--device", "--json"}


def _declared(source: str) -> set[str]:
    """The option names a module declares with click.option."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "option" and node.args
                and isinstance(node.args[0], ast.Constant)):
            found.add(node.args[0].value)
    return found


def test_shared_options_are_declared_once():
    assert _declared('@click.option("--k", type=int)\ndef f(): pass') == {"--k"}
    package = ROOT / "dhwt" / "cli"
    for module in sorted(package.glob("*.py")):
        if module.name != "options.py":
            assert not _declared(module.read_text("utf-8")) & SHARED, module.name
    assert _declared((package / "options.py").read_text("utf-8")) == SHARED


def test_one_module_per_command_and_one_entry_point_name():
    """dhwt.cli.NAME holds the options of `dhwt NAME`; dhwt.commands.NAME.NAME_command is what
    it does."""
    modules = {p.stem for p in (ROOT / "dhwt" / "cli").glob("*.py")} - {
        "__init__", "group", "options"}
    assert modules == {name.replace("-", "_") for name in cli.commands}
    for name, command in cli.commands.items():
        module = name.replace("-", "_")
        assert command.callback.__module__ == f"dhwt.cli.{module}"
        assert callable(getattr(import_module(f"dhwt.commands.{module}"), f"{module}_command"))
