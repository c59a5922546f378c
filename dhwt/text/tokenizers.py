"""Tokenizers for natural text: GPT-2 BPE (tiktoken), a BPE trained on the corpus (HF
tokenizers), word level, and character level. All map a split's whole text to token ids and name themselves for
the token-id cache.

- `gpt2`: tiktoken's GPT-2 encoding (50,257 tokens), `encode_ordinary` on the whole text (no
  special tokens). Offline when TIKTOKEN_CACHE_DIR points at its files (e.g.
  ../shared/data/gpt2/tiktoken_cache); elsewhere tiktoken downloads them once.
- `bpe:N`: byte-level BPE with vocab size N (>= 257: the 256 byte symbols plus merges), trained on
  the train split with HF tokenizers and cached next to the token ids (training is deterministic
  for one tokenizers version, which is part of the cache key).
- `word`: whitespace split, one `<eos>` per line (as pytorch's word_language_model reads
  WikiText); vocabulary = train words in order of first appearance, then `<eos>`, `<unk>` if
  absent; words not in it map to `<unk>`.
- `char`: one token per Unicode character (code point) of the train text, newlines included,
  in order of first appearance, then `<unk>`; characters not in it map to `<unk>`.
tiktoken and tokenizers come with the `text` extra and are imported only when used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from dhwt.directories import atomic_path
from dhwt.errors import DhwtError

EOS = "<eos>"
UNK = "<unk>"
NAMES = ("gpt2", "bpe:N", "word", "char")
#: The tokenizers as a message lists them (every one: a list that omits one misleads).
LISTED = f"{', '.join(NAMES[:-1])} or {NAMES[-1]}"


@dataclass(frozen=True)
class TextTokenizer:
    """vocab: token strings (index = id, all distinct); fingerprint: what the ids depend on;
    encode: text -> int64 ids; decode: ids -> text (word level: words joined by spaces, <eos> as
    a line break)."""

    name: str
    fingerprint: str
    vocab: tuple[str, ...]
    encode: Callable[[str], np.ndarray] = field(repr=False)
    decode: Callable[[Sequence[int]], str] = field(repr=False)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)


def make_tokenizer(spec: str, train_text: str | None = None,
                   model_dir: str | Path | None = None) -> TextTokenizer:
    """`gpt2`, `bpe:N` (trained on train_text, saved in / reloaded from model_dir), `word` or
    `char` (vocabulary from train_text).

    Examples:
        >>> tokenizer = make_tokenizer("word", train_text="the cat sat\\nthe dog\\n")
        >>> tokenizer.vocab
        ('the', 'cat', 'sat', 'dog', '<eos>', '<unk>')
        >>> tokenizer.encode("the bird sat\\n")  # an unseen word is <unk>; a line ends in <eos>
        array([0, 5, 2, 4])
        >>> tokenizer.decode([0, 1, 4, 3])
        'the cat\\ndog'
        >>> make_tokenizer("bpe:100", train_text="")
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: bpe vocabulary size must be a whole number >= 257 ..., got '100'
    """
    check_tokenizer(spec)
    if spec == "gpt2":
        return gpt2_tokenizer()
    if spec == "word":
        return word_tokenizer(_need_text(train_text, spec))
    if spec == "char":
        return char_tokenizer(_need_text(train_text, spec))
    return bpe_tokenizer(int(spec.removeprefix("bpe:")), _need_text(train_text, spec), model_dir)


def check_tokenizer(spec: object) -> None:
    """DhwtError unless `spec` names a tokenizer: `gpt2`, `bpe:N` (N >= 257), `word` or `char`."""
    if not isinstance(spec, str) or not (spec in ("gpt2", "word", "char")
                                         or spec.startswith("bpe:")):
        raise DhwtError(f"unknown tokenizer {spec!r}; choose one of {', '.join(NAMES)}")
    size = spec.removeprefix("bpe:")
    if spec.startswith("bpe:") and (not size.isdigit() or int(size) < 257):
        raise DhwtError(f"bpe vocabulary size must be a whole number >= 257 (256 bytes plus "
                        f"merges), got {size!r}")


def shortfall(spec: str, vocab_size: int) -> str | None:
    """What to say when a tokenizer has fewer tokens than `spec` asked for (bpe:N stops merging
    once every word of the train text is one token, which can be short of N), else None.

    Examples:
        >>> shortfall("bpe:10000000", 319)
        'bpe:10000000 asked for 10,000,000 tokens and learned 319: the train text has no more...'
        >>> shortfall("bpe:300", 300) is None, shortfall("word", 12) is None
        (True, True)
    """
    if not spec.startswith("bpe:") or vocab_size >= int(spec.removeprefix("bpe:")):
        return None
    return (f"{spec} asked for {int(spec.removeprefix('bpe:')):,} tokens and learned "
            f"{vocab_size:,}: the train text has no more pairs to merge")


def _need_text(text: str | None, spec: str) -> str:
    if text is None:
        raise DhwtError(f"tokenizer {spec!r} is built from the training text; none was given")
    return text


def gpt2_tokenizer() -> TextTokenizer:
    """GPT-2's BPE through tiktoken (files from TIKTOKEN_CACHE_DIR or downloaded once)."""
    try:
        import tiktoken
    except ImportError:
        raise DhwtError("the gpt2 tokenizer needs tiktoken: pip install 'dhwt[text]'") from None
    try:
        enc = tiktoken.get_encoding("gpt2")
    except Exception as exc:  # network errors of every kind when the files are not cached
        where = os.environ.get("TIKTOKEN_CACHE_DIR", "unset")
        raise DhwtError(f"cannot load the GPT-2 BPE files (TIKTOKEN_CACHE_DIR={where}, no "
                        f"download possible: {type(exc).__name__}); point TIKTOKEN_CACHE_DIR at "
                        "a folder holding them, e.g. ../shared/data/gpt2/tiktoken_cache") from None
    vocab = tuple(_token_text(enc.decode_single_token_bytes(i)) for i in range(enc.n_vocab))

    def encode(text: str) -> np.ndarray:
        return np.asarray(enc.encode_ordinary(text), np.int64)

    return TextTokenizer("gpt2", "gpt2-tiktoken", vocab, encode,
                         lambda ids: enc.decode([int(i) for i in ids]))


