"""Checkpoint files: atomic, checksummed, last two kept, damage detected with a useful message."""

from __future__ import annotations

import pytest
import torch

from dhwt.errors import DhwtError
from dhwt.runs.checkpoints import (latest_checkpoint, list_checkpoints, load_checkpoint,
                                      remove_stray_temporaries, save_checkpoint)


def _state(step: int) -> dict:
    g = torch.Generator().manual_seed(step)
    return {"step": step, "w": torch.randn(3, 4, generator=g), "rng": g.get_state(),
            "py": (3, tuple(range(5)), None)}


def test_round_trip_and_keep_last_two(tmp_path):
    for step in (0, 10, 20, 30):
        save_checkpoint(tmp_path, step, _state(step))
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_0000020.pt", "step_0000030.pt"]
    path, state = latest_checkpoint(tmp_path)
    assert path.name == "step_0000030.pt" and state["step"] == 30
    assert torch.equal(state["w"], _state(30)["w"]) and torch.equal(state["rng"], _state(30)["rng"])
    assert sorted(tmp_path.iterdir()) == list_checkpoints(tmp_path)  # no temporaries left


def test_truncated_newest_checkpoint_is_an_error_naming_the_fallback(tmp_path):
    save_checkpoint(tmp_path, 10, _state(10))
    newest = save_checkpoint(tmp_path, 20, _state(20))
    raw = newest.read_bytes()
    newest.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DhwtError, match=r"step_0000020.pt is truncated or corrupt.*delete it to "
                                        r"resume from step_0000010.pt"):
        latest_checkpoint(tmp_path)
    newest.unlink()
    assert latest_checkpoint(tmp_path)[1]["step"] == 10


def test_flipped_byte_and_foreign_file_are_detected(tmp_path):
    path = save_checkpoint(tmp_path, 5, _state(5))
    raw = bytearray(path.read_bytes())
    raw[-20] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(DhwtError, match="checksum mismatch.*no earlier checkpoint"):
        latest_checkpoint(tmp_path)
    path.write_bytes(b"PK\x03\x04 not ours")
    with pytest.raises(DhwtError, match="not a dhwt checkpoint"):
        load_checkpoint(path)


def test_scan_ignores_temporaries_and_other_names(tmp_path):
    save_checkpoint(tmp_path, 7, _state(7))
    (tmp_path / ".step_0000009.pt.tmp-123").write_bytes(b"half")
    (tmp_path / "notes.txt").write_text("x")
    assert latest_checkpoint(tmp_path)[0].name == "step_0000007.pt"
    remove_stray_temporaries(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "step_0000007.pt"]


def test_no_checkpoint(tmp_path):
    with pytest.raises(DhwtError, match="no checkpoint to resume from"):
        latest_checkpoint(tmp_path / "checkpoints")
