"""Grammar specs as text: find one by built-in name or path, parse its TOML, apply `--set`
overrides. Checking what the spec says is the families' job (parity.py, automaton.py).

Built-in specs are package data of `dhwt.synthetic` (the repository's synthetic/ folder), read
through importlib.resources so they resolve from an installed wheel as well as from a checkout.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path

from dhwt.errors import DhwtError
from dhwt.filenames import SPEC
from dhwt.userfiles import parse_toml

BUILTIN_PACKAGE = "dhwt.synthetic"


def builtin_names() -> tuple[str, ...]:
    """Names of the built-in specs (`parity`, ...), sorted."""
    files = resources.files(BUILTIN_PACKAGE).iterdir()
    return tuple(sorted(f.name.removesuffix(".toml") for f in files if f.name.endswith(".toml")))


def read_spec(name_or_path: str) -> tuple[str, dict]:
    """(default language name, parsed TOML) of a built-in name or a path to a TOML file."""
    names = builtin_names()
    if name_or_path in names:
        text = (resources.files(BUILTIN_PACKAGE) / f"{name_or_path}.toml").read_text("utf-8")
        return name_or_path, parse_toml(text, f"built-in grammar {name_or_path!r}")
    path = Path(name_or_path)
    if path.is_dir():
        spec = path / SPEC  # a dataset directory's copy of its grammar
        hint = f"; its dataset's grammar is {str(spec)!r}" if spec.is_file() else ""
        raise DhwtError(f"grammar {name_or_path!r} is a directory, not a grammar TOML{hint}")
    if not path.is_file():
        looks_like_path = path.suffix == ".toml" or len(path.parts) > 1
        problem = "no such file" if looks_like_path else "neither a built-in name nor a file"
        raise DhwtError(f"unknown grammar {name_or_path!r} ({problem}); built-in grammars: "
                        f"{', '.join(names)}, or give a path to a TOML spec")
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DhwtError(f"cannot read grammar file {str(path)!r}: {exc}") from None
    return path.stem, parse_toml(text, f"grammar file {str(path)!r}")


def parse_assignments(items: Iterable[str]) -> dict[str, object]:
    """`KEY=VALUE` strings (from `--set`) as {dotted key: value}. VALUE is read as a TOML value
    (`5`, `0.8`, `[0.1, 0.9]`, `"x"`, `false`); anything that is not one is taken as a string."""
    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise DhwtError(f"--set takes KEY=VALUE (e.g. n_bits=5), got {item!r}")
        try:
            out[key] = tomllib.loads(f"v = {value.strip()}")["v"]
        except (tomllib.TOMLDecodeError, RecursionError):
            out[key] = value.strip()
    return out


def apply_overrides(spec: dict, overrides: Mapping[str, object]) -> dict:
    """A copy of `spec` with each dotted key set (`classes.1.skew`, `states.s.0.p`; integer
    segments index arrays). Missing tables are created; the families then reject unknown keys.
    In a class table `p` and `skew` are two spellings of the same thing, so setting one drops
    the other."""
    spec = copy.deepcopy(spec)
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        if any(not p for p in parts):
            raise DhwtError(f"--set key {dotted!r} has an empty segment")
        node: object = spec
        for depth, part in enumerate(parts[:-1]):
            node = _step(node, part, parts[: depth + 1], dotted)
        last = parts[-1]
        if isinstance(node, list):
            node[_index(node, last, dotted)] = value
            continue
        if len(parts) == 3 and parts[0] == "classes" and last in ("p", "skew"):
            node.pop("skew" if last == "p" else "p", None)
        node[last] = value
    return spec


def _step(node: object, part: str, path: list[str], dotted: str) -> object:
    """One level down a dotted key, creating a table where the spec has none."""
    if isinstance(node, list):
        return node[_index(node, part, dotted)]
    if not isinstance(node, dict):
        raise DhwtError(f"--set {dotted}: {'.'.join(path[:-1])!r} is a value, not a table")
    child = node.setdefault(part, {})
    if not isinstance(child, (dict, list)):
        raise DhwtError(f"--set {dotted}: {'.'.join(path)!r} is a value, not a table")
    return child


def _index(node: list, part: str, dotted: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise DhwtError(f"--set {dotted}: {part!r} is not an index of an array of {len(node)}")
    return int(part)
