"""Every message true (#13): what a new user meets on the first tries, each run through the real
CLI on files under tmp_path. Refusals end with exit code 2 and one readable `error: ...` line;
numbers are checked against values the test derives itself, never copied from the output."""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from dhwt.analysis.knn import default_k
from dhwt.cli import main
from dhwt.training.runner import train_run
from dhwt.config import TrainConfig
from dhwt.errors import LINE, DhwtError, brief
from dhwt.languages import load_task
from dhwt.languages.splits import make_splits
from dhwt.runs.snapshots import read_snapshot, snapshot_paths
from dhwt.text.text_task import TextTask


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
    train_run(TrainConfig(data=str(dataset), seeds=[1, 2], steps=2, eval_every=1, snapshot_every=1,
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
    train_run(config, TextTask(ids, vocab, 4), root)
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


# --- 4. a spec's description is not repeated once overrides change the spec -----------------------

def test_synth_marks_a_description_the_overrides_made_untrue(tmp_path, cli):
    code, out, _ = cli(["synth", "--grammar", "parity", "--set", "n_bits=3", "--set",
                        "classes.1.skew=0.2", "--out", tmp_path / "d"])
    assert code == 0
    description = out.splitlines()[1]
    assert description.endswith("(said of the spec before overriding n_bits=3, "
                                "classes.1.skew=0.2)")
    assert "1a: 0.4  1b: 0.6" in out  # skew t: ((1 - t) / 2, (1 + t) / 2)
    # the dataset keeps the marked description, once, however often it is read again
    spec = (tmp_path / "d" / "spec.toml").read_text()
    assert spec.count("said of the spec before") == 1
    code, again, _ = cli(["synth", "--grammar", tmp_path / "d" / "spec.toml"])
    assert code == 0 and again.splitlines()[1] == description


@pytest.mark.parametrize("assignments, marked", [
    ([], False),
    (["classes.1.skew=0.0", "name=mine"], False),  # nothing the spec says has changed
    (["n_bits=3", "description=three bits"], False),  # the user's own description
])
def test_synth_keeps_a_description_that_still_holds(assignments, marked, cli):
    args = [a for pair in zip(["--set"] * len(assignments), assignments) for a in pair]
    code, out, _ = cli(["synth", "--grammar", "parity", *args])
    assert code == 0 and ("said of the spec before" in out) == marked
    if "description=three bits" in assignments:
        assert out.splitlines()[1] == "  three bits"


# --- 5. symbol names: NFC, and no twins told apart only by invisible characters --------------------

def _parity_spec(tmp_path: Path, zero: str, one: str) -> Path:
    """A 2-bit parity spec whose bit classes have the given TOML variant arrays."""
    path = tmp_path / "spec.toml"
    path.write_text(f'family = "parity"\nn_bits = 2\n[classes.0]\nvariants = {zero}\n'
                    f'[classes.1]\nvariants = {one}\n', "utf-8")
    return path


def test_symbol_names_are_nfc_normalised(tmp_path, cli):
    spec = _parity_spec(tmp_path, '["cafe\\u0301"]', '["1a"]')  # e + combining acute accent
    code, out, _ = cli(["synth", "--grammar", spec, "--out", tmp_path / "d"])
    assert code == 0
    vocab = (tmp_path / "d" / "vocab.json").read_text("utf-8")
    assert "caf\u00e9" in vocab and "cafe\u0301" not in vocab and "caf\u00e9" in out


@pytest.mark.parametrize("zero, one, fragments", [
    ('["0a", "0a\\u200b"]', '["1a"]',
     ["symbols '0a' (class '0') and '0a\\u200b' (class '0') differ only by invisible characters",
      "U+200B ZERO WIDTH SPACE"]),
    ('["x\\u200dy"]', '["xy\\u2060"]',
     ["'x\\u200dy' (class '0') and 'xy\\u2060' (class '1')", "U+200D ZERO WIDTH JOINER",
      "U+2060 WORD JOINER"]),
    ('["caf\\u00e9", "cafe\\u0301"]', '["1a"]', ["duplicate symbol 'café'", "NFC"]),
    ('["[MASK]\\u200b"]', '["1a"]', ["looks like a special token"]),
    ('["\\u200b"]', '["1a"]', ["has no visible character"]),
    ('["0 a"]', '["1a"]', ["must be a non-empty name without spaces"]),
])
def test_names_that_look_alike_are_refused(zero, one, fragments, tmp_path, cli):
    _refused(cli(["synth", "--grammar", _parity_spec(tmp_path, zero, one)]), *fragments)
    assert list(tmp_path.iterdir()) == [tmp_path / "spec.toml"]


# --- 6. options: finite floats, one value per option, corpus names --------------------------------

@pytest.mark.parametrize("args, fragment", [
    (["--lr", "inf"], "lr must be a finite number > 0, got inf"),
    (["--lr", "-1"], "lr must be a finite number > 0, got -1.0"),
    (["--tie-penalty", "inf"], "tie_penalty must be a finite number >= 0, got inf"),
    (["--config", "{emb_std = inf}"], "emb_std must be a finite number > 0, got inf"),
    (["--config", "{lr_min = -1.0}"], "lr_min must be a finite number >= 0, got -1.0"),
    (["--config", "{beta2 = 1.0}"], "beta2 must be in [0, 1), got 1.0"),
    (["--seeds", "1", "--seeds", "2"], "Option '--seeds' given 2 times; it holds one value"),
    (["--lr", "0.1", "--steps", "3", "--lr", "0.1"], "Option '--lr' given 2 times"),
])
def test_train_refuses_options_it_cannot_honour(args, fragment, dataset, tmp_path, cli):
    if args[0] == "--config":
        (tmp_path / "c.toml").write_text(args[1].strip("{}") + "\n")
        args = ["--config", tmp_path / "c.toml"]
    _refused(cli(["train", "--data", dataset, *args, "--out", tmp_path / "run"]), fragment)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args, fragment", [
    (["synth", "-g", "parity", "--grammar", "parity-dh"], "Option '--grammar' / '-g' given 2"),
    (["knn", "a", "b", "--baseline", "--no-baseline"],
     "Option '--baseline' / '--no-baseline' given 2 times"),
    (["verify-theorems", "--seed", "1", "--seed", "1"], "Option '--seed' given 2 times"),
])
def test_every_command_refuses_a_repeated_single_valued_option(args, fragment, cli):
    _refused(cli(args), fragment, f"(see `dhwt {args[0]} --help`)")


