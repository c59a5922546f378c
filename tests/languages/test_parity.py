"""parity's strings = "paper": the authors' string set and split, against their own code."""

import json
import random

import numpy as np
import pytest

from dhwt.languages.synthesis import synthesize
from dhwt.errors import DhwtError
from dhwt.languages import compute_truth, load_language, write_dataset
from dhwt.languages.dataset import read_dataset
from dhwt.report.synth_report import summary_text


def authors_split(n_bits: int) -> dict[str, list[tuple[int, ...]]]:
    """The bit strings of each split as github f14-bertolotti/semantica builds them
    (semeqv/problem/xor/datasets/Default.py at de5b7dd, transcribed)."""
    generator = random.Random(14)
    samples = [list(map(int, bin(x)[2:])) for x in range(2**n_bits - 1)]
    samples = [[0] * (n_bits - len(x)) + x for x in samples]
    generator.shuffle(samples)
    train = samples[:int(len(samples) * .9)]
    valid = samples[len(train):len(train) + int(len(samples) * .1)]
    test = samples[len(train) + len(valid):]
    return {name: sorted(map(tuple, part))
            for name, part in (("train", train), ("valid", valid), ("test", test))}


def dataset_split(path, n_bits: int) -> dict[str, list[tuple[int, ...]]]:
    language, split = read_dataset(path)
    bits = language.strings[:, :n_bits]  # class ids 0 and 1 are the bit classes "0" and "1"
    return {name: sorted(tuple(int(b) for b in row) for row in bits[split == i])
            for i, name in enumerate(("train", "valid", "test"))}


@pytest.mark.parametrize("n_bits", [7, 4, 5])
def test_the_authors_strings_and_split(tmp_path, n_bits):
    write_dataset(load_language("parity", {"n_bits": n_bits, "strings": "paper"}), tmp_path / "d")
    ours, theirs = dataset_split(tmp_path / "d", n_bits), authors_split(n_bits)
    assert ours == theirs
    if n_bits == 7:
        assert [len(ours[s]) for s in ("train", "valid", "test")] == [114, 12, 1]
        assert (1,) * 7 not in sum(ours.values(), [])


def test_labels_are_the_parity_of_each_string():
    language = load_language("parity", {"n_bits": 5, "strings": "paper"})
    bits, label = language.strings[:, :5], language.strings[:, 5]
    assert len(bits) == 31 and len({tuple(b) for b in bits.tolist()}) == 31
    assert (label == 2 + bits.sum(axis=1) % 2).all()  # class 2 is EVEN, 3 is ODD


def test_truth_is_exact_for_the_paper_set():
    """Bayes accuracy by counting: the masked bit is determined by the others and the label, so
    the optimum picks 0b (0.9) for a 0 and either 1 variant (0.5) for a 1."""
    truth = compute_truth(load_language("parity", {"strings": "paper"}), "mlm")
    zeros = sum(bin(x)[2:].zfill(7).count("0") for x in range(127))
    p_zero = zeros / (127 * 7)
    assert truth.bayes_accuracy == pytest.approx(0.9 * p_zero + 0.5 * (1 - p_zero), abs=1e-12)
    assert truth.bayes_accuracy != pytest.approx(0.7, abs=1e-3)


def test_the_default_set_is_unchanged(tmp_path):
    language = load_language("parity")
    assert len(language.probs) == 128 and language.split is None
    write_dataset(language, tmp_path / "d")
    summary = json.loads((tmp_path / "d" / "truth.json").read_text())
    assert summary["split_seed"] == 14 and not summary["split_fixed_by_language"]


def test_synth_prints_and_writes_the_fixed_split(tmp_path):
    text = summary_text(synthesize("parity", ["strings=paper"], tmp_path / "d"))
    assert "127 class strings" in text
    assert "train 114, valid 12, test 1; the language's own split" in text
    summary = json.loads((tmp_path / "d" / "truth.json").read_text())
    assert summary["splits"] == {"train": 114, "valid": 12, "test": 1}
    assert summary["split_seed"] is None and summary["split_fixed_by_language"]


@pytest.mark.parametrize("option", [{"valid_fraction": 0.2}, {"test_fraction": 0.0},
                                    {"seed": 3}])
def test_split_options_are_refused_not_ignored(tmp_path, option):
    with pytest.raises(DhwtError, match="fixes its own split"):
        synthesize("parity", ["strings=paper"], tmp_path / "d", **option)
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("value, message", [("papr", "'strings' must be one of all, paper"),
                                            (3, "'strings' must be one of")])
def test_bad_string_sets(value, message):
    with pytest.raises(DhwtError, match=message):
        load_language("parity", {"strings": value})


def test_too_few_bits_for_the_authors_split():
    with pytest.raises(DhwtError, match="no training string"):
        load_language("parity", {"n_bits": 1, "strings": "paper"})


def test_an_edited_split_is_caught(tmp_path):
    write_dataset(load_language("parity", {"n_bits": 4, "strings": "paper"}), tmp_path / "d")
    path = tmp_path / "d" / "strings.npz"
    with np.load(path) as data:
        arrays = dict(data)
    arrays["split"] = np.roll(arrays["split"], 1)
    np.savez(path, **arrays)
    with pytest.raises(DhwtError, match="inconsistent"):
        read_dataset(tmp_path / "d")
