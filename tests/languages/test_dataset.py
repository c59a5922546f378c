"""Splits, the dataset directory (round trip, atomic replacement), and the TOML writer."""

from __future__ import annotations

import json
import tomllib

import numpy as np
import pytest

from dhwt.directories import LOCK, MARKER
from dhwt.errors import DhwtError
from dhwt.languages import compute_truth, load_language, load_task, write_dataset
from dhwt.languages.splits import make_splits
from dhwt.tomlwrite import dumps


@pytest.mark.parametrize("n, valid, test", [(128, 0.1, 0.1), (4, 0.25, 0.25), (10, 0.01, 0.0),
                                            (3, 0.0, 0.0)])
def test_splits_are_disjoint_covering_and_nonempty(n, valid, test):
    split = make_splits(n, valid, test, seed=14)
    assert split.shape == (n,) and set(split.tolist()) <= {0, 1, 2}  # each string in one split
    counts = np.bincount(split, minlength=3)
    assert counts[0] >= 1
    for k, f in ((1, valid), (2, test)):
        assert counts[k] == (max(1, round(f * n)) if f > 0 else 0)


def test_split_seed_matters_and_is_reproducible():
    a, b, c = (make_splits(128, 0.1, 0.1, seed) for seed in (14, 14, 15))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


@pytest.mark.parametrize("valid, test, message", [
    (0.5, 0.5, "below 1"), (-0.1, 0.1, "valid_fraction"), (0.1, float("nan"), "test_fraction"),
])
def test_bad_fractions(valid, test, message):
    with pytest.raises(DhwtError, match=message):
        make_splits(128, valid, test, seed=14)


def test_too_few_strings_for_the_splits():
    with pytest.raises(DhwtError, match="too few"):
        make_splits(2, 0.1, 0.1, seed=14)


def test_round_trip(tmp_path):
    language = load_language("parity", {"n_bits": 4, "classes.0.p": [0.25, 0.75]})
    out = tmp_path / "data"
    write_dataset(language, out, valid_fraction=0.2, test_fraction=0.1, seed=3)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [MARKER, LOCK, "spec.toml", "vocab.json", "strings.npz", "truth.json"])
    assert [p.name for p in tmp_path.iterdir()] == ["data"]  # no temporary left behind
    assert tomllib.loads((out / "spec.toml").read_text()) == language.spec
    task = load_task(out, "clm")
    assert np.array_equal(task.language.strings, language.strings)
    assert np.array_equal(task.language.probs, language.probs)
    assert task.language.classes == language.classes
    split = make_splits(len(language.probs), 0.2, 0.1, seed=3)
    with np.load(out / "strings.npz") as data:
        assert np.array_equal(data["split"], split)
    assert [task.n_strings(s) for s in ("train", "valid", "test")] == np.bincount(split).tolist()
    vocab = json.loads((out / "vocab.json").read_text())
    assert vocab["vocab"]["clm"] == list(task.vocab)
    truth = json.loads((out / "truth.json").read_text())
    assert truth["objectives"]["mlm"]["bayes_accuracy"] == pytest.approx(
        compute_truth(language, "mlm").bayes_accuracy)
    assert {tuple(p["pair"]): p["kind"] for p in truth["objectives"]["mlm"]["pairs"]}[
        ("0a", "0b")] == "sem only"


def test_existing_output_is_refused_then_replaced_with_overwrite(tmp_path):
    out = tmp_path / "data"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    language = load_language("parity-dh", {"n_bits": 3})
    with pytest.raises(DhwtError, match="not made by dhwt"):  # no hint to pass --overwrite
        write_dataset(language, out, valid_fraction=0.1, test_fraction=0.1, seed=14)
    with pytest.raises(DhwtError, match="not made by dhwt"):
        write_dataset(language, out, valid_fraction=0.1, test_fraction=0.1, seed=14,
                      overwrite=True)
    assert (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    write_dataset(language, out, valid_fraction=0.1, test_fraction=0.1, seed=14)  # dhwt's own
    (out / "keep.txt").write_text("mine too")  # a user's file in dhwt's dataset: kept
    with pytest.raises(DhwtError, match="holds keep.txt, which dhwt did not write"):
        write_dataset(language, out, valid_fraction=0.1, test_fraction=0.1, seed=14,
                      overwrite=True)
    (out / "keep.txt").unlink()
    write_dataset(language, out, valid_fraction=0.1, test_fraction=0.1, seed=14, overwrite=True)
    assert (out / "truth.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["data"]


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    import dhwt.languages.dataset as dataset

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(dataset.np, "savez", broken)
    with pytest.raises(DhwtError, match="cannot create dataset directory .*: disk full"):
        write_dataset(load_language("four-cases"), tmp_path / "data", valid_fraction=0.25,
                      test_fraction=0.25, seed=14)
    assert list(tmp_path.iterdir()) == []


def test_edited_dataset_is_detected(tmp_path):
    out = tmp_path / "data"
    write_dataset(load_language("parity", {"n_bits": 3}), out, valid_fraction=0.2,
                  test_fraction=0.2, seed=14)
    spec = (out / "spec.toml").read_text().replace("n_bits = 3", "n_bits = 4")
    (out / "spec.toml").write_text(spec)
    with pytest.raises(DhwtError, match="inconsistent"):
        load_task(out, "mlm")
    with pytest.raises(DhwtError, match="not a dataset directory"):
        load_task(tmp_path / "nothing", "mlm")


@pytest.mark.parametrize("junk", [b"not a numpy archive", b"PK\x03\x04 broken zip"])
def test_junk_strings_archive_is_a_user_error(tmp_path, junk):
    out = tmp_path / "data"
    write_dataset(load_language("parity", {"n_bits": 3}), out, valid_fraction=0.2,
                  test_fraction=0.2, seed=14)
    (out / "strings.npz").write_bytes(junk)
    with pytest.raises(DhwtError, match="as a strings archive"):
        load_task(out, "mlm")


def test_archive_without_a_key_or_with_bad_splits_is_a_user_error(tmp_path):
    out = tmp_path / "data"
    language = load_language("parity", {"n_bits": 3})
    write_dataset(language, out, valid_fraction=0.2, test_fraction=0.2, seed=14)
    np.savez(out / "strings.npz", classes=language.strings, probs=language.probs)
    with pytest.raises(DhwtError, match="as a strings archive"):
        load_task(out, "mlm")
    np.savez(out / "strings.npz", classes=language.strings, probs=language.probs,
             split=np.full(len(language.probs), 7))
    with pytest.raises(DhwtError, match="inconsistent"):
        load_task(out, "mlm")


def test_toml_writer_round_trips():
    data = {
        "name": "x", "n": 3, "f": 1e-05, "flag": False, "inf": float("inf"), "list": [1, 2.5],
        "a table": {"quoted key": "va\"lue", "nested": {"deep": [True]}},
        "states": {"s": [{"emit": "a", "to": "end", "p": 0.5}, {"emit": "b", "to": "t", "p": 0.5}]},
        "empty": {},
    }
    assert tomllib.loads(dumps(data)) == data
    for name in ("parity", "four-cases"):
        spec = load_language(name).spec
        assert tomllib.loads(dumps(spec)) == spec
