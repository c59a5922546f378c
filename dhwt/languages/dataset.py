"""Dataset directories: what `dhwt synth --out DIR` writes and `load_task` reads.

    spec.toml    the resolved spec (after --set overrides); it rebuilds the language exactly
    vocab.json   grammar symbols, classes with variants/probabilities/maskable, vocab per objective
    strings.npz  class strings (n, L) int16 class ids, -1 past the end; lengths; probs; split
                 (0 train, 1 valid, 2 test). Variants are not stored: they are drawn afresh each
                 time a string is served, as in the paper.
    truth.json   exact ground truth per objective: relations, distances, DH verdicts, Bayes optima

A dataset's checksum (`dataset_checksum`, dhwt.checksums over these four files) is recorded by
each run trained on it, which refuses the dataset once it has changed.

Written atomically: into a temporary directory beside DIR, renamed into place when complete
(dhwt.directories, which also says what --overwrite may replace).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from dhwt.checksums import checksum
from dhwt.directories import check_target, create
from dhwt.errors import DhwtError
from dhwt.languages.language import OBJECTIVES, Language, load_language
from dhwt.languages.splits import SPLIT_SEED, SPLITS, TEST_FRACTION, VALID_FRACTION, split_of
from dhwt.languages.truth import GroundTruth, compute_truth
from dhwt.tomlwrite import dumps
from dhwt.userfiles import load_npz

FILES = ("spec.toml", "vocab.json", "strings.npz", "truth.json")
EXISTS = "pass --overwrite to replace it"


def write_dataset(language: Language, out_dir: str | Path, *, valid_fraction: float = VALID_FRACTION,
                  test_fraction: float = TEST_FRACTION, seed: int = SPLIT_SEED, overwrite: bool = False,
                  inputs: Iterable[object] = (),
                  truths: dict[str, GroundTruth] | None = None) -> None:
    """Write the dataset directory of `language` (split by class string: seeded, or the split the
    language fixes itself, dhwt.languages.splits.split_of). An existing
    non-empty `out_dir` is refused unless `overwrite` and dhwt made it as a dataset holding none
    of `inputs` (the paths the command reads; dhwt.directories). `truths` ({objective:
    GroundTruth}) may pass ground truth already computed; it is computed otherwise.

    Examples:
        >>> import json, tempfile
        >>> from pathlib import Path
        >>> from dhwt.languages import load_language, write_dataset
        >>> tmp = tempfile.TemporaryDirectory()
        >>> out = Path(tmp.name) / "parity3"
        >>> write_dataset(load_language("parity", {"n_bits": 3}), out)
        >>> sorted(path.name for path in out.iterdir())
        ['.dhwt', '.lock', 'spec.toml', 'strings.npz', 'truth.json', 'vocab.json']
        >>> summary = json.loads((out / "truth.json").read_text())
        >>> summary["splits"], summary["objectives"]["mlm"]["bayes_accuracy"]
        ({'train': 6, 'valid': 1, 'test': 1}, 0.7)
        >>> write_dataset(load_language("parity"), out)
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: .../parity3 already exists; pass --overwrite to replace it
        >>> tmp.cleanup()
    """
    check_target(Path(out_dir), "dataset", overwrite=overwrite, inputs=inputs, exists=EXISTS)
    split = split_of(language, valid_fraction, test_fraction, seed)
    truths = truths or {objective: compute_truth(language, objective) for objective in OBJECTIVES}

    def fill(tmp: Path) -> None:
        (tmp / "spec.toml").write_text(dumps(language.spec), "utf-8")
        _write_json(tmp / "vocab.json", _vocab_json(language))
        np.savez(tmp / "strings.npz", classes=language.strings.astype(np.int16),
                 lengths=language.lengths, probs=language.probs, split=split,
                 split_names=np.array(SPLITS))
        summary = {"language": language.name, "family": language.family,
                   "splits": {name: int((split == i).sum()) for i, name in enumerate(SPLITS)},
                   "split_seed": seed if language.split is None else None,
                   "split_fixed_by_language": language.split is not None,
                   "objectives": {obj: truths[obj].to_json() for obj in OBJECTIVES}}
        _write_json(tmp / "truth.json", summary)

    create(Path(out_dir), "dataset", fill, overwrite=overwrite, inputs=inputs,
           exists=EXISTS).release()


def read_dataset(dataset_dir: str | Path) -> tuple[Language, np.ndarray]:
    """(language, split ids) of a dataset directory, checked against each other."""
    path = Path(dataset_dir)
    missing = [name for name in ("spec.toml", "strings.npz") if not (path / name).is_file()]
    if missing:
        raise DhwtError(f"{str(path)!r} is not a dataset directory (no {missing[0]}); write one "
                        f"with `dhwt synth --grammar NAME --out {path}`")
    language = load_language(str(path / "spec.toml"))
    data = load_npz(path / "strings.npz", "a strings archive")
    missing = sorted({"classes", "probs", "split"} - data.keys())
    if missing:
        raise DhwtError(f"cannot read {path / 'strings.npz'} as a strings archive: it has no "
                        f"array {missing[0]!r}")
    classes, probs, split = data["classes"], data["probs"], data["split"]
    if (classes.shape != language.strings.shape or not (classes == language.strings).all()
            or not np.allclose(probs, language.probs, rtol=0, atol=1e-12)
            or split.shape != probs.shape or not np.isin(split, range(len(SPLITS))).all()
            or (language.split is not None and not (split == language.split).all())):
        raise DhwtError(f"dataset {str(path)!r} is inconsistent: its spec.toml does not produce "
                        "the strings in strings.npz (was a file edited?)")
    return language, split


def dataset_checksum(dataset_dir: str | Path) -> str:
    """The checksum of the dataset directory `dataset_dir` (dhwt.checksums): over its files
    (FILES, in that order; one missing counts as empty), which define the language, its split
    and its ground truth; DhwtError if one cannot be read.

    Examples:
        >>> import tempfile
        >>> from dhwt.languages import load_language
        >>> out = Path(tempfile.mkdtemp()) / "data"
        >>> write_dataset(load_language("parity", {"n_bits": 3}), out)
        >>> before = dataset_checksum(out)
        >>> write_dataset(load_language("parity", {"n_bits": 3}), out, seed=7, overwrite=True)
        >>> dataset_checksum(out) == before  # another split: other data
        False
    """
    path = Path(dataset_dir)
    try:
        return checksum((path / name).read_bytes() if (path / name).exists() else b""
                        for name in FILES)
    except OSError as exc:
        raise DhwtError(f"cannot read dataset {path}: {exc.strerror or exc}") from None


def _vocab_json(language: Language) -> dict:
    return {
        "symbols": list(language.symbols),
        "classes": {c.name: {"variants": list(c.variants), "p": list(c.probs),
                             "maskable": c.maskable} for c in language.classes},
        "vocab": {objective: list(language.vocab(objective)) for objective in OBJECTIVES},
    }


def _write_json(path: Path, data: dict) -> None:
    path.write_text(_json_text(data) + "\n", "utf-8")


def _json_text(value: object, depth: int = 0) -> str:
    """JSON with one level of indentation per nesting, but arrays and objects that hold only
    plain values on one line (a pair's record, a vocabulary), so the file reads well."""
    if not isinstance(value, (dict, list)) or all(
            not isinstance(v, (dict, list)) for v in (value.values() if isinstance(value, dict)
                                                      else value)):
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    pad, inner = " " * depth, " " * (depth + 1)
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {_json_text(v, depth + 1)}"
                 for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    items = [f"{inner}{_json_text(v, depth + 1)}" for v in value]
    return "[\n" + ",\n".join(items) + f"\n{pad}]"