def test_repeatable_options_still_repeat(cli):
    code, out, _ = cli(["synth", "-g", "parity", "--set", "n_bits=2", "--set", "n_bits=3"])
    assert code == 0 and "8 class strings" in out  # 2^3: the later --set wins, by design


@pytest.mark.parametrize("corpus, fragments", [
    ("wikitext2", ["corpus 'wikitext2' is neither wikitext-2 nor an existing path",
                   "did you mean wikitext-2?"]),
    ("nothing-like-it", ["corpus 'nothing-like-it' is neither wikitext-2 nor an existing path"]),
    ("{empty}", ["no corpus at", "train.txt, valid.txt and test.txt", "wiki.train/valid/test"]),
])
def test_a_corpus_that_is_not_there_is_named(corpus, fragments, tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    corpus = corpus.replace("{empty}", str(tmp_path / "empty"))
    err = _refused(cli(["train", "--corpus", corpus, "--tokenizer", "word", "--seq-len", 4,
                        "--objective", "clm", "--batch-size", 2, "--out", tmp_path / "run"]),
                   *fragments)
    assert "did you mean" not in err or corpus == "wikitext2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


# --- 7. a user's files and flags, round three (issue 29) ------------------------------------------

def test_debug_may_follow_the_command(tmp_path, cli):
    np.save(tmp_path / "a.npy", np.random.default_rng(0).normal(size=(8, 3)))
    code, out, err = cli(["knn", tmp_path / "a.npy", tmp_path / "a.npy", "--debug", "--k", 2])
    assert code == 0 and "overlap  1.0000" in out, err
    with pytest.raises(DhwtError, match="is not a file"):  # --debug: the traceback, not a line
        main(["knn", "--debug", str(tmp_path / "missing.npy"), str(tmp_path / "a.npy")])


def test_an_eof_error_is_a_bug_not_ctrl_c(tmp_path, monkeypatch):
    """click turns EOFError into the Abort of Ctrl-C; dhwt must not say 'interrupted' (exit 130)
    for what is a bug: the EOFError itself surfaces."""
    def fails(*args: object) -> str:
        raise EOFError("No data left in file")

    monkeypatch.setattr("dhwt.commands.knn.knn_command", fails)
    with pytest.raises(EOFError, match="No data left"):
        main(["knn", "a.npy", "b.npy"])


def test_ctrl_c_is_one_line_even_if_it_left_an_object_half_built(spawn):
    """Ctrl-C inside a constructor (zipfile.ZipFile's, writing a report: CI saw it) leaves an
    object whose __del__ raises once it is freed at exit; stderr still holds the one line."""
    code = ("import sys\n"
            "from dhwt.cli import group\n"
            "class HalfBuilt:\n"
            "    def __del__(self):\n"
            "        raise AttributeError('no attribute _writing')\n"
            "def interrupted(*args, **kwargs):\n"
            "    held = HalfBuilt()\n"
            "    raise KeyboardInterrupt\n"
            "group.cli.main = interrupted\n"
            "group.main(sys.argv[1:])\n")
    out, err = spawn(["analyze", "run"], code=code).communicate(timeout=60)
    assert (out, err) == ("", "error: interrupted\n")


def test_a_users_bytes_are_quoted_briefly(tmp_path, cli):
    """A 2 MB index.json of random bytes, or one naming a 2 MB tensor, is named in a short line
    (the error once repeated the file's bytes: 5.7 MB)."""
    rng = np.random.default_rng(0)
    for name, index in (("bytes", rng.integers(0, 256, 2_000_000, np.uint8).tobytes()),
                        ("name", json.dumps({"weight_map": {"x" * 2_000_000: "a.safetensors"}})
                         .encode())):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors.index.json").write_bytes(index)
        code, out, err = cli(["diagnose", folder])
        assert code == 2 and out == "" and err.count("\n") == 1 and len(err) < 1_000, err[:300]
        assert err.startswith(f"error: cannot read {folder}" if name == "bytes" else
                              "error: no known embedding layout"), err[:300]


def test_the_cli_prints_any_message_as_one_bounded_line(monkeypatch, cli):
    def fails(*args: object) -> str:
        raise DhwtError("head " + "x\n" * 1_000_000 + "advice")

    monkeypatch.setattr("dhwt.commands.knn.knn_command", fails)
    code, _, err = cli(["knn", "a.npy", "b.npy"])
    assert code == 2 and err.count("\n") == 1 and len(err) <= len("error: \n") + LINE
    assert err.startswith("error: head x x") and err.endswith("x x advice\n")


def test_diagnose_with_counts_all_zero_has_one_never_seen_bucket(two_members, tmp_path, cli):
    n = read_snapshot(snapshot_paths(two_members)[-1]).input.shape[1]
    np.save(tmp_path / "zero.npy", np.zeros(n))
    code, _, err = cli(["diagnose", two_members, "--counts", tmp_path / "zero.npy",
                        "--out", tmp_path / "report"])
    assert code == 0, err
    rows = [line for line in (tmp_path / "report" / "report.md").read_text().splitlines()
            if re.match(r"\| (never seen|[0-9,]+(-[0-9,]+)?) \|", line)]
    assert len(rows) == 2 and all(row.startswith(f"| never seen | {n} |") for row in rows)


def test_a_run_named_with_an_at_sign_is_a_run(two_members, tmp_path, cli):
    run = tmp_path / "untie@2"
    shutil.copytree(two_members, run)
    _refused(cli(["knn", run, f"{run}@last"]),
             f"{run} is a run directory: name one of its snapshots, {run}@last or {run}@STEP "
             "(steps 0, 1, 2)")
    code, out, err = cli(["knn", f"{run}@last", f"{run}@0", "--no-baseline"])
    assert code == 0 and f"A: {run} step 2 input" in out and f"B: {run} step 0 input" in out, err


def test_analyze_with_no_token_seen_says_so_not_k(two_members, tmp_path, cli):
    n = read_snapshot(snapshot_paths(two_members)[-1]).input.shape[1]
    np.save(tmp_path / "zero.npy", np.zeros(n))
    code, _, err = cli(["analyze", two_members, "--tokens", "seen", "--counts",
                        tmp_path / "zero.npy", "--similarity", "knn", "--out", tmp_path / "rep"])
    assert code == 0, err
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "Skipped: no token was seen in training (every count is 0)." in text
    assert "k = " not in text.split("## Similarity")[1]
