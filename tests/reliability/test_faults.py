"""Faults during `dhwt train`: a real process killed (SIGKILL) at seeded random steps, between
checkpoints and in the middle of a snapshot or checkpoint write, or interrupted (SIGINT); damaged
checkpoints and metrics; a forced NaN; an output directory that cannot be written or a disk that
fills up. The oracle for every recovery is one uninterrupted run of the same command: the resumed
run directory must equal it file for file (metrics.jsonl, snapshots, report, figure byte for byte;
checkpoints as states: weights, tying, optimizer, step, RNGs)."""

from __future__ import annotations

import json
import math
import random
import re
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from dhwt.directories import LOCK, MARKER
from dhwt.runs.checkpoints import checkpoint_path, latest_checkpoint, list_checkpoints

pytestmark = pytest.mark.long  # whole runs killed, resumed or launched twice: `make test-long`

STEPS = 160
CHECKPOINT_EVERY = 40
#: Two seeds, a tie switch each way, every step evaluated (so a kill lands between checkpoints
#: with metric lines past the newest one, which a resume must cut).
ARGS = ["--seeds", "1-2", "--steps", STEPS, "--batch-size", 8, "--lr", 0.01,
        "--tie-schedule", "untie@50,tie@110:mean", "--eval-every", 1, "--snapshot-every", 10,
        "--checkpoint-every", CHECKPOINT_EVERY, "--threads", 1]
#: What Ctrl-C prints: the step, the last checkpoint, how to go on.
INTERRUPTED = re.compile(r"error: interrupted at step (\d+); last checkpoint: (\S+); resume "
                         r"continues from it: `dhwt train --out (\S+) --resume`\n")
#: Run in a child: the real CLI, with os.fsync held for 60 s on the temporary file whose name
#: contains argv[1], so the parent can kill the child in the middle of that atomic write.
SLOW_WRITE = """
import os, sys, time
target, real_fsync = sys.argv.pop(1), os.fsync
def fsync(fd):
    if target in os.readlink(f"/proc/self/fd/{fd}"):
        time.sleep(60)
    real_fsync(fd)
os.fsync = fsync
from dhwt.cli import main
main(sys.argv[1:])
"""


def _train(dataset: Path, out: Path, *extra: object) -> list[object]:
    return ["train", "--data", dataset, *ARGS, *extra, "--out", out]


@pytest.fixture(scope="module")
def reference(dataset, tmp_path_factory, cli) -> Path:
    """The uninterrupted run every recovery must reproduce."""
    out = tmp_path_factory.mktemp("reference") / "run"
    assert cli(_train(dataset, out))[0] == 0
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == [
        "step_0000120.pt", "step_0000160.pt"]
    return out


def _progress(run: Path) -> int:
    """The newest step with a complete line in metrics.jsonl (-1 before the first)."""
    try:
        tail = (run / "metrics.jsonl").read_bytes()[-400:]
    except FileNotFoundError:
        return -1
    lines = tail.split(b"\n")[:-1]  # the last piece is empty or a line still being written
    return json.loads(lines[-1])["step"] if lines and lines[-1].startswith(b'{"step"') else -1


