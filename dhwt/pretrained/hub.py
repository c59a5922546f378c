"""A checkpoint named by its Hugging Face Hub id, `ORG/NAME[@REVISION]`, fetched as little as
the diagnosis needs: config.json, the tokenizer files, the safetensors index and the weights
that hold the two embedding tensors.

The Hugging Face cache comes first (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/
hub, read when asked, not at import): a snapshot that holds those files is read in place, with
no network. Otherwise, unless HF_HUB_OFFLINE is set, huggingface_hub downloads the small files
into that cache (HF_TOKEN, or a token saved by `hf auth login`, for private and gated models).
A weights file whose other tensors are at least as large as the embeddings is not downloaded:
its safetensors header (8 bytes of length, then JSON with each tensor's byte offsets) is read,
then just the embeddings' byte ranges (ranged reads through huggingface_hub's fsspec file
system), and they are kept as one small safetensors file in dhwt's own store (`slim`), so the
next read is offline too. A smaller file is downloaded whole into the Hugging Face cache.

huggingface_hub comes with the `hub` extra and is imported only here, when an id is read.

Examples:
    >>> parse_hub_id("EleutherAI/pythia-160m@step1000")
    HubId(repo='EleutherAI/pythia-160m', revision='step1000')
    >>> parse_hub_id("gpt2") is None, parse_hub_id("runs/a/b") is None  # one slash, no more
    (True, True)
    >>> parse_hub_id("./org/name") is None  # written as a path: always a path
    True
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import struct
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from dhwt.errors import DhwtError, reason
from dhwt.pretrained.layouts import find_layout
from dhwt.pretrained.reader import CONFIG, INDEX, TOKENIZER, read_weight_map

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

WEIGHTS = "model.safetensors"
#: Tokenizer files fetched beside tokenizer.json (the one dhwt reads), so a fetched folder
#: is as a tokenizer loader expects it.
TOKENIZER_FILES = (TOKENIZER, "tokenizer_config.json", "special_tokens_map.json")
#: The store's record of how a slim checkpoint was read.
RECORD = "hub.json"
#: The slim checkpoint's one weights file.
SLIM = "embeddings.safetensors"
#: Bytes per ranged read (the progress bar moves once per chunk).
CHUNK = 8 << 20
_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>\S+))?")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_TRUE = {"1", "on", "yes", "true"}


@dataclass(frozen=True)
class HubId:
    """A model on the Hugging Face Hub; revision None: the default branch."""

    repo: str
    revision: str | None

    def __str__(self) -> str:
        return self.repo + (f"@{self.revision}" if self.revision else "")


@dataclass(frozen=True)
class Fetched:
    """A local checkpoint folder for `hub_id` (read it with read_checkpoint) and notes on how it
    was had."""

    hub_id: HubId
    folder: Path
    notes: tuple[str, ...] = ()


def parse_hub_id(text: str) -> HubId | None:
    """`text` as a Hub id `ORG/NAME[@REVISION]`, or None if it cannot be one."""
    match = _ID.fullmatch(text)
    if match is None or ".." in match["repo"] or "--" in match["repo"]:
        return None
    return HubId(match["repo"], match["revision"])


def hub_id_of(text: str) -> HubId | None:
    """`text` as a Hub id where it is meant as one: never where a path of that name exists, nor
    where its ORG part is a folder here (`runs/untied` mistyped is a missing path, not a
    model to look for on the Hub)."""
    if Path(text).exists() or Path(text.partition("/")[0]).is_dir():
        return None
    return parse_hub_id(text)


def hub_cache() -> Path:
    """The Hugging Face cache folder as huggingface_hub finds it, from the environment now."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME")
                                             or Path.home() / ".cache") / "huggingface"
    return Path(home).expanduser() / "hub"


