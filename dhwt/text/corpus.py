"""Natural-text corpora with train/valid/test splits: WikiText-2 and the user's own text.

WikiText-2 (v1, the tokenized variant; Merity et al. 2016) is found, in this order, at:
1. the `source` given (flag): a directory holding wiki.{train,valid,test}.tokens (directly or in a
   `wikitext-2/` subfolder) or the archive `wikitext-2-v1.tokens.tar.xz`, or the archive itself;
2. the environment variable WIKITEXT2_PATH (same forms), else DHWT_DATA (a data directory holding
   the archive or the folder, e.g. ../shared/data); WIKITEXT2_PATH, when set, must hold it
   (an error names it otherwise);
3. HF `datasets` (`wikitext`, `wikitext-2-v1`), when installed and able to load it.
Files found on disk are checked against the published SHA-256 sums (a mismatch is an error); the
HF copy has another line layout, so it cannot be checked that way and says so in `origin`.

Any other corpus: a directory with train.txt, valid.txt, test.txt (UTF-8), no checksum to check.
A corpus' `checksum` (dhwt.checksums over its train, valid and test texts) names it in the
token-id cache and in the config.toml of each run trained on it (data_sha256).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

from dhwt.checksums import checksum
from dhwt.errors import DhwtError
from dhwt.filenames import SPLITS

WIKITEXT2 = "wikitext-2"
ARCHIVE = "wikitext-2-v1.tokens.tar.xz"
ARCHIVE_SHA256 = "0dccccff59c622ba2f53c9ab66b045041dec03fbbfcfe74f3e1afdca0f7a89bd"
#: What a WikiText-2 location holds, for messages.
EXPECTED = (f"expected wiki.train/valid/test.tokens (or a {WIKITEXT2}/ folder of them) or the "
            f"archive {ARCHIVE}")
#: Published SHA-256 of each split file (pytorch/examples word_language_model copy, same bytes).
WIKITEXT2_SHA256 = {
    "train": "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f",
    "valid": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
    "test": "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
}


@dataclass(frozen=True)
class Corpus:
    """Raw text of each split, where it came from, and a checksum naming its content."""

    name: str
    texts: dict[str, str]
    origin: str
    checksum: str


def load_corpus(source: str | Path) -> Corpus:
    """`wikitext-2` (found as the module doc says) or a path: a WikiText-2 directory/archive, or
    a directory with train.txt, valid.txt, test.txt."""
    if str(source) == WIKITEXT2:
        return load_wikitext2()
    path = Path(source)
    if not path.exists():
        close = difflib.get_close_matches(str(source), [WIKITEXT2], n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise DhwtError(f"corpus {str(source)!r} is neither {WIKITEXT2} nor an existing path{hint}")
    if path.is_dir() and all((path / f"{s}.txt").is_file() for s in SPLITS):
        raw = {s: (path / f"{s}.txt").read_bytes() for s in SPLITS}
        return _corpus(path.name, raw, f"{path} (train/valid/test.txt, unchecked)")
    found = _wikitext_at(path)
    if found is None:
        raise DhwtError(f"no corpus at {path}: expected a folder with train.txt, valid.txt and "
                        f"test.txt, or WikiText-2 (wiki.train/valid/test.tokens, a {WIKITEXT2}/ "
                        f"folder of them, or the archive {ARCHIVE})")
    return found


def find_corpus(corpus: str | Path, source: str | Path | None = None) -> Corpus:
    """The corpus `corpus` names (load_corpus), WikiText-2 from `source` (where it lies) when
    given: what a run's config names by its corpus and data."""
    if source is not None and str(corpus) == WIKITEXT2:
        return load_wikitext2(source)
    return load_corpus(corpus)


def load_wikitext2(source: str | Path | None = None) -> Corpus:
    """WikiText-2 v1 from `source`, the environment or HF datasets; DhwtError when nowhere."""
    if source is not None:
        found = _wikitext_at(Path(source))
        if found is None:
            raise DhwtError(f"no WikiText-2 at {source}: {EXPECTED}")
        return found
    located = wikitext2_location()
    if located is not None:
        found = _wikitext_at(located)
        if found is None:
            raise DhwtError(f"no WikiText-2 at {located}: {EXPECTED}")
        return found
    hf = _from_hf_datasets()
    if hf is not None:
        return hf
    data = os.environ.get("DHWT_DATA")
    where = f"DHWT_DATA={data}" if data else "WIKITEXT2_PATH and DHWT_DATA are unset"
    raise DhwtError(f"WikiText-2 not found ({where}; HF datasets unavailable): pass its folder or "
                    f"{ARCHIVE} with --data, or set DHWT_DATA to the folder that holds it")