def _token_text(raw: bytes) -> str:
    """A token's bytes as text; tokens that are not whole UTF-8 show as b'..' (stay distinct)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return repr(raw)


def word_tokenizer(train_text: str) -> TextTokenizer:
    """Words of the train text (first appearance order) plus <eos> and <unk>."""
    index: dict[str, int] = {}
    for line in train_text.splitlines():
        for word in line.split():
            index.setdefault(word, len(index))
    for special in (EOS, UNK):
        index.setdefault(special, len(index))
    unk = index[UNK]

    def encode(text: str) -> np.ndarray:
        ids = []
        for line in text.splitlines():
            ids.extend(index.get(w, unk) for w in line.split())
            ids.append(index[EOS])
        return np.asarray(ids, np.int64)

    vocab = tuple(index)

    def decode(ids: Sequence[int]) -> str:
        lines, line = [], []
        for i in ids:
            if vocab[int(i)] == EOS:
                lines.append(" ".join(line) + "\n")
                line = []
            else:
                line.append(vocab[int(i)])
        return "".join(lines) + " ".join(line)

    return TextTokenizer("word", "word", vocab, encode, decode)


def char_tokenizer(train_text: str) -> TextTokenizer:
    """Characters of the train text (first appearance order) plus <unk>. Encoding looks each
    code point up in a table sorted by code point (vectorised: WikiText-2's 10.9M characters of
    train text in about a second), with -1 (no character) in it so it is never empty.

    Examples:
        >>> tokenizer = char_tokenizer("abba\\n")
        >>> tokenizer.vocab
        ('a', 'b', '\\n', '<unk>')
        >>> tokenizer.encode("abc\\n")  # an unseen character is <unk>
        array([0, 1, 3, 2])
        >>> tokenizer.decode([1, 0, 2])
        'ba\\n'
    """
    vocab = tuple(dict.fromkeys(train_text)) + (UNK,)
    unk = len(vocab) - 1
    codes = np.array([-1, *(ord(c) for c in vocab[:-1])], np.int64)
    ids = np.array([unk, *range(unk)], np.int64)
    order = np.argsort(codes)
    codes, ids = codes[order], ids[order]

    def encode(text: str) -> np.ndarray:
        points = np.frombuffer(text.encode("utf-32-le"), np.uint32).astype(np.int64)
        at = np.minimum(np.searchsorted(codes, points), len(codes) - 1)
        return np.where(codes[at] == points, ids[at], unk)

    return TextTokenizer("char", "char", vocab, encode,
                         lambda ids: "".join(vocab[int(i)] for i in ids))


def bpe_tokenizer(vocab_size: int, train_text: str,
                  model_dir: str | Path | None = None) -> TextTokenizer:
    """Byte-level BPE trained on train_text (reloaded from model_dir when trained before)."""
    try:
        import tokenizers
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        raise DhwtError("the bpe tokenizer needs HF tokenizers: pip install 'dhwt[text]'") from None
    fingerprint = f"bpe{vocab_size}-tokenizers{tokenizers.__version__}"
    saved = Path(model_dir) / f"{fingerprint}.json" if model_dir else None
    if saved is not None and saved.is_file():
        tok = Tokenizer.from_file(str(saved))
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(train_text.splitlines(keepends=True), trainer)
        if saved is not None:
            saved.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(saved) as tmp:
                tok.save(str(tmp))
    by_id = {i: t for t, i in tok.get_vocab().items()}
    vocab = tuple(by_id[i] for i in range(len(by_id)))

    def encode(text: str) -> np.ndarray:
        return np.asarray(tok.encode(text).ids, np.int64)

    return TextTokenizer(f"bpe:{vocab_size}", fingerprint, vocab, encode,
                         lambda ids: tok.decode([int(i) for i in ids]))
