"""Corpora, tokenizers and the token-id cache on small text the tests make; one test reads the
real WikiText-2 archive from ../shared/data (skipped when it is absent)."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from dhwt.errors import DhwtError
from dhwt.text import corpus as corpus_module
from dhwt.text.corpus import load_corpus, load_wikitext2
from dhwt.text.token_cache import tokenize_corpus
from dhwt.text.tokenizers import make_tokenizer

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
TIKTOKEN_FILES = SHARED / "gpt2" / "tiktoken_cache"

TRAIN = "the cat sat on the mat\n\n the dog sat\n"
VALID = "the cat ran\n"
TEST = "a bird sat on the dog\n"


@pytest.fixture
def small(tmp_path) -> Path:
    folder = tmp_path / "small"
    folder.mkdir()
    for name, text in (("train", TRAIN), ("valid", VALID), ("test", TEST)):
        (folder / f"{name}.txt").write_text(text)
    return folder


@pytest.fixture
def gpt2_files(monkeypatch):
    if not (TIKTOKEN_FILES.is_dir() and any(TIKTOKEN_FILES.iterdir())):
        pytest.skip(f"GPT-2 BPE files not found at {TIKTOKEN_FILES}")
    pytest.importorskip("tiktoken")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_FILES))


def test_own_text_corpus_and_its_checksum(small):
    c = load_corpus(small)
    assert c.texts == {"train": TRAIN, "valid": VALID, "test": TEST}
    (small / "test.txt").write_text(TEST + "more\n")
    assert load_corpus(small).checksum != c.checksum


def test_word_tokenizer_by_hand(small):
    tok = make_tokenizer("word", TRAIN)
    # first appearance: the cat sat on mat dog, then <eos>, <unk>
    assert tok.vocab == ("the", "cat", "sat", "on", "mat", "dog", "<eos>", "<unk>")
    np.testing.assert_array_equal(tok.encode(VALID), [0, 1, 7, 6])  # "ran" is unknown
    np.testing.assert_array_equal(tok.encode(TRAIN), [0, 1, 2, 3, 0, 4, 6, 6, 0, 5, 2, 6])
    assert tok.decode(tok.encode(TRAIN)) == "the cat sat on the mat\n\nthe dog sat\n"


def test_bpe_trains_to_size_round_trips_and_reloads(tmp_path):
    pytest.importorskip("tokenizers")
    text = "".join(f"token{i % 37} embeddings are tied {i}\n" for i in range(400))
    tok = make_tokenizer("bpe:300", text, tmp_path / "models")
    assert len(tok.vocab) <= 300 and len(set(tok.vocab)) == len(tok.vocab)
    ids = tok.encode("tied token12 embeddings\n")
    assert tok.decode(ids) == "tied token12 embeddings\n"
    assert len(ids) < len("tied token12 embeddings\n")  # merges were learnt
    again = make_tokenizer("bpe:300", "other text entirely\n", tmp_path / "models")  # reloaded
    np.testing.assert_array_equal(again.encode("tied token12 embeddings\n"), ids)
    fresh = make_tokenizer("bpe:300", text)  # retrained: deterministic
    assert fresh.vocab == tok.vocab


def test_gpt2_tokenizer_offline(gpt2_files):
    tok = make_tokenizer("gpt2")
    np.testing.assert_array_equal(tok.encode("Hello world"), [15496, 995])
    assert tok.vocab_size == 50257 and tok.vocab[50256] == "<|endoftext|>"
    assert len(set(tok.vocab)) == 50257
    assert tok.decode(tok.encode(" = Valkyria Chronicles III = \n")) == " = Valkyria Chronicles III = \n"


def test_cache_writes_memmaps_once_and_rebuilds_damaged_entries(small, tmp_path):
    c = load_corpus(small)
    first = tokenize_corpus(c, "word", tmp_path / "cache")
    word = make_tokenizer("word", TRAIN)
    for split, text in c.texts.items():
        assert isinstance(first.ids[split], np.memmap)
        np.testing.assert_array_equal(first.ids[split], word.encode(text))
    assert first.ids["train"].dtype == np.uint16
    stamp = (first.path / "train.bin").stat().st_mtime_ns
    second = tokenize_corpus(c, "word", tmp_path / "cache")
    assert second.path == first.path and (first.path / "train.bin").stat().st_mtime_ns == stamp
    (first.path / "train.bin").write_bytes(b"\x00")  # damaged: rebuilt, not trusted
    third = tokenize_corpus(c, "word", tmp_path / "cache")
    np.testing.assert_array_equal(third.ids["train"], word.encode(TRAIN))
    assert json.loads((first.path / "meta.json").read_text())["lengths"]["train"] == 12
    assert not [p for p in first.path.parent.iterdir() if p.name.startswith(".")]


def test_cache_key_follows_corpus_and_tokenizer(small, tmp_path):
    pytest.importorskip("tokenizers")
    c = load_corpus(small)
    words = tokenize_corpus(c, "word", tmp_path)
    bpe = tokenize_corpus(c, "bpe:270", tmp_path)
    assert words.path != bpe.path and len(bpe.vocab) <= 270
    (small / "valid.txt").write_text("changed\n")
    assert tokenize_corpus(load_corpus(small), "word", tmp_path).path != words.path


def _fake_wikitext(folder: Path, train: bytes = b"x\n") -> Path:
    sub = folder / "wikitext-2"
    sub.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        (sub / f"wiki.{split}.tokens").write_bytes(train if split == "train" else b"y\n")
    return folder


def test_checksum_mismatch_and_missing_data_are_errors(tmp_path, monkeypatch):
    with pytest.raises(DhwtError, match="checksum mismatch for wiki.train.tokens"):
        load_wikitext2(_fake_wikitext(tmp_path / "fake"))
    archive = tmp_path / "wikitext-2-v1.tokens.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        info = tarfile.TarInfo("wikitext-2/wiki.train.tokens")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"x\n"))
    with pytest.raises(DhwtError, match="checksum mismatch for .*tar.xz"):
        load_wikitext2(archive)
    with pytest.raises(DhwtError, match="no WikiText-2 at"):
        load_wikitext2(tmp_path / "empty")
    monkeypatch.setenv("DHWT_DATA", str(tmp_path / "nowhere"))
    monkeypatch.delenv("WIKITEXT2_PATH", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", None)  # HF datasets unavailable
    with pytest.raises(DhwtError, match=r"WikiText-2 not found \(DHWT_DATA=.*nowhere"):
        load_corpus("wikitext-2")


def test_split_checksums_are_the_published_ones():
    # the module's table against the data README's table, read independently
    readme = (SHARED / "README.md")
    if not readme.is_file():
        pytest.skip(f"{readme} not found")
    text = readme.read_text()
    for split, digest in corpus_module.WIKITEXT2_SHA256.items():
        assert f"wiki.{split}.tokens" in text and digest in text
    assert corpus_module.ARCHIVE_SHA256 in text


def test_real_archive_counts(monkeypatch):
    archive = SHARED / "wikitext-2-v1.tokens.tar.xz"
    if not archive.is_file():
        pytest.skip(f"{archive} not found")
    monkeypatch.setenv("DHWT_DATA", str(SHARED))
    monkeypatch.delenv("WIKITEXT2_PATH", raising=False)
    c = load_corpus("wikitext-2")
    assert "sha256 verified" in c.origin
    assert len(c.texts["valid"].splitlines()) == 3760  # data README
    assert hashlib.sha256(c.texts["valid"].encode()).hexdigest().startswith("f0737ed3")


def test_hf_datasets_fallback_with_a_stand_in_module(tmp_path, monkeypatch):
    import types

    lines = {"train": [" = A = \n", " text \n"], "validation": [" v \n"], "test": [" t \n"]}
    fake = types.ModuleType("datasets")
    fake.load_dataset = lambda name, config: (
        {split: {"text": text} for split, text in lines.items()}
        if (name, config) == ("wikitext", "wikitext-2-v1") else None)
    monkeypatch.setitem(sys.modules, "datasets", fake)
    monkeypatch.delenv("WIKITEXT2_PATH", raising=False)
    monkeypatch.setenv("DHWT_DATA", str(tmp_path))  # holds no WikiText-2
    c = load_corpus("wikitext-2")
    assert c.texts == {"train": " = A = \n text \n", "valid": " v \n", "test": " t \n"}
    assert "HF datasets" in c.origin and "not checked" in c.origin