def offline() -> bool:
    """Whether HF_HUB_OFFLINE (or the older TRANSFORMERS_OFFLINE) forbids the network."""
    return any(os.environ.get(name, "").strip().lower() in _TRUE
               for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def fetch(hub_id: HubId, store: Path, fs: AbstractFileSystem | None = None) -> Fetched:
    """A local checkpoint folder for `hub_id`: a snapshot of the Hugging Face cache that holds
    what the diagnosis reads, else a slim checkpoint in `store` fetched before, else (online)
    fetched now (see the module doc). `fs`: the fsspec file system to read ranges from (default
    huggingface_hub's HfFileSystem). DhwtError in one line for each way this fails."""
    try:
        import huggingface_hub
    except ImportError:
        raise DhwtError(f"{hub_id} is not a path here; read as a Hugging Face Hub id it needs "
                        "huggingface_hub: pip install 'dhwt[hub]'") from None
    cache, local = hub_cache(), offline()
    folder = _cached(huggingface_hub, hub_id, cache)
    if folder is not None:
        return Fetched(hub_id, folder)
    slim = _slim_fetched(hub_id, cache, store)
    if slim is not None:
        return slim
    if local:
        raise DhwtError(f"{hub_id} is not a path here, and as a Hugging Face Hub id it is not in "
                        f"the cache ({cache}) while HF_HUB_OFFLINE is set; fetch it once online "
                        "or give a checkpoint folder")
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    if not sys.stderr.isatty():  # its retries (30 s without a network) shown on a terminal only
        hub_logger.setLevel(logging.ERROR)
    try:
        return _download(huggingface_hub, hub_id, cache, store, fs)
    except DhwtError:
        raise
    except Exception as exc:  # huggingface_hub and httpx raise their own types
        raise _hub_error(exc, hub_id, cache) from None
    finally:
        hub_logger.setLevel(level)


@dataclass(frozen=True)
class Header:
    """A safetensors file's header: each tensor's entry (dtype, shape, data_offsets from
    `start`), where the data starts, and the file's size."""

    path: str
    entries: dict[str, Any]
    start: int
    size: int

    def span(self, name: str) -> tuple[int, int]:
        """Where the tensor `name`'s bytes begin and end, from `start`; DhwtError if the header
        has no such tensor or gives it no dtype, shape and offsets inside the file."""
        entry = self.entries.get(name)
        if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
            raise DhwtError(f"{self.path} does not hold the tensor {name} (its header lists "
                            "no dtype, shape and data_offsets for it)")
        offsets = entry["data_offsets"]
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1] <= self.size - self.start):
            raise DhwtError(f"{self.path}: the header gives {name} the byte offsets {offsets!r}, "
                            "not a range inside the file")
        return offsets[0], offsets[1]

    def nbytes(self, names: Iterable[str]) -> int:
        """The bytes the tensors `names` take."""
        return sum(end - begin for begin, end in map(self.span, names))


