"""Every message true (#13): what a new user meets on the first tries, each run through the real
CLI on files under tmp_path. Refusals end with exit code 2 and one readable `error: ...` line;
numbers are checked against values the test derives itself, never copied from the output."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest

from dhwt.analysis.knn import default_k
from dhwt.analysis.snapshots import read_snapshot, snapshot_paths
from dhwt.errors import brief
from dhwt.languages import load_task
from dhwt.languages.splits import make_splits
from dhwt.languages.text_task import TextTask
from dhwt.training import TrainConfig, train


def _refused(outcome: tuple[int, str, str], *fragments: str) -> str:
    """The error line of a refused command, checked: exit code 2, nothing on stdout, one short
    `error: ` line holding every fragment."""
    code, out, err = outcome
    assert code == 2 and out == "", (code, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert len(err) < 400, err
    for fragment in fragments:
        assert fragment in err, err
    return err


def _brute_overlap(x: np.ndarray, y: np.ndarray, k: int) -> float:
    """Mean |N_x(i) ∩ N_y(i)| / k by raw inner product, self excluded, ties to the lower id."""
    def neighbours(m: np.ndarray) -> np.ndarray:
        score = np.asarray(m, np.float64) @ np.asarray(m, np.float64).T
        np.fill_diagonal(score, -np.inf)
        ids = np.broadcast_to(np.arange(len(m)), score.shape)
        return np.lexsort((ids, -score), axis=1)[:, :k]
    return float(np.mean([len(set(a) & set(b)) / k
                          for a, b in zip(neighbours(x), neighbours(y))]))


# --- 1. the default k fits a small vocabulary ----------------------------------------------------

@pytest.fixture(scope="module")
def two_members(dataset, tmp_path_factory) -> Path:
    """Two untied members of EXor at 4 bits (7 mlm tokens), two steps, a snapshot at each."""
    run = tmp_path_factory.mktemp("messages") / "run"
    train(TrainConfig(data=str(dataset), seeds=[1, 2], steps=2, eval_every=1, snapshot_every=1,
                      tie_schedule="untied"), load_task(dataset, "mlm"), run)
    return run


def test_default_k_is_at_most_half_the_other_tokens():
    for n in range(2, 40):
        k = default_k(n)
        assert 1 <= k < n and k <= 10
        assert k == max(1, min(10, (n - 1) // 2))


def test_knn_on_a_small_vocabulary_uses_a_capped_default_k(two_members, cli):
    snap = read_snapshot(snapshot_paths(two_members)[-1])
    n = snap.input.shape[1]
    k = (n - 1) // 2
    assert k < 10  # the case: the plain default would not fit
    code, out, err = cli(["knn", f"{two_members}@0", f"{two_members}@last", "--no-baseline"])
    assert code == 0, err
    assert f"k = {k} (the default 10 capped for {n} tokens)" in out
    first = read_snapshot(snapshot_paths(two_members)[0]).input[0]
    overlap = float(re.search(r"overlap\s+([0-9.]+)", out)[1])
    assert overlap == pytest.approx(_brute_overlap(first, snap.input[0], k), abs=5e-5)


def test_knn_with_an_explicit_k_too_large_is_refused(two_members, cli):
    n = read_snapshot(snapshot_paths(two_members)[0]).input.shape[1]
    _refused(cli(["knn", f"{two_members}@0", f"{two_members}@last", "--k", n]),
             f"k must be an integer with 1 <= k < number of tokens ({n}), got {n}")


def test_analyze_on_a_small_vocabulary_uses_the_same_capped_k(two_members, tmp_path, cli):
    n = read_snapshot(snapshot_paths(two_members)[0]).input.shape[1]
    code, _, err = cli(["analyze", two_members, "--out", tmp_path / "rep"])
    assert code == 0, err
    text = (tmp_path / "rep" / "report.md").read_text()
    assert f"k = {(n - 1) // 2} (the default 10 capped for {n} tokens) nearest" in text
    assert "Skipped" not in text


# --- 2. messages name a collection briefly ---------------------------------------------------------

def _text_run(root: Path, vocab: tuple[str, ...]) -> Path:
    """A one-step causal LM run on random text over `vocab`."""
    rng = np.random.default_rng(0)
    ids = {s: rng.integers(0, len(vocab), 64).astype(np.int32) for s in ("train", "valid", "test")}
    config = TrainConfig.from_dict(dict(objective="clm", steps=1, batch_size=2, eval_every=1,
                                        snapshot_every=1, checkpoint_every=1), "test")
    train(config, TextTask(ids, vocab, 4), root)
    return root


def test_analyze_names_how_two_large_vocabularies_differ(tmp_path, cli):
    words = tuple(f"w{i}" for i in range(3000))
    a = _text_run(tmp_path / "a", words)
    b = _text_run(tmp_path / "b", words[:2100] + ("other",) + words[2101:])
    c = _text_run(tmp_path / "c", words[:2500])
    _refused(cli(["analyze", a, b, "--out", tmp_path / "rep"]),
             "different vocabularies", "(3,000 tokens)", "token id 2100: 'w2100' vs 'other'")
    _refused(cli(["analyze", a, c, "--out", tmp_path / "rep"]),
             "(2,500 tokens)", "token id 2500: 'w2500' vs nothing")


def test_brief_shows_the_first_items_and_the_count():
    assert brief(["a", "b"]) == "'a', 'b'"
    assert brief(range(100), str) == "0, 1, 2, 3, 4, ... (100 in all)"


@pytest.mark.parametrize("spec, fragments", [
    # a grammar with many states, one of them unreachable: the declared states are listed briefly
    ("automaton", ["goes to undeclared state 'nowhere'", "... (301 in all)"]),
    ("seeds", ["seeds must be distinct", "... (200 in all) repeated"]),
])
def test_long_collections_in_messages_are_bounded(spec, fragments, tmp_path, dataset, cli):
    if spec == "automaton":
        states = "\n".join(f's{i} = [{{ emit = "c", to = "s{i + 1}", p = 1.0 }}]'
                           for i in range(300))
        (tmp_path / "g.toml").write_text(
            f'family = "automaton"\nstart = "s0"\n[classes.c]\nvariants = ["c"]\n[states]\n'
            f'{states}\ns300 = [{{ emit = "c", to = "nowhere", p = 1.0 }}]\n')
        args = ["synth", "--grammar", tmp_path / "g.toml"]
    else:
        args = ["train", "--data", dataset, "--seeds", "1-200,1-200", "--out", tmp_path / "r"]
    _refused(cli(args), *fragments)


# --- 3. a small train split reports its own Bayes optimum ------------------------------------------

#: EXor's variants (synthetic/parity.toml: skew 0.8 for bit 0, 0 for bit 1).
VARIANTS = {0: {"0a": 0.1, "0b": 0.9}, 1: {"1a": 0.5, "1b": 0.5}}


def _brute_bayes(class_strings: list[tuple[int, ...]], objective: str) -> tuple[float, float]:
    """(accuracy, cross-entropy) of the Bayes predictor over the symbol strings of the given
    EXor class strings, equally likely: every rendering, every masked bit (mlm: uniform over
    the bits) or every prefix (clm: each position weighs P(x), [EOS] after the label)."""
    joint: dict[tuple, dict[str, float]] = {}
    for bits in class_strings:
        label = "ODD" if sum(bits) % 2 else "EVEN"
        for rendering in itertools.product(*(VARIANTS[b].items() for b in bits)):
            x = tuple(v for v, _ in rendering) + (label,)
            p = math.prod(q for _, q in rendering) / len(class_strings)
            events = ([(x[:j] + ("[MASK]",) + x[j + 1:], x[j], p / len(bits))
                       for j in range(len(bits))] if objective == "mlm" else
                      [(x[:t], x[t] if t < len(x) else "[EOS]", p) for t in range(len(x) + 1)])
            for context, target, w in events:
                row = joint.setdefault(context, {})
                row[target] = row.get(target, 0.0) + w
    total = sum(sum(row.values()) for row in joint.values())
    accuracy = sum(max(row.values()) for row in joint.values()) / total
    entropy = -sum(w / total * math.log(w / sum(row.values()))
                   for row in joint.values() for w in row.values())
    return accuracy, entropy


def test_synth_gives_the_small_train_splits_own_bayes_optimum(cli):
    n_bits, held_out = 2, ("--valid-fraction", 0.3, "--test-fraction", 0.3)
    code, out, err = cli(["synth", "--grammar", "parity", "--set", f"n_bits={n_bits}", *held_out])
    assert code == 0, err
    strings = list(itertools.product((0, 1), repeat=n_bits))  # the family's order
    train = [s for s, where in zip(strings, make_splits(len(strings), 0.3, 0.3, 14)) if where == 0]
    assert 2 * len(train) <= len(strings)
    assert f"train split: {len(train)} of {len(strings)} class strings" in out
    found = re.findall(r"Bayes optimum, train split only: accuracy ([0-9.]+), cross-entropy "
                       r"([0-9.]+) nats", out)
    assert len(found) == 2  # mlm, then clm
    for objective, (accuracy, entropy) in zip(("mlm", "clm"), found):
        expected = _brute_bayes(train, objective)
        assert (float(accuracy), float(entropy)) == pytest.approx(expected, abs=5e-5)
    language = re.findall(r"  Bayes optimum: accuracy ([0-9.]+), cross-entropy ([0-9.]+)", out)
    assert float(language[1][1]) == pytest.approx(_brute_bayes(strings, "clm")[1], abs=5e-5)


def test_synth_with_most_strings_in_training_adds_nothing(cli):
    code, out, _ = cli(["synth", "--grammar", "parity", "--set", "n_bits=3"])
    assert code == 0 and "train split" not in out
