"""A small TOML writer for resolved specs (the standard library only reads TOML).

Handles what specs hold: tables, arrays, strings, booleans, integers, floats (nan/inf too).
Top-level values first, then one [table] per nested table; arrays of tables are written inline,
one table per line. tomllib.loads(dumps(d)) == d for such data.
"""

from __future__ import annotations

import json
import math
import re

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def dumps(data: dict) -> str:
    """TOML text for a dict of spec data."""
    lines: list[str] = []
    _table(data, [], lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(data: dict, path: list[str], lines: list[str]) -> None:
    plain = {k: v for k, v in data.items() if not isinstance(v, dict)}
    nested = {k: v for k, v in data.items() if isinstance(v, dict)}
    if path and (plain or not nested):
        lines += ["", f"[{'.'.join(_key(p) for p in path)}]"]
    lines += [f"{_key(k)} = {_value(v, top=True)}" for k, v in plain.items()]
    for key, value in nested.items():
        _table(value, path + [key], lines)


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


def _value(value: object, top: bool = False) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        items = [_value(v) for v in value]
        if top and any(isinstance(v, dict) for v in value):
            return "[\n" + "".join(f"  {item},\n" for item in items) + "]"
        return "[" + ", ".join(items) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")
