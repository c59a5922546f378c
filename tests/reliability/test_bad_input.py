"""Bad input to every subcommand of the real CLI: exit code 2, one line `error: ...` that names
the problem, no traceback, nothing on stdout, and nothing written anywhere (the working directory,
the output paths, and the inputs themselves are checked byte for byte).

Cases here go beyond tests/commands/test_train.py, which covers the tie-schedule, seed and
dataset errors of `dhwt train`."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from dhwt.cli import cli as dhwt_group

CYCLE = """family = "automaton"
start = "s"
[classes.c]
variants = ["c"]
[states]
s = [{ emit = "c", to = "t", p = 1.0 }]
t = [{ emit = "c", to = "s", p = 0.5 }, { emit = "c", to = "end", p = 0.5 }]
"""
STUDY = """[data]
grammar = "parity"
set = {{ n_bits = 3 }}
{extra}
[train]
steps = 2
[[runs]]
name = "a"
{runs}
"""
FILES = {
    "file": "just a file\n",
    "bad.toml": "this = is = not toml\n",
    "cycle.toml": CYCLE,
    "nested.toml": "[trainer]\nd_model = 4\n",
    "study.toml": STUDY.format(extra="", runs=""),
    "study_section.toml": STUDY.format(extra="[plots]\nx = 1", runs=""),
    "study_no_runs.toml": '[data]\ngrammar = "parity"\n',
    "study_twice.toml": STUDY.format(extra="", runs='[[runs]]\nname = "a"'),
    "study_steps.toml": STUDY.format(extra="", runs="steps = 0"),
    "study_grammar.toml": STUDY.format(extra="", runs="").replace('"parity"', '"parrot"'),
    "study_set.toml": STUDY.format(extra="", runs="").replace("n_bits = 3", "n_bits = 0"),
    "study_measure.toml": STUDY.format(extra="", runs='[analysis]\nmeasure = "fast"'),
    "full/ds/keep.txt": "a dataset directory that is not empty\n",
    "other/study.toml": "# another study\n",
    "deep.toml": "x = " + "[" * 1000 + "]" * 1000 + "\n",  # tomllib's recursion gives out
    "empty.npy": "",
    "empty.pt": "",
    "empty.safetensors": "",
    "empty.txt": "",
    "junk.pt": "not a torch file\n",
}

# (args, fragment of the message[, why it fails today]); {name} is a path under the test's
# directory (FILES, or new), {data} the tiny dataset and {run} a finished run. A case with a
# reason is a known bug of another room, marked xfail(strict) so that its fix is noticed.
CASES = {
    "dhwt": [
        (["fly"], "No such command 'fly'"),
        (["--nope"], "No such option '--nope'"),
    ],
    "synth": [
        (["synth"], "Missing option '--grammar'"),
        (["synth", "--grammar", "parrot"], "unknown grammar 'parrot'"),
        (["synth", "--grammar", "parity", "--set", "n_bits"], "--set takes KEY=VALUE"),
        (["synth", "--grammar", "parity", "--set", "n_bits=0"],
         "'n_bits' must be an integer from 1 to 30"),
        (["synth", "--grammar", "parity", "--set", "nbits=5"], "unknown key 'nbits'"),
        (["synth", "--grammar", "parity", "--set", "n_bits=10"], "the limit is 50,000,000"),
        (["synth", "--grammar", "parity", "--set", "classes.0.p=[0.5, 0.6]"], "sum to 1.1"),
        (["synth", "--grammar", "parity", "--set", "classes.0.skew=1"], "must be in [0, 1)"),
        (["synth", "--grammar", "{bad.toml}"], "is not valid TOML"),
        (["synth", "--grammar", "{cycle.toml}"], "has the cycle s -> t -> s"),
        (["synth", "--grammar", "{deep.toml}"], "nests arrays or tables too deeply"),
        (["synth", "--grammar", "{full}"], "'{full}' is a directory, not a grammar TOML"),
        (["synth", "--grammar", "{data}"], "its dataset's grammar is '{data}/spec.toml'"),
        (["synth", "--grammar", "parity", "--valid-fraction", "abc"], "'abc' is not a valid float"),
        (["synth", "--grammar", "parity", "--valid-fraction", "1.5", "--out", "{ds}"],
         "valid_fraction must be in [0, 1), got 1.5"),
        (["synth", "--grammar", "parity", "--seed", "-1", "--out", "{ds}"],
         "seed must be >= 0, got -1"),
        (["synth", "--grammar", "parity", "--out", "{full/ds}"],
         "was not made by dhwt (no .dhwt marker inside), so --overwrite leaves it alone"),
        (["synth", "--grammar", "parity", "--out", "{file}/ds"], "{file}"),
        (["synth", "--grammar", "parity", "--valid-fraction", "1.5"], "valid_fraction"),
    ],
    "train": [
        (["train", "--data", "{data}", "--seeds", "1,1", "--out", "{run2}"],
         "seeds must be distinct"),
        (["train", "--data", "{data}", "--lr", "-1", "--out", "{run2}"],
         "lr must be a finite number > 0, got -1.0"),
        (["train", "--data", "{data}", "--lr", "nan", "--out", "{run2}"],
         "lr must be a finite number"),
        (["train", "--data", "{data}", "--eval-every", "0", "--out", "{run2}"],
         "eval_every must be >= 1"),
        (["train", "--data", "{data}", "--batch-size", "0", "--out", "{run2}"],
         "batch_size must be >= 1"),
        (["train", "--data", "{data}", "--threads", "x", "--out", "{run2}"],
         "'x' is not a valid integer"),
        (["train", "--data", "{file}", "--out", "{run2}"], "{file} is not a directory"),
        (["train", "--grammar", "{cycle.toml}", "--out", "{run2}"], "has the cycle"),
        (["train", "--data", "{data}", "--config", "{nested.toml}", "--out", "{run2}"],
         "has a table [trainer]"),
        (["train", "--data", "{data}", "--config", "{bad.toml}", "--out", "{run2}"],
         "is not valid TOML"),
        (["train", "--data", "{data}", "--config", "{deep.toml}", "--out", "{run2}"],
         "config file {deep.toml} nests arrays or tables too deeply"),
        (["train", "--grammar", "{full}", "--out", "{run2}"], "is a directory, not a grammar"),
        (["train", "--data", "{emptied}", "--out", "{run2}"],
         "cannot read {emptied}/strings.npz as a strings archive: the file is empty"),
        (["train", "--data", "{data}", "--out", "{file}/run"], "{file} is not a directory"),
        (["train", "--data", "{data}", "--out", "{run}"], "already exists; pass --overwrite"),
        (["train", "--out", "{data}", "--resume"], "no config.toml"),
        (["train", "--out", "{run}", "--resume", "--lr", "0.5"],
         "cannot resume {run} with lr = 0.5"),
        (["train", "--data", "{data}"], "Missing option '--out'"),
    ],
    "study": [
        (["study", "{missing.toml}", "--out", "{s}"], "{missing.toml} does not exist"),
        (["study", "{bad.toml}", "--out", "{s}"], "is not valid TOML"),
        (["study", "{deep.toml}", "--out", "{s}"], "study file {deep.toml} nests arrays"),
        (["study", "{study_section.toml}", "--out", "{s}"], "unknown sections ['plots']"),
        (["study", "{study_no_runs.toml}", "--out", "{s}"], "no [[runs]]"),
        (["study", "{study_twice.toml}", "--out", "{s}"], "run name 'a' appears twice"),
        (["study", "{study_steps.toml}", "--out", "{s}"], "steps must be >= 1, got 0"),
        (["study", "{study_grammar.toml}", "--out", "{s}"], "unknown grammar 'parrot'"),
        (["study", "{study_set.toml}", "--out", "{s}"], "'n_bits' must be an integer"),
        (["study", "{study_measure.toml}", "--out", "{s}"], "measure must be one of"),
        (["study", "{study.toml}", "--out", "{other}"], "{other} was not made by dhwt"),
        (["study", "{study.toml}"], "Missing option '--out'"),
    ],
    "verify-theorems": [
        (["verify-theorems", "--only", "T9"], "unknown theorem 'T9'"),
        (["verify-theorems", "--seed", "-1"], "--seed must be a non-negative integer"),
        (["verify-theorems", "--seed", "abc"], "'abc' is not a valid integer"),
        (["verify-theorems", "--fast"], "No such option '--fast'"),
        (["verify-theorems", "--only", ","], "names no theorem"),
    ],
    "analyze": [
        (["analyze", "{nothere}", "--out", "{a}"], "{nothere} is not a dhwt run directory"),
        (["analyze", "{data}", "--out", "{a}"], "is not a dhwt run directory"),
        (["analyze", "{run}", "--pairs", "0a-0b", "--out", "{a}"], "bad --pairs '0a-0b'"),
        (["analyze", "{run}", "--pairs", "0a:zz", "--out", "{a}"], "symbol 'zz' is not in"),
        (["analyze", "{run}", "--pairs", "0a:0b,1a:1a", "--out", "{a}"],
         "the pair 1a:1a is one symbol twice"),
        (["analyze", "{run}", "--tokens", "seen", "--counts", "{empty.npy}", "--out", "{a}"],
         "cannot read {empty.npy} as an array of token counts: the file is empty"),
        (["analyze", "{run}", "--measure", "fast", "--out", "{a}"],
         "Invalid value for '--measure'"),
        (["analyze", "{run}", "--out", "{file}/a"], "{file}"),
        (["analyze", "{run}"], "Missing option '--out'"),
    ],
    "knn": [
        (["knn"], "Missing argument 'A'"),
        (["knn", "{a.npy}"], "Missing argument 'B'"),
        (["knn", "{nothere.npy}", "{a.npy}"], "{nothere.npy} is not a file"),
        (["knn", "{file}", "{a.npy}"], "unknown format ''"),
        (["knn", "{a.npy}", "{b.npy}"], "A has 20 rows and B has 19"),
        (["knn", "{a.npy}", "{a.npy}", "--k", "0"], "k must be >= 1, got 0"),
        (["knn", "{a.npy}", "{a.npy}", "--k", "20"], "k must be an integer with 1 <= k"),
        (["knn", "{a.npy}", "{a.npy}", "--metric", "dot"], "Invalid value for '--metric'"),
        (["knn", "{run}@999", "{run}@last", "--k", "2"], "has no snapshot at step 999"),
        (["knn", "{run}@abc", "{a.npy}"], "the step must be a whole number or 'last'"),
        (["knn", "{run}@last", "{run}@last", "--k", "2", "--side-a", "middle"], "not 'middle'"),
        (["knn", "{a.npy}", "{a.npy}", "--tokens", "{nothere.txt}"],
         "{nothere.txt} does not exist"),
        (["knn", "{a.npy}", "{a.npy}", "--per-token", "{file}/knn.csv"], "Not a directory"),
        (["knn", "{empty.npy}", "{a.npy}"], "{empty.npy} is an empty file"),
        (["knn", "{a.npy}", "{empty.pt}"], "{empty.pt} is an empty file"),
        (["knn", "{empty.safetensors}", "{a.npy}"], "{empty.safetensors} is an empty file"),
        (["knn", "{junk.pt}", "{a.npy}"], "{junk.pt} is not a file written by torch.save"),
        (["knn", "{file}.npy", "{a.npy}"], "cannot read {file}.npy as a .npy array: it is not"),
        (["knn", "{a.npy}", "{a.npy}", "--tokens", "{empty.npy}"],
         "cannot read {empty.npy} as an array of token ids: the file is empty"),
        (["knn", "{a.npy}", "{a.npy}", "--weights", "{empty.npy}"],
         "cannot read {empty.npy} as an array of weights: the file is empty"),
        (["knn", "{a.npy}", "{a.npy}", "--tokens", "{empty.txt}"],
         "token ids file {empty.txt} names no token"),
        (["knn", "{huge.npy}", "{huge.npy}"], "A has values too large for float32 scores"),
        (["knn", "{run}", "{run}@last"],
         "{run} is a run directory: name one of its snapshots, {run}@last or {run}@STEP"),
    ],
    "diagnose": [
        (["diagnose"], "Missing argument 'PATH'"),
        (["diagnose", "{nothere}"], "{nothere} does not exist"),
        (["diagnose", "{data}"], "is neither a dhwt run directory"),
        (["diagnose", "{file}"], "is a file"),
        (["diagnose", "{run}", "--step", "999"], "has no snapshot of step 999"),
        (["diagnose", "{run}", "--queries", "few"],
         "queries must be a whole number or 'auto' or 'all', got 'few'"),
        (["diagnose", "{run}", "--k", "0"], "k must be >= 1, got 0"),
        (["diagnose", "{run}", "--device", "tpu"], "device must be one of"),
        (["diagnose", "{run}", "--out", "{file}"], "is a file"),
        (["diagnose", "{run}", "--counts", "{empty.npy}"],
         "cannot read {empty.npy} as an array of token counts: the file is empty"),
    ],
    "export": [
        (["export"], "Missing argument 'RUN'"),
        (["export", "{run}", "--out", "{new}"], "Missing option '--to'"),
        (["export", "{run}", "--to", "onnx", "--out", "{new}"], "Invalid value for '--to'"),
        (["export", "{nothere}", "--to", "hf", "--out", "{new}"],
         "{nothere} is not a dhwt run directory"),
        (["export", "{run}", "--to", "hf", "--out", "{new}"],
         "cannot be exported as transformers' GPT2LMHeadModel: a masked LM (causal false)"),
        (["export", "{run}", "--to", "hf", "--member", "5", "--out", "{new}"],
         "--member 5: {run} has 1 member (0 to 0, seeds 42)"),
        (["export", "{run}", "--to", "hf", "--step", "999", "--out", "{new}"],
         "keeps no checkpoint of step 999"),
        (["export", "{run}", "--to", "hf", "--out", "{file}"], "is a file"),
        (["export", "{run}", "--to", "hf", "--out", "{full}"],
         "holds files but no earlier export report (dhwt_export.json)"),
    ],
    "corpus-dh": [
        (["corpus-dh"], "give one source of counts"),
        (["corpus-dh", "--grammar", "parrot"], "unknown grammar 'parrot'"),
        (["corpus-dh", "--grammar", "{cycle.toml}"], "has the cycle s -> t -> s"),
        (["corpus-dh", "--grammar", "parity", "--order", "0"], "order must be >= 1, got 0"),
        (["corpus-dh", "--grammar", "parity", "--dim", "0"], "dim must be >= 1, got 0"),
        (["corpus-dh", "--grammar", "parity", "--top", "0"], "top must be >= 1, got 0"),
        (["corpus-dh", "--grammar", "{deep.toml}"], "nests arrays or tables too deeply"),
        (["corpus-dh", "--corpus", "{file}", "--tokenizer", "chars"], "unknown tokenizer"),
        (["corpus-dh", "--corpus", "{nothere}", "--tokenizer", "char"],
         "is neither wikitext-2 nor an existing path"),
        (["corpus-dh", "--grammar", "parity", "--out", "{file}/r"], "is not a directory"),
    ],
}


@pytest.fixture(scope="module")
def finished_run(dataset, tmp_path_factory) -> Path:
    """A finished two-step run (for --resume and analyze cases)."""
    from dhwt.languages import load_task
    from dhwt.config import TrainConfig
    from dhwt.training.runner import train_run

    run = tmp_path_factory.mktemp("finished") / "run"
    train_run(TrainConfig(data=str(dataset), steps=2, eval_every=1, snapshot_every=1),
          load_task(dataset, "mlm"), run)
    return run


@pytest.fixture
def place(tmp_path, dataset, finished_run):
    """Write FILES under tmp_path/in; return a function that replaces each {name} in a text by
    its path: {data} the dataset, {run} the finished run, anything else tmp_path/in/name."""
    root = tmp_path / "in"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    for name, rows in (("a.npy", 20), ("b.npy", 19)):  # embedding matrices for knn
        np.save(root / name, np.random.default_rng(rows).normal(size=(rows, 4)).astype("f4"))
    np.save(root / "huge.npy", np.full((20, 4), 1e300))  # squared, past float64's range
    (root / "file.npy").write_text("just a file\n")
    shutil.copytree(dataset, root / "emptied")
    (root / "emptied" / "strings.npz").write_bytes(b"")
    known = {"data": str(dataset), "run": str(finished_run)}
    return lambda text: re.sub(r"\{([^{}]+)\}", lambda m: known.get(m[1], str(root / m[1])),
                               text)


def _assert_refused(code: int, out: str, err: str, fragment: str) -> None:
    assert code == 2, (code, err)
    assert out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    assert fragment in err, err


def _all_cases() -> list:
    return [pytest.param(args, fragment, id=f"{command}: {' '.join(args)}",
                         marks=[pytest.mark.xfail(strict=True, reason=r) for r in known])
            for command, cases in CASES.items() for args, fragment, *known in cases]


@pytest.mark.parametrize("args, fragment", _all_cases())
def test_bad_input_is_one_error_line_exit_2_and_nothing_written(
        args, fragment, place, tmp_path, finished_run, monkeypatch, cli, rundirs):
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    args = [place(a) for a in args]
    before = rundirs.digest(tmp_path), rundirs.digest(finished_run)
    code, out, err = cli(args)
    _assert_refused(code, out, err, place(fragment))
    assert (rundirs.digest(tmp_path), rundirs.digest(finished_run)) == before
    assert not any(workdir.iterdir())


def test_every_subcommand_has_bad_input_cases():
    """A new subcommand (e.g. `dhwt knn`) must bring its cases here."""
    missing = sorted(set(dhwt_group.commands) - set(CASES))
    assert not missing, f"add bad-input cases for: {', '.join(missing)}"


@pytest.mark.slow
def test_the_console_script_reports_bad_input_the_same_way(place, tmp_path, rundirs, console):
    """A few cases through the installed `dhwt` script in fresh processes (run concurrently)."""
    cases = [(["fly"], "No such command 'fly'"),
             (["synth", "--grammar", "parity", "--set", "n_bits=0"], "'n_bits' must be an integer"),
             (["train", "--data", "{data}", "--lr", "-1", "--out", "{run2}"],
              "lr must be a finite number > 0"),
             (["study", "{study_steps.toml}", "--out", "{s}"], "steps must be >= 1")]
    before = rundirs.digest(tmp_path)
    outcomes = console(*([place(a) for a in args] for args, _ in cases), cwd=tmp_path)
    for (code, out, err), (_, fragment) in zip(outcomes, cases):
        _assert_refused(code, out, err, place(fragment))
    assert rundirs.digest(tmp_path) == before
