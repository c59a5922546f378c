"""experiments/tying_wikitext/ptb_like.py: whole articles up to a word count, the vocabulary
capped at the most frequent train words, every other word `<unk>` in every split."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

HERE = Path(__file__).parents[2] / "experiments" / "tying_wikitext"
spec = importlib.util.spec_from_file_location("ptb_like", HERE / "ptb_like.py")
ptb_like = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = ptb_like
spec.loader.exec_module(ptb_like)

TRAIN = (" \n = Alpha = \n \n the cat sat on the mat . \n \n = = Early life = = \n"
         " the dog ate <unk> . \n = Beta = \n the cat ran . a bird flew \n"
         " = Gamma = \n zebra zebra zebra quokka \n")
VALID = " \n = Delta = \n the bird sat on a zebra . \n = Epsilon = \n cat dog \n"


def test_whole_articles_up_to_the_word_count():
    text = ptb_like.first_words(TRAIN, 10)
    # the blank line before the first title, then Alpha with its section: 3 + 7 + 6 + 5 words
    assert text.endswith(" the dog ate <unk> . \n") and "Beta" not in text
    assert ptb_like.first_words(TRAIN, 23) == TRAIN[:TRAIN.index(" = Gamma")]
    assert ptb_like.first_words(TRAIN, None) == TRAIN


def test_the_corpus_caps_the_vocabulary_and_maps_every_split(tmp_path, monkeypatch):
    texts = {"train": TRAIN, "valid": VALID, "test": VALID}
    monkeypatch.setattr(ptb_like, "load_wikitext2", lambda data: SimpleNamespace(texts=texts))
    ptb_like.main([str(tmp_path), "--train-words", "23", "--vocab", "6"])
    kept_train = TRAIN[:TRAIN.index(" = Gamma")]
    counts = Counter(w for w in kept_train.split() if w != "<unk>")
    vocabulary = {"<unk>"} | {w for w, _ in counts.most_common(5)}
    assert vocabulary == {"<unk>", "=", "the", ".", "cat", "Alpha"}  # a tie: the first seen
    for split, source in (("train", kept_train), ("valid", VALID), ("test", VALID)):
        lines = (tmp_path / f"{split}.txt").read_text().splitlines()
        assert lines == [" ".join(w if w in vocabulary else "<unk>" for w in line.split())
                         for line in source.splitlines()]
    assert "zebra" not in (tmp_path / "train.txt").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.txt", "train.txt", "valid.txt"]


def test_a_folder_holding_a_corpus_is_refused_unless_overwrite(tmp_path, monkeypatch, capsys):
    texts = {"train": TRAIN, "valid": VALID, "test": VALID}
    monkeypatch.setattr(ptb_like, "load_wikitext2", lambda data: SimpleNamespace(texts=texts))
    (tmp_path / "train.txt").write_text("mine\n")
    with pytest.raises(SystemExit):
        ptb_like.main([str(tmp_path), "--vocab", "6"])
    assert "already holds train.txt" in capsys.readouterr().err
    assert (tmp_path / "train.txt").read_text() == "mine\n"
    ptb_like.main([str(tmp_path), "--vocab", "6", "--overwrite"])
    assert (tmp_path / "train.txt").read_text() != "mine\n"
