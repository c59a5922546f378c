"""A report as two files side by side: report.md (plain text that diffs and greps well) and
report.html, the same document self-contained: its figures embedded as data URIs and its style
inline, so it opens offline in any browser and travels as one file.

Every dhwt report (run, study, analyze, diagnose, corpus-dh) is written here, the HTML first and
the markdown last: a run's report.md marks the run finished, so it must not appear before the
page does.
"""

from __future__ import annotations

import base64
import html
import mimetypes
from pathlib import Path
from xml.etree import ElementTree

from dhwt.directories import atomic_write_bytes

STYLE = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222;
       max-width: 72rem; margin: 2rem auto; padding: 0 1.5rem; }
h1, h2, h3 { line-height: 1.25; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: .25rem .6rem; }
th { background: #f2f2f2; } tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; height: auto; display: block; margin: 1rem 0; }
code { background: #f4f4f4; padding: 0 .2rem; border-radius: 3px; }
pre { background: #f4f4f4; padding: .8rem; overflow-x: auto; } pre code { padding: 0; }
"""


def write_document(path: str | Path, text: str) -> Path:
    """Write `text` (markdown) to `path` (report.md) and its page to report.html beside it, each
    atomically; figures are read from the paths the markdown gives, relative to the report.

    Examples:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> write_document(folder / "report.md",
        ...                "# Title\\n\\n| a | b |\\n|---|---|\\n| 1 | 2 |\\n")
        PosixPath('...report.md')
        >>> "<td>1</td>" in (folder / "report.html").read_text()
        True
    """
    path = Path(path)
    atomic_write_bytes(path.with_suffix(".html"), to_html(text, path.parent).encode("utf-8"))
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def to_html(text: str, folder: Path) -> str:
    """The page of markdown `text` whose relative image paths are under `folder`: each image that
    exists embedded as a data URI; a missing one keeps its path (the page says so in its alt
    text) rather than failing the report."""
    import markdown

    converter = markdown.Markdown(extensions=["tables", "fenced_code"], output_format="html")
    converter.treeprocessors.register(_Embed(folder), "dhwt-embed", 0)
    body = converter.convert(text)
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")),
                 "dhwt report")
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n"
            f"<body>\n{body}\n</body>\n</html>\n")


def _embedded(folder: Path, source: str) -> str | None:
    """`source` (a path relative to `folder`) as a data URI, or None if it is not a file there."""
    if ":" in source or source.startswith("/"):
        return None  # already a URI or an absolute path: left as written
    file = folder / source
    if not file.is_file():
        return None
    kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    return f"data:{kind};base64,{base64.b64encode(file.read_bytes()).decode('ascii')}"


class _Embed:
    """A Python-Markdown tree processor: images become data URIs (see to_html)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def run(self, root: ElementTree.Element) -> None:
        for image in root.iter("img"):
            source = image.get("src", "")
            data = _embedded(self.folder, source)
            if data is not None:
                image.set("src", data)
            elif ":" not in source:
                image.set("alt", f"{image.get('alt', '')} (missing: {source})")
