"""A user's files are never lost: what --overwrite may replace, one writer per directory, and
what an interrupted or resumed command says it did (dhwt.directories, on a real file system)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dhwt.directories import LOCK, MARKER, kind_of, lock
from dhwt.runs.checkpoints import list_checkpoints, load_checkpoint

STUDY = """[data]
grammar = "parity"
set = { n_bits = 3 }
valid_fraction = 0.0
[train]
steps = 4
eval_every = 2
snapshot_every = 2
checkpoint_every = 2
[[runs]]
name = "a"
"""
TRAIN = ["train", "--grammar", "parity", "--steps", "4", "--eval-every", "2",
         "--snapshot-every", "2", "--checkpoint-every", "2"]


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """A user's folder, the working directory: a study file, a grammar, unrelated files."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mystudy.toml").write_text(STUDY)
    (tmp_path / "notes.txt").write_text("a year of work\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "keep.txt").write_text("keep me\n")
    return tmp_path


def refused(outcome: tuple[int, str, str], *fragments: str) -> str:
    """The one-line error of a refused command (exit 2, nothing on stdout)."""
    code, out, err = outcome
    assert code == 2 and out == "" and len(err.splitlines()) == 1, (code, out, err)
    assert err.startswith("error: ") and all(f in err for f in fragments), err
    return err


@pytest.mark.parametrize("args", [
    ["study", "mystudy.toml", "--out", ".", "--overwrite"],
    ["study", "mystudy.toml", "--out", "sub/..", "--overwrite"],
    ["synth", "--grammar", "parity", "--out", ".", "--overwrite"],
    ["synth", "--grammar", "parity", "--out", "."],
    [*TRAIN, "--out", ".", "--overwrite"],
    [*TRAIN, "--out", "..", "--overwrite"],
])
def test_the_working_directory_and_its_ancestors_are_never_replaced(cli, folder, rundirs, args):
    before = rundirs.digest(folder)
    refused(cli(args), "working directory" if args[-2:] != ["..", "--overwrite"] else "ancestor")
    assert rundirs.digest(folder) == before
    assert sorted(p.name for p in folder.iterdir()) == ["mystudy.toml", "notes.txt", "sub"]


@pytest.mark.parametrize("command", [
    [*TRAIN, "--out", "sub"],
    ["synth", "--grammar", "parity", "--out", "sub"],
    ["study", "mystudy.toml", "--out", "sub"],
])
def test_overwrite_leaves_a_folder_dhwt_did_not_make(cli, folder, rundirs, command):
    before = rundirs.digest(folder)
    refused(cli([*command, "--overwrite"]), "sub was not made by dhwt", MARKER)
    assert rundirs.digest(folder) == before


def test_overwrite_replaces_only_its_own_kind(cli, folder, rundirs):
    assert cli(["synth", "--grammar", "parity", "--out", "ds"])[0] == 0
    before = rundirs.digest(folder / "ds")
    refused(cli(["train", "--data", "ds", "--out", "ds", "--overwrite"]),
            "ds holds a dhwt dataset, not a run")
    refused(cli(["study", "mystudy.toml", "--out", "ds", "--overwrite"]),
            "ds holds a dhwt dataset, not a study")
    assert rundirs.digest(folder / "ds") == before


def test_overwrite_never_deletes_the_commands_inputs(cli, folder, rundirs):
    assert cli([*TRAIN, "--out", "run"])[0] == 0
    (folder / "run" / "g.toml").write_text((folder / "run" / "data" / "spec.toml").read_text())
    (folder / "run" / "study.toml").write_text(STUDY)
    before = rundirs.digest(folder / "run")
    refused(cli(["train", "--config", "run/config.toml", "--out", "run", "--overwrite"]),
            "run holds run/config.toml, which this command reads")
    refused(cli(["train", "--data", "run/data", "--steps", "4", "--out", "run", "--overwrite"]),
            "which this command reads")
    refused(cli([*TRAIN[:2], "run/g.toml", *TRAIN[3:], "--out", "run", "--overwrite"]),
            "which this command reads")
    assert rundirs.digest(folder / "run") == before
    # a study file kept inside its own study directory, and a grammar inside a dataset
    assert cli(["study", "mystudy.toml", "--out", "st"])[0] == 0
    (folder / "st" / "copy.toml").write_text(STUDY)
    refused(cli(["study", "st/copy.toml", "--out", "st", "--overwrite"]),
            "which this command reads")
    assert cli(["synth", "--grammar", "parity", "--out", "ds"])[0] == 0
    (folder / "ds" / "g.toml").write_text((folder / "ds" / "spec.toml").read_text())
    refused(cli(["synth", "--grammar", "ds/g.toml", "--out", "ds", "--overwrite"]),
            "which this command reads")
    assert (folder / "st" / "copy.toml").is_file() and (folder / "ds" / "g.toml").is_file()


@pytest.mark.slow
def test_overwrite_replaces_dhwts_own_directory_whole(cli, folder):
    for args, kind in ([[*TRAIN, "--out", "out/run"], "run"],
                       [["synth", "--grammar", "parity", "--out", "out/ds"], "ds"],
                       [["study", "mystudy.toml", "--out", "out/st"], "st"]):
        assert cli(args)[0] == 0
        names, inode = sorted((folder / args[-1]).iterdir()), (folder / args[-1]).stat().st_ino
        code, out, err = cli([*args, "--overwrite"])
        assert code == 0, err
        assert sorted((folder / args[-1]).iterdir()) == names  # a new directory, the same names
        assert (folder / args[-1]).stat().st_ino != inode
        assert kind_of(folder / args[-1]) == {"ds": "dataset", "st": "study"}.get(kind, kind)
    assert sorted(p.name for p in (folder / "out").iterdir()) == ["ds", "run", "st"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["run", "ds", "st"])
def test_overwrite_never_deletes_what_a_user_put_in_dhwts_directory(cli, folder, rundirs, kind):
    """F1: a note, a subfolder, a study file: refused, named, all kept; a note inside a study's
    run too (`make study` passes --overwrite)."""
    args = {"run": [*TRAIN, "--out", "run"], "ds": ["synth", "--grammar", "parity", "--out", "ds"],
            "st": ["study", "mystudy.toml", "--out", "st"]}[kind]
    assert cli(args)[0] == 0
    (folder / kind / "NOTES.txt").write_text("notes\n")
    (folder / kind / "mine").mkdir()
    (folder / kind / "mine" / "a.txt").write_text("a\n")
    (folder / kind / "other.toml").write_text(STUDY)
    before = rundirs.digest(folder)
    for given in ([] if kind == "st" else [args]) + [[*args, "--overwrite"]]:
        err = refused(cli(given))  # without --overwrite, no hint to pass it (a study continues)
        assert err == (f"error: {kind} holds NOTES.txt, mine, other.toml, which dhwt did not "
                       "write and a replacement would delete; move them out first\n")
    assert rundirs.digest(folder) == before
    for name in ("NOTES.txt", "mine", "other.toml"):
        (folder / kind / name).rename(folder / f"{kind}-{name}")
    assert cli([*args, "--overwrite"])[0] == 0
    if kind == "st":
        (folder / "st" / "runs" / "a" / "notes.md").write_text("about run a\n")
        before = rundirs.digest(folder)
        refused(cli([*args, "--overwrite"]), "st holds runs/a/notes.md, which dhwt did not write")
        assert rundirs.digest(folder) == before


def test_a_study_continued_keeps_a_users_files(cli, folder, rundirs):
    """F1: continuing a study (the same command again) deletes nothing of the user's, not even
    in a run killed before its first checkpoint, which the study otherwise starts afresh."""
    assert cli(["study", "mystudy.toml", "--out", "st"])[0] == 0
    (folder / "st" / "NOTES.txt").write_text("notes\n")
    code, out, err = cli(["study", "mystudy.toml", "--out", "st"])
    assert code == 0 and (folder / "st" / "NOTES.txt").read_text() == "notes\n", err
    run = folder / "st" / "runs" / "a"
    for path in [run / "report.md", *(run / "checkpoints").iterdir()]:
        path.unlink()  # as if killed before its first checkpoint
    (run / "mine.txt").write_text("mine\n")
    before = rundirs.digest(folder)
    refused(cli(["study", "mystudy.toml", "--out", "st"]),
            "st/runs/a holds mine.txt, which dhwt did not write")
    assert rundirs.digest(folder) == before
    (run / "mine.txt").unlink()
    assert cli(["study", "mystudy.toml", "--out", "st"])[0] == 0
    assert (run / "report.md").is_file() and (folder / "st" / "NOTES.txt").is_file()


def test_a_study_run_with_its_report_but_no_checkpoint_is_refused_not_retrained(cli, folder,
                                                                                 rundirs):
    """A finished run whose checkpoints were deleted (to save space) cannot be shown finished
    (dhwt.runs.run.is_finished) nor resumed: the study says so and deletes nothing."""
    assert cli(["study", "mystudy.toml", "--out", "st"])[0] == 0
    for path in (folder / "st" / "runs" / "a" / "checkpoints").iterdir():
        path.unlink()
    before = rundirs.digest(folder)
    refused(cli(["study", "mystudy.toml", "--out", "st"]),
            "run 'a' of st has its report but no checkpoint (deleted?)", "--overwrite")
    assert rundirs.digest(folder) == before


def test_a_directory_of_another_kind_gets_no_hint_to_overwrite_it(cli, folder, rundirs):
    """F21: --overwrite would be refused, so the message never suggests it."""
    assert cli([*TRAIN, "--out", "run"])[0] == 0
    before = rundirs.digest(folder)
    for extra in ([], ["--overwrite"]):
        err = refused(cli(["study", "mystudy.toml", "--out", "run", *extra]))
        assert err == ("error: run holds a dhwt run, not a study; --overwrite replaces only a "
                       "study (move or delete it yourself)\n")
    assert rundirs.digest(folder) == before


@pytest.mark.parametrize("command", [
    ["synth", "--grammar", "parity", "--out"],
    [*TRAIN, "--out"],
    ["study", "mystudy.toml", "--out"],
    ["study", "init.toml", "--out"],
    ["analyze", "run", "--out"],
    ["diagnose", "run", "--out"],
    ["corpus-dh", "--grammar", "parity", "--out"],
    ["export", "run", "--to", "hf", "--out"],
])
@pytest.mark.parametrize("out", ["loop", "loop/x"])
def test_out_a_symbolic_link_loop_is_one_true_error_line(cli, folder, rundirs, command, out):
    """F11: no RuntimeError traceback, no untrue "File exists"."""
    if command[0] in ("analyze", "diagnose"):
        assert cli([*TRAIN, "--out", "run"])[0] == 0
    (folder / "init.toml").write_text(STUDY + '[[runs]]\nname = "b"\ninit_from = "a"\n')
    (folder / "loop").symlink_to("loop")
    before = rundirs.digest(folder)
    refused(cli([*command, out, *(["--overwrite"] if command[0] in ("synth", "train", "study")
                                  else [])]),
            f"{out}: a symbolic link in it loops (too many levels of symbolic links)")
    assert rundirs.digest(folder) == before


def test_resume_of_a_missing_directory_says_so(cli, folder):
    """F46: not "no config.toml"."""
    refused(cli(["train", "--out", "nowhere", "--resume"]),
            "cannot resume nowhere: no such directory")
    assert not (folder / "nowhere").exists()


def test_an_empty_directory_counts_as_absent(cli, folder):
    (folder / "empty").mkdir()
    assert cli([*TRAIN, "--out", "empty"])[0] == 0
    assert kind_of(folder / "empty") == "run"


def test_a_second_writer_is_refused_while_the_first_holds_the_lock(cli, folder, rundirs):
    assert cli([*TRAIN, "--out", "run"])[0] == 0
    assert cli(["synth", "--grammar", "parity", "--out", "ds"])[0] == 0
    assert cli(["study", "mystudy.toml", "--out", "st"])[0] == 0
    busy = f"is being written by process {os.getpid()}"
    with lock(folder / "run"), lock(folder / "ds"), lock(folder / "st"):
        before = rundirs.digest(folder)
        refused(cli(["train", "--out", "run", "--resume", "--steps", "6"]), f"run {busy}")
        refused(cli([*TRAIN, "--out", "run", "--overwrite"]), f"run {busy}")
        refused(cli(["synth", "--grammar", "parity", "--out", "ds", "--overwrite"]), busy)
        refused(cli(["study", "mystudy.toml", "--out", "st"]), f"st {busy}")
        refused(cli(["study", "mystudy.toml", "--out", "st", "--overwrite"]), busy)
        assert rundirs.digest(folder) == before
    assert cli(["train", "--out", "run", "--resume", "--steps", "6"])[0] == 0  # released


@pytest.mark.slow
def test_the_lock_of_a_killed_writer_never_blocks(tmp_path):
    (tmp_path / "d").mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from dhwt.directories import lock; held = lock(Path(sys.argv[1])); print('held', "
         "flush=True); time.sleep(60)", tmp_path / "d"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(Exception, match=f"being written by process {holder.pid}"):
            lock(tmp_path / "d")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with lock(tmp_path / "d"):
        assert (tmp_path / "d" / LOCK).read_text().strip() == str(os.getpid())


@pytest.mark.slow
@pytest.mark.long
def test_two_runs_started_at_once_on_one_directory_leave_one_run(console, folder):
    args = [*TRAIN[:4], "200", "--out", "twin"]
    outcomes = console(args, args, cwd=folder)
    codes = sorted(code for code, _, _ in outcomes)
    assert codes == [0, 2], outcomes
    loser = next(err for code, _, err in outcomes if code == 2)
    assert any(f in loser for f in ("being written by process", "was created by",
                                    "already exists")), loser
    assert len(loser.splitlines()) == 1
    assert kind_of(folder / "twin") == "run" and (folder / "twin" / "report.md").is_file()
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []


# -- what an interrupted command says -------------------------------------------------------
def test_interrupted_synth_says_nothing_was_written(cli, folder, monkeypatch):
    import dhwt.languages.synthesis as synth

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(synth, "compute_truth", interrupt)
    code, out, err = cli(["synth", "--grammar", "parity", "--out", "ds"])
    assert code == 130 and err.strip() == "error: interrupted; nothing was written"
    assert sorted(p.name for p in folder.iterdir()) == ["mystudy.toml", "notes.txt", "sub"]


def test_interrupted_run_names_its_last_checkpoint_or_that_there_is_none(cli, folder,
                                                                         monkeypatch,
                                                                         interrupt_at):
    interrupt_at(3)
    code, _, err = cli([*TRAIN, "--out", "run"])
    assert code == 130 and err.strip() == (
        "error: interrupted at step 3; last checkpoint: run/checkpoints/step_0000002.pt; "
        "resume continues from it: `dhwt train --out run --resume`")
    code, out, _ = cli(["train", "--out", "run", "--resume"])
    assert code == 0 and out.startswith("resumed at step 2 and trained to step 4 (2 steps)")

    def interrupt(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("dhwt.training.trainer.save_checkpoint", interrupt)
    code, _, err = cli([*TRAIN, "--out", "early"])
    assert code == 130 and "no checkpoint was written yet: start early again with " \
        "--overwrite" in err


# -- resume: what it did, and extensions ----------------------------------------------------
def test_resume_of_a_finished_run_leaves_it_untouched(cli, folder, rundirs):
    assert cli([*TRAIN, "--out", "run"])[0] == 0
    before = rundirs.digest(folder / "run")
    stamps = {p: p.stat().st_mtime_ns for p in (folder / "run").rglob("*") if p.name != LOCK}
    code, out, err = cli(["train", "--out", "run", "--resume"])
    assert code == 0 and out.strip() == ("run is already trained to step 4; nothing to do (to "
                                         "train on, --resume --steps M with M > 4)"), err
    assert rundirs.digest(folder / "run") == before
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


def test_resume_with_more_steps_extends_a_run_as_if_configured_so(cli, folder, rundirs):
    """Extending 4 -> 8 steps ends with the weights and optimizer of a fresh 8-step run (the
    default periodic-cosine lr depends on the step alone); shortening is refused."""
    assert cli([*TRAIN, "--out", "short"])[0] == 0
    code, out, err = cli(["train", "--out", "short", "--resume", "--steps", "8"])
    assert code == 0 and out.startswith("resumed at step 4 and trained to step 8 (4 steps)"), err
    assert cli([*TRAIN[:4], "8", *TRAIN[5:], "--out", "long"])[0] == 0
    extended, fresh = (load_checkpoint(list_checkpoints(folder / run / "checkpoints")[-1])
                       for run in ("short", "long"))
    assert extended["step"] == fresh["step"] == 8
    for part in ("model", "optimizer"):
        rundirs.assert_same(extended[part], fresh[part], part)
    assert 'steps = 8' in (folder / "short" / "config.toml").read_text()
    steps = {line["step"] for line in rundirs.metric_lines(folder / "short")}
    assert steps == {0, 2, 4, 6, 8}
    before = rundirs.digest(folder / "short")
    refused(cli(["train", "--out", "short", "--resume", "--steps", "6"]),
            "may extend it, not shorten it")
    assert rundirs.digest(folder / "short") == before


@pytest.mark.slow
def test_a_run_stopped_while_extended_is_unfinished_and_its_study_continues_it(
        cli, folder, rundirs, interrupt_at):
    """A study's run extended 4 -> 8 steps and stopped at step 7 has a config.toml of 8 steps,
    checkpoints to step 6 and no report (the extension removed the report of step 4; an
    extension by earlier code left it): it is not finished, either way, and the study command
    continues it to step 8 as the extension would have gone on uninterrupted."""
    from dhwt.runs import load_run
    from dhwt.runs.run import is_finished

    for out in ("st", "whole"):
        assert cli(["study", "mystudy.toml", "--out", out])[0] == 0
    assert cli(["train", "--out", "whole/runs/a", "--resume", "--steps", "8"])[0] == 0
    run = folder / "st" / "runs" / "a"
    report = (run / "report.md").read_text()
    interrupt_at(7)
    assert cli(["train", "--out", run, "--resume", "--steps", "8"])[0] == 130
    assert "steps = 8" in (run / "config.toml").read_text() and not (run / "report.md").exists()
    assert list_checkpoints(run / "checkpoints")[-1].name == "step_0000006.pt"
    assert not is_finished(run)
    (run / "report.md").write_text(report)
    assert not is_finished(run) and not load_run(run).finished
    code, _, err = cli(["study", "mystudy.toml", "--out", "st"])
    assert code == 0, err
    assert is_finished(run) and load_run(run).steps == [0, 2, 4, 6, 8]
    for part in ("embeddings/step_0000008.safetensors", "metrics.jsonl"):
        assert (run / part).read_bytes() == (folder / "whole/runs/a" / part).read_bytes(), part


def test_an_extension_stopped_before_its_report_writes_the_report_on_resume(cli, folder,
                                                                          monkeypatch):
    """Stopped after its new last step but before its report: the run has finished (its record
    says so, sessions.json) but has no report (the report of the steps before is gone), and
    --resume writes the new one without training."""
    from dhwt.commands import train as train_module
    from dhwt.runs.run import is_finished

    assert cli([*TRAIN, "--out", "run"])[0] == 0
    assert "- 4 steps," in (folder / "run" / "report.md").read_text()
    write_run_report = train_module.write_run_report
    monkeypatch.setattr(train_module, "write_run_report",
                        lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
    code, _, err = cli(["train", "--out", "run", "--resume", "--steps", "8"])
    assert code == 130 and "training is done and --resume writes it" in err, err
    assert list_checkpoints(folder / "run" / "checkpoints")[-1].name == "step_0000008.pt"
    assert is_finished(folder / "run") and not (folder / "run" / "report.md").exists()
    monkeypatch.setattr(train_module, "write_run_report", write_run_report)
    code, out, err = cli(["train", "--out", "run", "--resume"])
    assert code == 0 and "training had reached step 8; wrote its report" in out, err
    assert "- 8 steps," in (folder / "run" / "report.md").read_text()
    assert is_finished(folder / "run")


# -- a study is checked whole before it trains ------------------------------------------------
def test_a_study_with_an_unknown_pair_symbol_trains_nothing(cli, folder):
    (folder / "pairs.toml").write_text(STUDY + '[analysis]\npairs = [["0a", "0z"]]\n')
    refused(cli(["study", "pairs.toml", "--out", "st"]), "'0z', which is not a symbol")
    assert not (folder / "st").exists()


def test_a_study_run_records_the_splits_its_dataset_used(cli, folder):
    assert cli(["study", "mystudy.toml", "--out", "st"])[0] == 0
    config = (folder / "st" / "runs" / "a" / "config.toml").read_text()
    assert "valid_fraction = 0.0\n" in config
    truth = (folder / "st" / "data" / "truth.json").read_text()
    assert '"valid": 0' in truth



def test_analyze_never_writes_into_a_run_directory(cli, folder, rundirs):
    assert cli([*TRAIN, "--out", "run"])[0] == 0
    before = rundirs.digest(folder / "run")
    refused(cli(["analyze", "run", "--out", "run"]), "--out run is a run directory")
    refused(cli(["analyze", "run", "--out", "run/data"]), "--out run/data is a dataset directory")
    refused(cli(["analyze", "run", "--out", "run/analysis", "--similarity", "none"]),
            "--out run/analysis is inside run, a dhwt run directory, which holds only what dhwt "
            "writes there; give a path outside it")
    assert rundirs.digest(folder / "run") == before


def test_analyze_never_writes_into_a_study_directory(cli, folder, rundirs):
    """F2: a study's own report and figures are not an analyze report."""
    assert cli([*TRAIN, "--out", "run"])[0] == 0
    assert cli(["study", "mystudy.toml", "--out", "st"])[0] == 0
    before = rundirs.digest(folder)
    refused(cli(["analyze", "run", "--out", "st"]), "--out st is a study directory, whose own "
            "files (report.md, figures/) the analysis would replace; give another directory")
    refused(cli(["analyze", "st/runs/a", "--out", "st/runs"]), "--out st/runs is inside st, a "
            "dhwt study directory")
    assert rundirs.digest(folder) == before


@pytest.mark.slow
def test_a_report_that_cannot_be_written_says_what_and_where(cli, folder, spawn):
    """F42: a write that fails (a file-size limit, as a full disk) names the report, in one line;
    nothing is left, not even a staging directory."""
    import resource

    assert cli([*TRAIN, "--out", "run"])[0] == 0
    (folder / "reports").mkdir()
    rep = folder / "reports" / "rep"
    proc = spawn(["analyze", folder / "run", "--similarity", "none", "--out", rep],
                 preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000)))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and out == ""
    assert err.startswith(f"error: cannot write the analyze report {rep}: File too large"), err
    assert err.count("\n") == 1 and list((folder / "reports").iterdir()) == []


@pytest.mark.slow
@pytest.mark.long
def test_ctrl_c_in_analyze_exits_130_and_keeps_the_earlier_report(cli, folder, spawn, rundirs):
    """F23 in a real process: Ctrl-C while the analysis runs: one error line, exit 130, the
    earlier report unchanged, nothing beside it."""
    import time

    assert cli([*TRAIN, "--seeds", "1-3", "--out", "run"])[0] == 0
    (folder / "reports").mkdir()
    rep = folder / "reports" / "rep"
    assert cli(["analyze", "run", "--similarity", "none", "--out", rep])[0] == 0
    before = rundirs.digest(rep)
    proc = spawn(["analyze", folder / "run", "--similarity", "knn,cka,procrustes", "--out", rep])
    while not any(p.name.startswith(".rep.staging-") for p in (folder / "reports").iterdir()):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and out == ""
    assert err.strip() == f"error: interrupted; {rep} was left as it was"
    assert rundirs.digest(rep) == before
    assert [p.name for p in (folder / "reports").iterdir()] == ["rep"]


@pytest.mark.parametrize("command", ["diagnose", "corpus-dh"])
def test_a_report_folder_is_replaced_whole_or_not_at_all(cli, folder, rundirs, monkeypatch,
                                                         command):
    """F4/F5 for diagnose and corpus-dh: Ctrl-C once some of the new files are written leaves the
    earlier report as it was, nothing beside it."""
    import dhwt.report.corpus_dh_report as corpus_dh_report
    import dhwt.report.diagnose_report as diagnose_report

    if command == "diagnose":
        assert cli([*TRAIN, "--out", "run"])[0] == 0
    args = {"diagnose": ["diagnose", "run", "--k", "2"],
            "corpus-dh": ["corpus-dh", "--grammar", "parity", "--order", "full"]}[command]
    (folder / "reports").mkdir()
    assert cli([*args, "--out", "reports/rep"])[0] == 0
    before = rundirs.digest(folder / "reports")

    def stop(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(diagnose_report if command == "diagnose" else corpus_dh_report,
                        "write_document", stop)
    code, out, err = cli([*args, "--out", "reports/rep"])
    assert code == 130 and err.strip() == "error: interrupted; reports/rep was left as it was"
    assert rundirs.digest(folder / "reports") == before