def read_header(fs: AbstractFileSystem, path: str) -> Header:
    """The header of the safetensors file `path` on the fsspec file system `fs`, read by two
    ranged reads (its 8-byte length, then the JSON)."""
    size = fs.size(path)
    with fs.open(path, "rb", cache_type="none") as f:
        head = f.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else size
        if length > size - 8:
            raise DhwtError(f"{path} is not a safetensors file (its first 8 bytes give no header "
                            "length that fits the file)")
        try:
            entries = json.loads(f.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DhwtError(f"cannot read the safetensors header of {path}: {reason(exc)}"
                            ) from None
    if not isinstance(entries, dict):
        raise DhwtError(f"{path} is not a safetensors file (its header is no JSON object)")
    entries.pop("__metadata__", None)
    return Header(path, entries, 8 + length, size)


def read_ranges(fs: AbstractFileSystem, path: str, header: Header, names: Iterable[str],
                desc: str = "") -> bytes:
    """The tensors `names` of the safetensors file `path` (whose header is `header`) on the
    fsspec file system `fs`, read by their byte ranges in chunks under a progress bar, as the
    bytes of a safetensors file that holds only them.

    Examples:
        >>> import fsspec, tempfile, torch
        >>> from safetensors.torch import load, save_file
        >>> file = str(Path(tempfile.mkdtemp()) / "model.safetensors")
        >>> save_file({"wte": torch.ones(4, 2), "h.0": torch.zeros(1000, 10)}, file)
        >>> fs = fsspec.filesystem("file")
        >>> header = read_header(fs, file)
        >>> header.start + header.nbytes(["wte"]), header.size  # bytes to read, of the file's
        (176, 40176)
        >>> load(read_ranges(fs, file, header, ["wte"]))["wte"].shape
        torch.Size([4, 2])
    """
    from tqdm import tqdm

    names = list(names)
    parts, out, offset = [], {}, 0
    with fs.open(path, "rb", cache_type="none") as f, \
            tqdm(total=header.nbytes(names), desc=desc or "embeddings", unit="B",
                 unit_scale=True, disable=None, leave=False) as bar:
        for name in names:
            entry = header.entries[name]
            begin, end = header.span(name)
            f.seek(header.start + begin)
            for at in range(begin, end, CHUNK):
                chunk = f.read(min(CHUNK, end - at))
                if len(chunk) != min(CHUNK, end - at):
                    raise DhwtError(f"{path} ends inside the tensor {name}")
                parts.append(chunk)
                bar.update(len(chunk))
            out[name] = {"dtype": entry["dtype"], "shape": entry["shape"],
                         "data_offsets": [offset, offset + end - begin]}
            offset += end - begin
    text = json.dumps(out).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(parts)


def _cached(hf: ModuleType, hub_id: HubId, cache: Path) -> Path | None:
    """The cache's snapshot folder of `hub_id` if it holds config.json and the weights of both
    embedding tensors."""
    def have(name: str) -> Path | None:
        found = hf.try_to_load_from_cache(hub_id.repo, name, cache_dir=cache,
                                          revision=hub_id.revision)
        return Path(found) if isinstance(found, str) else None

    config = have(CONFIG)
    if config is None:
        return None
    index = have(INDEX)
    if index is not None:
        weight_map = read_weight_map(index)
        files = _embedding_files(weight_map)
        return config.parent if all(have(file) for file in files) else None
    return config.parent if have(WEIGHTS) else None


def _slim_fetched(hub_id: HubId, cache: Path, store: Path) -> Fetched | None:
    """The slim checkpoint of `hub_id` in `store`, if fetched before (its commit from the
    cache's refs/ when the revision is a name)."""
    commit = _commit(hub_id, cache)
    folder = _slim_folder(store, hub_id.repo, commit) if commit else None
    if folder is None or not (folder / RECORD).is_file():
        return None
    try:
        notes = json.loads((folder / RECORD).read_text(encoding="utf-8"))["notes"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        return None  # not as dhwt wrote it: fetched again
    return Fetched(hub_id, folder, tuple(notes))


def _commit(hub_id: HubId, cache: Path) -> str | None:
    revision = hub_id.revision or "main"
    if _COMMIT.fullmatch(revision):
        return revision
    ref = cache / _repo_folder(hub_id.repo) / "refs" / revision
    return ref.read_text(encoding="utf-8").strip() if ref.is_file() else None


def _repo_folder(repo: str) -> str:
    return "models--" + repo.replace("/", "--")


def _slim_folder(store: Path, repo: str, commit: str) -> Path:
    return store / _repo_folder(repo) / commit


def _download(hf: ModuleType, hub_id: HubId, cache: Path, store: Path,
              fs: AbstractFileSystem | None) -> Fetched:
    """Fetch config.json, the tokenizer files, the index and the embeddings (module doc)."""
    def download(name: str) -> Path:
        return Path(hf.hf_hub_download(hub_id.repo, name, revision=hub_id.revision,
                                       cache_dir=cache))

    def optional(name: str) -> Path | None:
        try:
            return download(name)
        except hf.errors.EntryNotFoundError as exc:  # not on the Hub; not in the cache: raised
            if isinstance(exc, hf.errors.LocalEntryNotFoundError):
                raise
            return None

    config = optional(CONFIG)
    if config is None:
        raise DhwtError(f"{hub_id} on the Hugging Face Hub has no {CONFIG}: not a transformers "
                        "model")
    snapshot, commit = config.parent, config.parent.name
    for name in TOKENIZER_FILES:
        optional(name)
    index = optional(INDEX)
    if index is not None:
        weight_map = read_weight_map(index)
        found = find_layout(weight_map)
        by_file: dict[str, list[str]] = {}
        for name in (found.input, found.output):
            if name is not None:
                by_file.setdefault(weight_map[name], []).append(name)
    else:
        by_file = {WEIGHTS: []}
    fs = fs if fs is not None else hf.HfFileSystem()
    headers = {}
    for file, names in by_file.items():
        try:
            headers[file] = read_header(fs, f"{hub_id.repo}@{commit}/{file}")
        except FileNotFoundError:
            raise DhwtError(f"{hub_id} on the Hugging Face Hub has no safetensors weights "
                            f"({WEIGHTS} or {INDEX}); dhwt reads safetensors checkpoints"
                            ) from None
        if not names:  # one model.safetensors: the layout from its header
            found = find_layout(headers[file].entries)
            names += [name for name in (found.input, found.output) if name is not None]
    wanted = sum(headers[file].nbytes(names) for file, names in by_file.items())
    if sum(header.size for header in headers.values()) <= 2 * wanted:
        for file in by_file:  # mostly embeddings: cached whole, for other tools too
            download(file)
        return Fetched(hub_id, snapshot)
    slim, notes = {}, []
    for file, names in by_file.items():
        header = headers[file]
        slim[file] = read_ranges(fs, f"{hub_id.repo}@{commit}/{file}", header, names, file)
        read = header.start + header.nbytes(names)
        notes.append(f"read {_size(read)} of {file} ({_size(header.size)}) by byte ranges: "
                     f"{_size(header.size - read)} not downloaded")
    return Fetched(hub_id, _write_slim(store, hub_id, commit, snapshot, slim, notes),
                   tuple(notes))


def _write_slim(store: Path, hub_id: HubId, commit: str, snapshot: Path, slim: dict[str, bytes],
                notes: list[str]) -> Path:
    """The slim checkpoint folder in `store`: config.json and the tokenizer files copied from
    the snapshot, the embeddings in one safetensors file (two when they lie in two shards, as
    shard-NAME), made in a hidden folder beside it and renamed into place whole."""
    folder = _slim_folder(store, hub_id.repo, commit)
    staging = folder.with_name(f".{commit}.staging-{os.getpid()}")
    try:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for name in (CONFIG, *TOKENIZER_FILES):
            if (snapshot / name).is_file():
                shutil.copyfile(snapshot / name, staging / name)
        for i, data in enumerate(slim.values()):
            (staging / (SLIM if i == 0 else f"{i}-{SLIM}")).write_bytes(data)
        (staging / RECORD).write_text(json.dumps({"repo": hub_id.repo, "commit": commit,
                                                  "notes": notes}, indent=1) + "\n",
                                      encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(staging, folder)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise DhwtError(f"cannot keep the embeddings of {hub_id} in {store}: "
                        f"{exc.strerror or exc}") from None
    return folder


def _embedding_files(weight_map: dict[str, str]) -> set[str]:
    found = find_layout(weight_map)
    return {weight_map[name] for name in (found.input, found.output) if name is not None}


def _hub_error(exc: Exception, hub_id: HubId, cache: Path) -> DhwtError:
    """One line for a failure of huggingface_hub to fetch `hub_id`."""
    from huggingface_hub import errors

    repo = hub_id.repo
    if isinstance(exc, errors.GatedRepoError):
        return DhwtError(f"{repo} on the Hugging Face Hub is gated: accept its terms at "
                         f"https://huggingface.co/{repo} and give a token with access (HF_TOKEN "
                         "or `hf auth login`)")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return DhwtError(f"{hub_id} is not a path here, and the Hugging Face Hub has no model "
                         f"{repo} (a private one needs a token: HF_TOKEN or `hf auth login`)")
    if isinstance(exc, errors.RevisionNotFoundError):
        return DhwtError(f"the Hugging Face Hub model {repo} has no revision "
                         f"{hub_id.revision or 'main'!r} (a branch, tag or commit)")
    while exc.__cause__ is not None or exc.__context__ is not None:  # the network's own words
        exc = exc.__cause__ or exc.__context__
    return DhwtError(f"{hub_id} is not a path here, and as a Hugging Face Hub id it is not in "
                     f"the cache ({cache}) and the Hub cannot be reached ({reason(exc)})")


def _size(n: int) -> str:
    """Bytes for a reader.

    Examples:
        >>> _size(512), _size(3_500_000), _size(2_000_000_000)
        ('512 B', '3.5 MB', '2.0 GB')
    """
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
