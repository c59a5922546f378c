"""Token ids of a corpus on disk, as read-only numpy memmaps keyed by (corpus checksum, tokenizer).

Layout: CACHE/tokens/<corpus>-<checksum[:16]>-<tokenizer fingerprint>/{train,valid,test}.bin
(uint16 when the vocabulary fits, else uint32) and meta.json. A new entry is written into a
temporary folder and renamed into place, so a killed process never leaves a half-written entry;
an entry whose files do not match its meta.json is rebuilt. CACHE is `cache_dir`, else the
environment variable DHWT_CACHE, else ~/.cache/dhwt. Trained BPE models live in CACHE/tokenizers.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dhwt.errors import DhwtError
from dhwt.text.corpus import SPLITS, Corpus
from dhwt.text.tokenizers import TextTokenizer, make_tokenizer


@dataclass(frozen=True)
class TokenIds:
    """A tokenized corpus: ids per split (memmaps), the tokenizer's vocabulary, the entry path."""

    ids: dict[str, np.ndarray]
    vocab: tuple[str, ...]
    path: Path


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """Where token ids and trained tokenizers are cached."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get("DHWT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "dhwt"


def tokenize_corpus(corpus: Corpus, tokenizer: str, cache_dir: str | Path | None = None) -> TokenIds:
    """The token ids of every split of `corpus` under `tokenizer` (a name for make_tokenizer),
    from the cache or computed once and stored."""
    root = cache_root(cache_dir)
    model_dir = root / "tokenizers" / f"{corpus.name}-{corpus.checksum[:16]}"
    tok = make_tokenizer(tokenizer, corpus.texts["train"], model_dir)
    entry = root / "tokens" / f"{corpus.name}-{corpus.checksum[:16]}-{tok.fingerprint}"
    cached = _read_entry(entry, corpus, tok)
    if cached is None:
        _write_entry(entry, corpus, tok)
        cached = _read_entry(entry, corpus, tok)
        if cached is None:
            raise DhwtError(f"token cache {entry} could not be read back after writing")
    return TokenIds(ids=cached, vocab=tok.vocab, path=entry)


def _dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


def _read_entry(entry: Path, corpus: Corpus, tok: TextTokenizer) -> dict[str, np.ndarray] | None:
    """The memmaps of a complete, consistent entry, else None."""
    try:
        meta = json.loads((entry / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    dtype = _dtype(tok.vocab_size)
    if (meta.get("checksum") != corpus.checksum or meta.get("fingerprint") != tok.fingerprint
            or meta.get("dtype") != dtype.name or meta.get("vocab_size") != tok.vocab_size):
        return None
    ids = {}
    for split in SPLITS:
        path, length = entry / f"{split}.bin", meta["lengths"].get(split)
        if not path.is_file() or path.stat().st_size != length * dtype.itemsize:
            return None
        ids[split] = (np.memmap(path, dtype=dtype, mode="r", shape=(length,)) if length
                      else np.zeros(0, dtype))
    return ids


def _write_entry(entry: Path, corpus: Corpus, tok: TextTokenizer) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = entry.with_name(f".{entry.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    dtype = _dtype(tok.vocab_size)
    lengths = {}
    try:
        for split in SPLITS:
            ids = tok.encode(corpus.texts[split])
            ids.astype(dtype).tofile(tmp / f"{split}.bin")
            lengths[split] = int(len(ids))
        meta = {"corpus": corpus.name, "checksum": corpus.checksum, "origin": corpus.origin,
                "tokenizer": tok.name, "fingerprint": tok.fingerprint,
                "vocab_size": tok.vocab_size, "dtype": dtype.name, "lengths": lengths}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        shutil.rmtree(entry, ignore_errors=True)  # a stale or damaged entry
        os.replace(tmp, entry)
    except OSError as exc:
        raise DhwtError(f"cannot write the token cache {entry}: {exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
