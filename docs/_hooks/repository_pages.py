"""mkdocs hook: the studies' READMEs with their results, figures, scripts and configs
(experiments/), the theorems (proofs/), the grammar specs (synthetic/) and the package's source
files a page links to (dhwt/) become files of the site where they lie in the repository, so that their own
relative links work and `mkdocs build --strict` checks them. One home for each text: the site
shows these files, it does not copy them into docs/."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
#: The repository's folders shown on the site, and the kinds of file taken from them: a study's
#: README may link to its scripts, configs and results files, or to the package's code, which
#: the site serves as they are.
STUDY_FILES = ("*.md", "*.png", "*.csv", "*.json", "*.jsonl", "*.py", "*.toml", "*.sh")
SHOWN = {"experiments": STUDY_FILES, "proofs": ("*.md",), "synthetic": ("*.md", "*.toml"),
         "dhwt": ("*.py", "*.json")}


def on_files(files: Files, config) -> Files:
    """Add every shown file under its path in the repository."""
    for folder, patterns in SHOWN.items():
        for pattern in patterns:
            for path in sorted((ROOT / folder).rglob(pattern)):
                if "__pycache__" in path.parts:
                    continue
                files.append(File(path.relative_to(ROOT).as_posix(), src_dir=str(ROOT),
                                  dest_dir=config["site_dir"],
                                  use_directory_urls=config["use_directory_urls"]))
    return files
