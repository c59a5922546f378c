"""Write a Penn-Treebank-sized word-level corpus cut from WikiText-2, made as Mikolov made PTB: the
first whole articles of WikiText-2's train split up to a number of words, the vocabulary capped
at the most frequent words of that train part (every other word, and WikiText-2's own `<unk>`,
becomes `<unk>`), valid (and test) cut to whole articles and mapped the same way:

    python experiments/tying_wikitext/ptb_like.py CORPUS_DIR --train-words 600000 \
        --valid-words 60000 --vocab 10000

writes CORPUS_DIR/train.txt, valid.txt, test.txt (a folder `corpus = "CORPUS_DIR"` reads with
`tokenizer = "word"`, which adds `<eos>`: V = vocab + 1). WikiText-2 is found as dhwt finds it
(DHWT_DATA, WIKITEXT2_PATH; dhwt.text.corpus). Deterministic: ties in frequency go to the word
seen first. Lines are kept whole, empty ones included (they are `<eos>` at word level).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from dhwt.directories import atomic_write_bytes
from dhwt.text.corpus import load_wikitext2
from dhwt.text.tokenizers import UNK


def articles(text: str) -> list[list[str]]:
    """The text's lines grouped by article: a new article starts at a title line ` = T = `
    (one `=` each side; sections have two or more)."""
    grouped: list[list[str]] = []
    for line in text.splitlines(keepends=True):
        words = line.split()
        title = len(words) >= 3 and words[0] == words[-1] == "=" and words[1] != "="
        if title or not grouped:
            grouped.append([])
        grouped[-1].append(line)
    return grouped


def first_words(text: str, words: int | None) -> str:
    """The text's first whole articles holding at least `words` words (all of it when None)."""
    if words is None:
        return text
    kept: list[str] = []
    count = 0
    for article in articles(text):
        if count >= words:
            break
        kept.extend(article)
        count += sum(len(line.split()) for line in article)
    return "".join(kept)


def capped_vocabulary(train: str, size: int) -> set[str]:
    """The `size` most frequent words of `train`, `<unk>` among them (counted as one, always
    kept); ties go to the word seen first."""
    counts = Counter(w for w in train.split() if w != UNK)
    return {UNK, *(w for w, _ in counts.most_common(size - 1))}


def mapped(text: str, vocabulary: set[str]) -> str:
    """Each line's words outside `vocabulary` replaced by `<unk>`, one space between words."""
    return "".join(" ".join(w if w in vocabulary else UNK for w in line.split()) + "\n"
                   for line in text.splitlines())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder to write train.txt, valid.txt, test.txt")
    parser.add_argument("--train-words", type=int, default=600_000,
                        help="words of WikiText-2's train split to keep, in whole articles")
    parser.add_argument("--valid-words", type=int, default=None,
                        help="words of the valid split to keep (default: all of it)")
    parser.add_argument("--test-words", type=int, default=None,
                        help="words of the test split to keep (default: all of it)")
    parser.add_argument("--vocab", type=int, default=10_000,
                        help="word types kept, <unk> included (the tokenizer adds <eos>)")
    parser.add_argument("--data", default=None,
                        help="WikiText-2's folder or archive (default: as dhwt finds it)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace train.txt, valid.txt, test.txt if OUT holds them")
    args = parser.parse_args(argv)
    held = [n for n in ("train.txt", "valid.txt", "test.txt") if (args.out / n).exists()]
    if held and not args.overwrite:
        parser.error(f"{args.out} already holds {', '.join(held)}; give another folder, or "
                     "--overwrite to replace them")
    texts = load_wikitext2(args.data).texts
    cut = {"train": first_words(texts["train"], args.train_words),
           "valid": first_words(texts["valid"], args.valid_words),
           "test": first_words(texts["test"], args.test_words)}
    vocabulary = capped_vocabulary(cut["train"], args.vocab)
    args.out.mkdir(parents=True, exist_ok=True)
    for split, text in cut.items():
        body = mapped(text, vocabulary)
        atomic_write_bytes(args.out / f"{split}.txt", body.encode())
        print(f"{split}: {len(body.split()):,} words, {body.count(chr(10)):,} lines")
    print(f"vocabulary: {len(vocabulary):,} word types (<unk> included; <eos> is the tokenizer's)")


if __name__ == "__main__":
    main()
