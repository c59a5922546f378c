"""The character-level tokenizer (`char`): one token per code point of the train text (#18)."""

from __future__ import annotations

import numpy as np

from dhwt.text.tokenizers import check_tokenizer, make_tokenizer


def test_characters_in_first_appearance_order_then_unk():
    train = "ab\nba é😀\n"
    tok = make_tokenizer("char", train)
    assert tok.vocab == ("a", "b", "\n", " ", "é", "😀", "<unk>")
    assert tok.name == "char" and tok.fingerprint == "char"
    np.testing.assert_array_equal(tok.encode(train), [0, 1, 2, 1, 0, 3, 4, 5, 2])
    np.testing.assert_array_equal(tok.encode("aZé"), [0, 6, 4])  # Z unseen: <unk>
    assert tok.decode(tok.encode(train)) == train
    assert tok.encode("").dtype == np.int64 and len(tok.encode("")) == 0


def test_every_code_point_is_one_token():
    train = "".join(chr(c) for c in range(32, 3000, 7)) * 2
    tok = make_tokenizer("char", train)
    assert len(tok.vocab) == len(set(train)) + 1
    np.testing.assert_array_equal(tok.encode(train), [tok.vocab.index(c) for c in train])


def test_char_is_a_known_tokenizer():
    check_tokenizer("char")  # no error