def _wait_for(condition, proc: subprocess.Popen, what: str, timeout: float = 120.0) -> None:
    """Poll `condition()` every millisecond until it holds; fail if the process ends first."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the run ended before {what}: {proc.communicate()[1][-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.001)


def _sigkill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL


def _resume_in_process(cli, run: Path) -> None:
    code, out, err = cli(["train", "--out", run, "--resume"])
    assert (code, err) == (0, ""), err
    assert f"trained to step {STEPS}" in out


def _one_error_line(err: str) -> str:
    """The message of a CLI failure: exactly one line `error: ...`, no traceback."""
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err[len("error: "):-1]


# -- SIGKILL, SIGINT ------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("trial", range(2))
def test_killed_or_interrupted_at_random_steps_then_resumed_equals_an_uninterrupted_run(
        trial, dataset, reference, tmp_path, spawn, cli, rundirs):
    """Trial 0: SIGKILL at two seeded random steps (the second time while the run is resumed).
    Trial 1: Ctrl-C (SIGINT) at a random step, which must print one `error:` line and exit 130;
    then SIGKILL as soon as the resumed run's next checkpoint file exists. A stop at a random step
    lands between checkpoints: metric lines and snapshots past the newest checkpoint exist, and
    the resume must cut and rewrite them."""
    rng = random.Random(6000 + trial)
    first = rng.randrange(5, STEPS - 2 * CHECKPOINT_EVERY)
    run = tmp_path / "run"
    proc = spawn(_train(dataset, run))
    _wait_for(lambda: _progress(run) >= first, proc, f"step {first}")
    if trial == 0:
        _sigkill(proc)
    else:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and out == ""
        said = INTERRUPTED.fullmatch(err)
        assert said and Path(said[2]) == latest_checkpoint(run / "checkpoints")[0], err
        assert Path(said[3]) == run and int(said[1]) >= first
    landed = [(latest_checkpoint(run / "checkpoints")[1]["step"], _progress(run))]
    proc = spawn(["train", "--out", run, "--resume"])
    if trial == 0:
        second = rng.randrange(first + 1, STEPS - 50)  # a margin: the kill lands before the end
        _wait_for(lambda: _progress(run) >= second, proc, f"step {second}")
    else:
        path = checkpoint_path(run / "checkpoints",
                               (landed[0][1] // CHECKPOINT_EVERY + 1) * CHECKPOINT_EVERY)
        _wait_for(path.is_file, proc, path.name)
    _sigkill(proc)
    landed.append((latest_checkpoint(run / "checkpoints")[1]["step"], _progress(run)))
    assert all(checkpoint <= step < STEPS for checkpoint, step in landed), landed
    _resume_in_process(cli, run)
    rundirs.assert_identical_runs(reference, run)


@pytest.mark.slow
def test_sigkill_in_the_middle_of_a_snapshot_write_and_a_checkpoint_write(
        dataset, reference, tmp_path, spawn, cli, rundirs):
    """The child's fsync of one temporary file is held, so the kill lands after the bytes are
    written and before the rename: the half-done file must never be taken for a real one."""
    run = tmp_path / "run"
    cases = [(_train(dataset, run), run / "embeddings", ".step_0000050.safetensors.tmp-"),
             (["train", "--out", run, "--resume"], run / "checkpoints", ".step_0000120.pt.tmp-")]
    for args, folder, prefix in cases:
        proc = spawn([prefix, *args], code=SLOW_WRITE)
        _wait_for(lambda: folder.is_dir() and any(p.name.startswith(prefix)
                                                  for p in folder.iterdir()), proc, prefix)
        _sigkill(proc)
        final_name = prefix[1:prefix.index(".tmp-")]
        assert not (folder / final_name).exists()
        assert [p.name for p in folder.iterdir() if p.name.startswith(prefix)]  # a stray is left
    assert latest_checkpoint(run / "checkpoints")[1]["step"] == 80
    _resume_in_process(cli, run)
    rundirs.assert_identical_runs(reference, run)  # strays cleaned, nothing else differs


@pytest.mark.slow
def test_sigkill_while_the_run_directory_is_being_created(tmp_path, spawn, cli):
    """Killed while `--grammar` builds the dataset in the hidden staging directory: RUN_DIR does
    not exist (never half made) and the same command then succeeds. The staging directory of the
    killed process is left beside it (hidden, named after its pid: safe to delete)."""
    run = tmp_path / "run"
    args = ["train", "--grammar", "parity", "--steps", 3, "--out", run]
    proc = spawn(args)
    _wait_for(lambda: any(p.name.startswith(".run.staging-") for p in tmp_path.iterdir()), proc,
              "the staging directory")
    _sigkill(proc)
    assert not run.exists()
    code, _, err = cli(args)
    assert code == 0, err
    assert (run / "data" / "strings.npz").is_file() and (run / "report.md").is_file()


# -- damaged files --------------------------------------------------------------------------------
def _truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _flip_a_byte(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1:]


DAMAGE = {"truncated": _truncate, "one bit flipped": _flip_a_byte, "emptied": lambda _: b"",
          "overwritten": lambda data: b"\0" * len(data)}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_newest_checkpoint_is_an_error_naming_the_fallback(damage, reference, tmp_path,
                                                                   cli, rundirs):
    """Documented behaviour: no silent fall-back. `--resume` refuses with one line naming the
    damaged file and the previous checkpoint, and changes nothing; once the user deletes the
    damaged file, `--resume` continues from the previous one to the same end."""
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    newest = run / "checkpoints" / "step_0000160.pt"
    newest.write_bytes(DAMAGE[damage](newest.read_bytes()))
    before = rundirs.digest(run)
    code, out, err = cli(["train", "--out", run, "--resume"])
    message = _one_error_line(err)
    assert code == 2 and out == "" and rundirs.digest(run) == before
    assert message.startswith(f"checkpoint {newest} ")
    assert re.search(r"is (truncated or corrupt \(checksum mismatch, \d+ bytes\)|not a dhwt "
                     r"checkpoint \(bad header\)); delete it to resume from step_0000120.pt$",
                     message), message
    newest.unlink()
    _resume_in_process(cli, run)
    rundirs.assert_identical_runs(reference, run)


def test_the_only_checkpoint_damaged_or_none_left(reference, tmp_path, cli, rundirs):
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    (run / "checkpoints" / "step_0000120.pt").unlink()
    newest = run / "checkpoints" / "step_0000160.pt"
    newest.write_bytes(_truncate(newest.read_bytes()))
    code, _, err = cli(["train", "--out", run, "--resume"])
    assert code == 2 and _one_error_line(err).endswith(
        "no earlier checkpoint is left, start the run again with --overwrite")
    newest.unlink()
    before = rundirs.digest(run)
    code, _, err = cli(["train", "--out", run, "--resume"])
    assert code == 2 and _one_error_line(err).startswith("no checkpoint to resume from")
    assert rundirs.digest(run) == before


def test_a_torn_last_metrics_line_is_dropped_and_a_torn_middle_line_refused(
        reference, tmp_path, cli, rundirs):
    """A kill during a metrics write leaves an unterminated last line: the resume drops it. A
    damaged line in the middle is not something a kill does: it is refused, naming the line."""
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    (run / "checkpoints" / "step_0000160.pt").unlink()
    metrics = run / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    kept = [x for x in lines if json.loads(x)["step"] <= 131]
    metrics.write_text("".join(kept) + '{"step": 132, "member": 0, "seed": 1, "spl')
    _resume_in_process(cli, run)
    rundirs.assert_identical_runs(reference, run)

    (run / "checkpoints" / "step_0000160.pt").unlink()
    metrics.write_text("".join(lines[:10]) + "{not json\n" + "".join(lines[10:]))
    before = rundirs.digest(run)
    code, _, err = cli(["train", "--out", run, "--resume"])
    assert code == 2 and _one_error_line(err) == f"{metrics} line 11 is not valid JSON"
    assert rundirs.digest(run) == before


def test_bytes_that_are_not_utf8_in_metrics_are_one_error_line_naming_the_line(
        reference, tmp_path, cli, rundirs):
    """analyze and --resume read metrics.jsonl: a line that is not UTF-8 is named, not a
    UnicodeDecodeError, and nothing is written."""
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    metrics = run / "metrics.jsonl"
    lines = metrics.read_bytes().splitlines(keepends=True)
    metrics.write_bytes(b"".join(lines[:6]) + b'{"step": 2, "\xff\xfe"}\n' + b"".join(lines[6:]))
    before = rundirs.digest(tmp_path)
    for args in (["train", "--out", run, "--resume"],
                 ["analyze", run, "--out", tmp_path / "report"]):
        code, out, err = cli(args)
        assert (code, out) == (2, "")
        assert _one_error_line(err) == f"{metrics} line 7 is not UTF-8 text"
        assert rundirs.digest(tmp_path) == before


# -- the record a resume continues -----------------------------------------------------------------
def _snapshot(run: Path, step: int) -> Path:
    return run / "embeddings" / f"step_{step:07d}.safetensors"


@pytest.mark.parametrize("loss", ["metrics deleted", "metric lines deleted", "snapshot damaged",
                                  "snapshot deleted"])
def test_a_record_lost_before_the_checkpoint_refuses_the_resume(loss, reference, tmp_path, cli,
                                                                rundirs):
    """What a resume cannot compute again (the evaluations, a snapshot before the checkpoint's
    step) stops it with one line naming what is lost and what to do; nothing is changed."""
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    (run / "checkpoints" / "step_0000160.pt").unlink()  # resume from step 120
    metrics, snapshot = run / "metrics.jsonl", _snapshot(run, 50)
    if loss == "metrics deleted":
        metrics.unlink()
    elif loss == "metric lines deleted":
        lines = metrics.read_text().splitlines(keepends=True)
        metrics.write_text("".join(x for x in lines if json.loads(x)["step"] not in (7, 9)))
    elif loss == "snapshot damaged":
        snapshot.write_bytes(_truncate(snapshot.read_bytes()))
    else:
        snapshot.unlink()
    before = rundirs.digest(run)
    code, out, err = cli(["train", "--out", run, "--resume"])
    message = _one_error_line(err)
    assert (code, out) == (2, "") and rundirs.digest(run) == before
    remedy = "restore it from a copy, or train the run again with --overwrite"
    assert message.startswith(f"cannot resume {run}: ") and message.endswith(remedy)
    expected = {
        "metrics deleted": f"{metrics} is missing, and the evaluations up to the checkpoint of "
                           "step 120 cannot be computed again",
        "metric lines deleted": f"{metrics} lacks the evaluation of steps 7, 9 (of every "
                                "member), which cannot be computed again",
        "snapshot damaged": f"snapshot {snapshot} is damaged (cannot read snapshot {snapshot}: ",
        "snapshot deleted": f"snapshot {snapshot} is missing; only the snapshot of the "
                            "checkpoint's step (120) can be written again"}[loss]
    assert expected in message, message


@pytest.mark.parametrize("finished", [False, True])
def test_a_lost_snapshot_of_the_checkpoints_step_is_written_again_bit_for_bit(
        finished, reference, tmp_path, cli, rundirs):
    """The checkpoint holds the matrices of its step's snapshot: a resume writes it again (and
    says so), here from step 120 on to the end, or for the finished run at its last step; the
    run then equals the uninterrupted one file for file."""
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    step = STEPS if finished else 120
    if not finished:
        (run / "checkpoints" / "step_0000160.pt").unlink()
    snapshot = _snapshot(run, step)
    snapshot.write_bytes(b"\0" * 100)
    code, out, err = cli(["train", "--out", run, "--resume"])
    assert (code, err) == (0, ""), err
    assert out.startswith(f"wrote {snapshot} again from the checkpoint of step {step} (it was "
                          "damaged (cannot read snapshot ")
    rundirs.assert_identical_runs(reference, run)


# -- NaN ------------------------------------------------------------------------------------------
def test_forced_nan_stops_and_keeps_the_last_good_checkpoint(dataset, tmp_path, cli, rundirs):
    """lr 1e30 blows the weights up within a few steps. The message names the last good
    checkpoint; that file verifies and holds finite weights; no metric line or snapshot holds a
    non-finite value; resuming meets the same NaN again (the config is what diverges)."""
    run = tmp_path / "run"
    args = ["train", "--data", dataset, "--steps", 50, "--lr", "1e30", "--lr-schedule", "constant",
            "--eval-every", 1, "--snapshot-every", 1, "--checkpoint-every", 2, "--out", run]
    code, out, err = cli(args)
    message = _one_error_line(err)
    match = re.fullmatch(r"(loss|a weight|\w+ loss) became (nan|inf) at step (\d+) \(member seed "
                         r"42\); last good checkpoint: (\S+)", message)
    assert code == 2 and out == "" and match, message
    bad_step, good = int(match[3]), Path(match[4])
    path, state = latest_checkpoint(run / "checkpoints")
    assert good == path and state["step"] <= bad_step
    assert all(torch.isfinite(t).all() for t in state["model"].values())
    lines = rundirs.metric_lines(run)
    assert max(r["step"] for r in lines) <= bad_step
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["gap"]) for r in lines)
    assert not [p for p in run.rglob(".*") if p.name not in (MARKER, LOCK)]  # no temporary
    before = rundirs.digest(run / "checkpoints")
    code, _, err = cli(["train", "--out", run, "--resume"])
    assert code == 2 and _one_error_line(err) == message
    assert rundirs.digest(run / "checkpoints") == before


def test_non_finite_initial_weights_say_there_is_no_good_checkpoint(dataset, tmp_path, cli):
    (tmp_path / "huge.toml").write_text("emb_std = 1e39\n")  # N(0, 1e39) overflows float32
    code, _, err = cli(["train", "--data", dataset, "--config", tmp_path / "huge.toml",
                        "--steps", 5, "--out", tmp_path / "run"])
    assert code == 2 and _one_error_line(err) == (
        "a weight became inf at step 0 (member seed 42); last good checkpoint: none (the run "
        "stopped before its first checkpoint)")
    assert list_checkpoints(tmp_path / "run" / "checkpoints") == []


# -- unwritable output, full disk -----------------------------------------------------------------
def test_output_under_a_regular_file_is_a_clear_error(dataset, tmp_path, cli, rundirs):
    """Tests run as root here, where chmod denies nothing; a parent path that is a regular file
    cannot be written by anyone."""
    (tmp_path / "file").write_text("x")
    before = rundirs.digest(tmp_path)
    code, _, err = cli(["train", "--data", dataset, "--steps", 5, "--out",
                        tmp_path / "file" / "run"])
    assert code == 2 and _one_error_line(err) == (
        f"cannot create run directory {tmp_path / 'file' / 'run'}: {tmp_path / 'file'} is not a "
        "directory")
    assert rundirs.digest(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "file"]


def _file_size_limit(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.slow
def test_a_write_that_fails_mid_run_stops_cleanly_and_resumes(dataset, reference, tmp_path,
                                                              spawn, cli, rundirs):
    """A file-size limit (RLIMIT_FSIZE, works unprivileged) makes writes fail like a full disk
    once metrics.jsonl outgrows it: one error line naming the last good checkpoint, exit 2; every
    checkpoint kept verifies, and --resume without the limit ends as the uninterrupted run."""
    limit = 3 * max(p.stat().st_size for p in (reference / "checkpoints").iterdir()) // 2
    assert (reference / "metrics.jsonl").stat().st_size > limit  # so the metrics hit it
    run = tmp_path / "run"
    proc = spawn(_train(dataset, run), preexec_fn=_file_size_limit(limit))
    out, err = proc.communicate(timeout=120)
    message = _one_error_line(err)
    match = re.fullmatch(rf"cannot write the run directory {run} at step (\d+): File too large; "
                         rf"last good checkpoint: (\S+); free space \(or fix permissions\) and "
                         rf"continue with --resume", message)
    assert proc.returncode == 2 and out == "" and match, message
    assert 0 < int(match[1]) < STEPS
    assert Path(match[2]) == list_checkpoints(run / "checkpoints")[-1]
    _resume_in_process(cli, run)
    rundirs.assert_identical_runs(reference, run)


@pytest.mark.slow
def test_a_write_that_fails_while_creating_the_run_leaves_nothing(dataset, tmp_path, spawn):
    """With 64 bytes allowed per file, config.toml cannot be written: one line, exit 2, and
    neither RUN_DIR nor its hidden staging directory is left."""
    proc = spawn(_train(dataset, tmp_path / "run"), preexec_fn=_file_size_limit(64))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and out == ""
    assert _one_error_line(err) == f"cannot create run directory {tmp_path / 'run'}: File too large"
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_stops_cleanly_and_resumes_elsewhere(dataset, reference, tmp_path, cli,
                                                         rundirs):
    """A real ENOSPC: the run directory on a 192 KiB tmpfs (needs mount rights; skipped
    without). The run stops with one line; copied to a roomy disk it resumes to the same end."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(disk)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        code, _, err = cli(_train(dataset, disk / "run"))
        message = _one_error_line(err)
        assert code == 2 and re.fullmatch(
            rf"cannot write the run directory {disk / 'run'} at step \d+: No space left on device"
            r".*; last good checkpoint: \S+step_\d{7}\.pt; free space .*", message), message
        shutil.copytree(disk / "run", tmp_path / "run")
    finally:
        subprocess.run(["umount", str(disk)], check=True)
    _resume_in_process(cli, tmp_path / "run")
    rundirs.assert_identical_runs(reference, tmp_path / "run")
