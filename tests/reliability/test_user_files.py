"""Issue 51: nothing dhwt did not write is deleted or replaced, at any depth of what it manages.

Every writer that replaces a directory or a file (train, study and synth --overwrite, analyze,
diagnose, corpus-dh and export --out on an earlier output, knn --per-token) is run again with a
user's file planted in every folder of what it would replace: it is refused with one `error:`
line that names every planted file (and nothing of dhwt's, so what dhwt writes and what it
knows it wrote cannot drift apart), and every planted file stays, byte for byte. An output put
inside a run, study or dataset directory is refused, and so is a study's --jobs without
submitit, before anything is written."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.reliability.test_overwrite import STUDY as OVERWRITE_STUDY, TRAIN as OVERWRITE_TRAIN

TRAIN = [*OVERWRITE_TRAIN, "--tensorboard"]  # tensorboard/seed_S/ too
STUDY = OVERWRITE_STUDY.replace("[[runs]]", "tensorboard = true\n[[runs]]")
TEXT_STUDY = """[data]
corpus = "corpus"
tokenizer = "word"
seq_len = 8
[train]
objective = "mlm"
steps = 2
batch_size = 4
eval_every = 2
snapshot_every = 2
seeds = "1-2"
[[runs]]
name = "tied"
[[runs]]
name = "untied"
tie_schedule = "untied"
"""
#: A causal transformer that transformers' GPT2LMHeadModel computes (dhwt export).
GPT2 = """grammar = "parity"
objective = "clm"
positions = "learned"
norm = "pre"
final_norm = true
d_model = 8
n_layers = 1
n_heads = 2
d_ff = 16
steps = 2
eval_every = 2
snapshot_every = 2
checkpoint_every = 2
"""
REPORT = "did not write and replacing its earlier report would delete"
KIND = "which dhwt did not write and a replacement would delete"
#: writer: (commands that make what it replaces, what it replaces, the command that would
#: replace it, how its refusal says what it would delete)
WRITERS = {
    "train": ([[*TRAIN, "--out", "run"]], "run", [*TRAIN, "--out", "run", "--overwrite"], KIND),
    "study": ([["study", "s.toml", "--out", "st", "--jobs", "1"]], "st",
              ["study", "s.toml", "--out", "st", "--overwrite"], KIND),
    "text study": ([["study", "t.toml", "--out", "ts"]], "ts",
                   ["study", "t.toml", "--out", "ts", "--overwrite"], KIND),
    "synth": ([["synth", "--grammar", "parity", "--out", "ds"]], "ds",
              ["synth", "--grammar", "parity", "--out", "ds", "--overwrite"], KIND),
    "analyze": ([[*TRAIN, "--seeds", "1-2", "--out", "run"],
                 ["analyze", "run", "--out", "rep"]], "rep", ["analyze", "run", "--out", "rep"],
                REPORT),
    "diagnose": ([[*TRAIN, "--tie-schedule", "untied", "--out", "run"],
                  ["diagnose", "run", "--k", "2", "--out", "rep"]], "rep",
                 ["diagnose", "run", "--k", "2", "--out", "rep"], REPORT),
    "corpus-dh": ([["corpus-dh", "--grammar", "parity", "--order", "full", "--out", "rep"]],
                  "rep", ["corpus-dh", "--grammar", "parity", "--order", "full", "--out", "rep"],
                  REPORT),
    "export": ([["train", "--config", "gpt2.toml", "--out", "run"],
                ["export", "run", "--to", "hf", "--out", "exp"]], "exp",
               ["export", "run", "--to", "hf", "--out", "exp"], REPORT),
}


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """A user's folder, the working directory: study files, a corpus, a config, two matrices."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DHWT_CACHE", str(tmp_path / "cache"))
    (tmp_path / "s.toml").write_text(STUDY)
    (tmp_path / "t.toml").write_text(TEXT_STUDY)
    (tmp_path / "gpt2.toml").write_text(GPT2)
    (tmp_path / "corpus").mkdir()
    for split in ("train", "valid", "test"):
        (tmp_path / "corpus" / f"{split}.txt").write_text("the cat sat the dog sat\n" * 20)
    rng = np.random.default_rng(0)
    for name in ("a.npy", "b.npy"):
        np.save(tmp_path / name, rng.standard_normal((12, 4)))
    return tmp_path


