"""The one rule that turns a data source named in a flag, a config file or a study file into
what the run records: a built-in grammar name, the corpus name `wikitext-2`, or an absolute path.

A built-in name stays that name even where a file of that name exists (write `./NAME` for the
file). Any other relative path is taken from `base`, the folder of the study file that names it,
where it exists there, else from the working directory. A grammar or corpus that names nothing
that exists is left as given, so the error that follows names what was written.

Examples:
    >>> import os
    >>> from dhwt.config.sources import resolve_source
    >>> resolve_source("grammar", "parity")
    'parity'
    >>> resolve_source("data", "my-data") == os.path.abspath("my-data")
    True
"""

from __future__ import annotations

from pathlib import Path

from dhwt.languages.spec import builtin_names
from dhwt.text.corpus import WIKITEXT2

def resolve_source(key: str, value: str, base: Path | None = None) -> str:
    """`value` of the setting `key` (one of dhwt.config.run.SOURCES: grammar, data or corpus) by
    the module's rule."""
    if (key == "grammar" and value in builtin_names()) or (key == "corpus" and value == WIKITEXT2):
        return value
    path = Path(value).expanduser()
    if not path.is_absolute() and base is not None and (base / path).exists():
        path = base / path
    if key != "data" and not path.exists():
        return value
    return str(path.resolve())
