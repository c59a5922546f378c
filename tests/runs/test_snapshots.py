"""Embedding snapshots (dhwt.runs.snapshots): a round trip, removal after a step, and bytes that
are reproducible and read by the safetensors library."""

from __future__ import annotations

import torch

from dhwt.runs.snapshots import read_snapshot, remove_snapshots_after, save_snapshot


def test_snapshot_round_trip_and_removal(tmp_path):
    x = torch.randn(2, 5, 3)
    for step in (0, 100, 200):
        save_snapshot(tmp_path, step, x, x + 1, tied=False, seeds=[4, 9], vocab=("a", "b", "[M]"))
    snap = read_snapshot(tmp_path / "step_0000100.safetensors")  # safetensors' own reader
    assert torch.equal(torch.from_numpy(snap.input), x)
    assert torch.equal(torch.from_numpy(snap.output), x + 1)
    assert (snap.step, snap.tied, snap.seeds, snap.vocab) == (100, False, (4, 9), ("a", "b", "[M]"))
    remove_snapshots_after(tmp_path, 100)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_0000000.safetensors",
                                                          "step_0000100.safetensors"]


def test_snapshot_bytes_are_reproducible_and_read_by_safetensors(tmp_path):
    """Equal snapshots are equal files, and the safetensors library reads them (an independent
    reader of the hand-written format)."""
    from safetensors.numpy import load_file

    x = torch.arange(24, dtype=torch.float32).view(2, 3, 4) / 7
    a = save_snapshot(tmp_path / "a", 5, x, -x, tied=True, seeds=[1, 2], vocab=("p", "q", "r"))
    b = save_snapshot(tmp_path / "b", 5, x.clone(), -x, tied=True, seeds=[1, 2],
                      vocab=("p", "q", "r"))
    assert a.read_bytes() == b.read_bytes()
    arrays = load_file(str(a))
    assert (arrays["input"] == x.numpy()).all() and (arrays["output"] == -x.numpy()).all()
