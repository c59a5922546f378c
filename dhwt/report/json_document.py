"""JSON from a command's result: the one serialiser behind every `--json` and every .json file a
report writes, so the printed document and the written one are the same bytes.

Numbers from numpy become plain ones, arrays and tuples lists, paths strings, dataclasses their
fields; NaN becomes null (JSON has no NaN).

Examples:
    >>> import numpy as np
    >>> print(json_text({"k": np.int64(3), "means": np.array([0.5, np.nan]), "run": ("a",)}))
    {
     "k": 3,
     "means": [
      0.5,
      null
     ],
     "run": [
      "a"
     ]
    }
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path, PurePath

import numpy as np

from dhwt.directories import atomic_write_bytes


def plain(value: object) -> object:
    """`value` as JSON-ready data (dicts, lists, str, int, float, bool, None)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, PurePath):
        return str(value)
    return value


def json_text(document: object) -> str:
    """The document as indented JSON text (what `--json` prints)."""
    return json.dumps(plain(document), indent=1)


def write_json(path: Path, document: object) -> Path:
    """Write the document's json_text (and a newline) to `path` atomically; return `path`."""
    atomic_write_bytes(path, (json_text(document) + "\n").encode("utf-8"))
    return path