def plant(root: Path) -> list[str]:
    """A user's file in `root` and in every folder under it (a figure of theirs in a figures/
    folder), and a folder of theirs at the top: what was planted, relative to `root`."""
    planted = []
    for where in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
        path = where / ("mine.png" if where.name == "figures" else "NOTES.md")
        path.write_text(f"kept by hand in {where.name}\n")
        planted.append(str(path.relative_to(root)))
    (root / "mine").mkdir()
    (root / "mine" / "a.txt").write_text("a\n")
    return [*planted, "mine"]


def named(outcome: tuple[int, str, str], what: str) -> list[str]:
    """The paths one refusal (one `error:` line, exit 2, nothing on stdout, saying `what`) names
    as what it would delete."""
    code, out, err = outcome
    assert code == 2 and out == "" and err.count("\n") == 1 and what in err, err
    found = re.fullmatch(r"error: (?:--out )?\S+ holds (.*), which \S+ did not write .*\n", err)
    assert found, err
    return found[1].split(", ")


@pytest.mark.slow
@pytest.mark.parametrize("writer", WRITERS)
def test_a_writer_never_deletes_what_a_user_put_anywhere_in_what_it_replaces(
        cli, folder, rundirs, writer):
    if writer == "study":
        pytest.importorskip("submitit")  # jobs/: the files of the study's jobs
    make, target, again, what = WRITERS[writer]
    for args in make:
        code, _, err = cli(args)
        assert code == 0, err
    planted = plant(folder / target)
    before = rundirs.digest(folder)
    assert sorted(named(cli(again), what)) == sorted(planted)
    assert rundirs.digest(folder) == before


@pytest.mark.parametrize("per_token", [
    "a.npy",                # the command's own input, which --per-token would turn into CSV
    "scores.csv",           # a file of the user's
])
def test_knn_per_token_replaces_only_a_per_token_csv_of_its_own(cli, folder, rundirs, per_token):
    args = ["knn", "a.npy", "b.npy", "--k", "2", "--no-baseline", "--per-token"]
    (folder / "scores.csv").write_text("token,score\n0,1\n")
    before = rundirs.digest(folder)
    code, out, err = cli([*args, per_token])
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"error: --per-token {per_token} ") and (
        "which this command reads" if per_token == "a.npy" else "was not written by dhwt") in err
    assert rundirs.digest(folder) == before
    assert cli([*args, "mine.csv"])[0] == 0
    assert cli([*args, "mine.csv"])[0] == 0  # its own earlier CSV: replaced


def test_an_output_inside_a_run_study_or_dataset_is_refused(cli, folder, rundirs):
    """A report, an export, a per-token file or a dataset put inside dhwt's directory would be
    deleted (or, now, block) its next --overwrite; a run's or a study's dataset is what its runs
    read."""
    assert cli([*TRAIN, "--out", "run"])[0] == 0
    before = rundirs.digest(folder)
    for args, out in (
            (["analyze", "run", "--similarity", "none", "--out"], "run/analysis"),
            (["diagnose", "run", "--k", "2", "--out"], "run/figures/diag"),
            (["corpus-dh", "--grammar", "parity", "--order", "full", "--out"], "run/cdh"),
            (["export", "run", "--to", "hf", "--out"], "run/exp"),
            (["knn", "a.npy", "b.npy", "--k", "2", "--per-token"], "run/knn.csv"),
            (["synth", "--grammar", "parity", "--overwrite", "--out"], "run/data"),
            (["synth", "--grammar", "parity", "--out"], "run/data/more")):
        code, stdout, err = cli([*args, out])
        option = "--per-token" if args[0] == "knn" else "--out"
        assert code == 2 and stdout == "" and err == (
            f"error: {option} {out} is inside {'run/data' if out == 'run/data/more' else 'run'}"
            f", a dhwt {'dataset' if out == 'run/data/more' else 'run'} directory, which holds "
            "only what dhwt writes there; give a path outside it\n"), err
    assert rundirs.digest(folder) == before


def test_study_jobs_without_submitit_write_nothing(cli, folder, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit fails
    code, out, err = cli(["study", "s.toml", "--out", "st", "--jobs", "2"])
    assert code == 2 and out == "" and err == (
        "error: a study's jobs (--jobs, --executor) run through submitit: pip install "
        "'dhwt[cluster]'\n")
    assert not (folder / "st").exists()