def wikitext2_location() -> Path | None:
    """Where the environment says WikiText-2 lies (module docstring, 2.): the folder of its
    files or its archive, absolute, found (not yet read or checked); None when it says
    nowhere. WIKITEXT2_PATH names WikiText-2 itself: set but holding none, it is an error naming
    it, not skipped. DHWT_DATA is a folder of data that may hold it, or not.
    """
    path = os.environ.get("WIKITEXT2_PATH")
    if path:
        found = _locate(Path(path))
        if found is None:
            raise DhwtError(f"WIKITEXT2_PATH={path} holds no WikiText-2: {EXPECTED}; fix or "
                            "unset WIKITEXT2_PATH")
        return found.resolve()
    data = os.environ.get("DHWT_DATA")
    found = _locate(Path(data)) if data else None
    return None if found is None else found.resolve()


def _wikitext_at(path: Path) -> Corpus | None:
    """The verified corpus at a directory or archive path, or None if it holds none."""
    found = _locate(path)
    if found is None:
        return None
    if found.is_file():
        return _from_archive(found)
    files = {s: found / f"wiki.{s}.tokens" for s in SPLITS}
    return _verified({s: f.read_bytes() for s, f in files.items()}, str(found))


def _locate(path: Path) -> Path | None:
    """The folder of the split files or the archive that `path` holds (or is), else None."""
    if path.is_file() and path.name.endswith(".tar.xz"):
        return path
    if not path.is_dir():
        return None
    for folder in (path, path / WIKITEXT2):
        if all((folder / f"wiki.{s}.tokens").is_file() for s in SPLITS):
            return folder
    if (path / ARCHIVE).is_file():
        return path / ARCHIVE
    return None


def _from_archive(archive: Path) -> Corpus:
    blob = archive.read_bytes()
    if hashlib.sha256(blob).hexdigest() != ARCHIVE_SHA256:
        raise DhwtError(f"checksum mismatch for {archive}: not the WikiText-2 v1 archive "
                        f"(expected sha256 {ARCHIVE_SHA256[:16]}...)")
    raw = {}
    try:
        with tarfile.open(archive, "r:xz") as tar:
            for s in SPLITS:
                member = tar.extractfile(f"{WIKITEXT2}/wiki.{s}.tokens")
                raw[s] = member.read() if member else b""
    except (tarfile.TarError, KeyError, OSError) as exc:
        raise DhwtError(f"cannot read {archive}: {exc}") from None
    return _verified(raw, str(archive))


def _verified(raw: dict[str, bytes], origin: str) -> Corpus:
    for s in SPLITS:
        got = hashlib.sha256(raw[s]).hexdigest()
        if got != WIKITEXT2_SHA256[s]:
            raise DhwtError(f"checksum mismatch for wiki.{s}.tokens in {origin}: sha256 "
                            f"{got[:16]}..., expected {WIKITEXT2_SHA256[s][:16]}...")
    return _corpus(WIKITEXT2, raw, f"{origin} (sha256 verified)")


def _from_hf_datasets() -> Corpus | None:
    """WikiText-2 v1 through HF datasets, or None when the package or the data is unavailable."""
    try:
        import datasets
    except ImportError:
        return None
    try:
        ds = datasets.load_dataset("wikitext", "wikitext-2-v1")
    except Exception:  # offline, no cache, or a changed hub: treat as unavailable
        return None
    hf_names = {"train": "train", "valid": "validation", "test": "test"}
    raw = {s: "".join(ds[hf_names[s]]["text"]).encode() for s in SPLITS}
    return _corpus(WIKITEXT2, raw, "HF datasets wikitext-2-v1 (line layout differs from the "
                                   "archive; sha256 not checked)")


def _corpus(name: str, raw: dict[str, bytes], origin: str) -> Corpus:
    try:
        texts = {s: raw[s].decode("utf-8") for s in SPLITS}
    except UnicodeDecodeError as exc:
        raise DhwtError(f"{origin}: not UTF-8 text ({exc})") from None
    return Corpus(name=name, texts=texts, origin=origin, checksum=checksum(raw[s] for s in SPLITS))
