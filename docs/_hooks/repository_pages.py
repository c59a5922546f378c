"""mkdocs hook: the studies' READMEs, results and figures (experiments/), the theorems (proofs/),
the grammar format (synthetic/README.md) and the calibration table a study links to become pages of the site where they lie, so that
their own relative links work and `mkdocs build --strict` checks them. One home for each text:
the site shows these files, it does not copy them into docs/."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
#: The repository's folders shown on the site, and the kinds of file taken from them.
SHOWN = {"experiments": ("*.md", "*.png"), "proofs": ("*.md",), "synthetic": ("README.md",),
         "dhwt/analysis": ("dh_calibration.json",)}


def on_files(files: Files, config) -> Files:
    """Add every shown file under its path in the repository."""
    for folder, patterns in SHOWN.items():
        for pattern in patterns:
            for path in sorted((ROOT / folder).rglob(pattern)):
                files.append(File(path.relative_to(ROOT).as_posix(), src_dir=str(ROOT),
                                  dest_dir=config["site_dir"],
                                  use_directory_urls=config["use_directory_urls"]))
    return files
