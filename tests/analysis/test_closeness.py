"""Pair closeness over snapshots, checked on matrices whose geometry is known by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from dhwt.analysis.closeness import pair_closeness
from dhwt.runs.snapshots import read_snapshot, snapshot_files
from dhwt.errors import DhwtError

VOCAB = ("a", "b", "c", "d")


def write_snapshot(folder, step, input_rows, output_rows, tied=False, seeds=(1,)):
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"step": str(step), "tied": json.dumps(tied), "seeds": json.dumps(list(seeds)),
            "vocab": json.dumps(list(VOCAB))}
    save_file({"input": np.asarray(input_rows, np.float32), "output": np.asarray(output_rows, np.float32)},
              str(folder / f"step_{step:07d}.safetensors"), metadata=meta)


def read_run(run_dir):
    """Every snapshot under run_dir/embeddings, oldest first."""
    return [read_snapshot(path) for path in snapshot_files(run_dir).values()]


def test_distances_cosines_and_baseline_by_hand(tmp_path):
    # member rows: a=(3,0), b=(0,4) -> |a-b| = 5, cos 0; c=(1,0), d=(-1,0) -> |c-d| = 2, cos -1
    m1 = [[3, 0], [0, 4], [1, 0], [-1, 0]]
    # second member, everything scaled by 2: raw distances double, normalised ones do not
    m2 = [[6, 0], [0, 8], [2, 0], [-2, 0]]
    write_snapshot(tmp_path / "embeddings", 10, [m1, m2], [m2, m1], seeds=(1, 2))
    write_snapshot(tmp_path / "embeddings", 0, [m1, m1], [m1, m1], seeds=(1, 2))
    snaps = read_run(tmp_path)
    assert [s.step for s in snaps] == [0, 10]
    c = pair_closeness(snaps, "input", [("a", "b"), ("c", "d")], baseline_pairs=[("a", "c")])
    assert c.steps.tolist() == [0, 10]
    np.testing.assert_allclose(c.raw[1], [[5, 2], [10, 4]])
    np.testing.assert_allclose(c.cosine[1], [[0, -1], [0, -1]], atol=1e-12)
    # baseline |a-c| = 2 for member 1 and 4 for member 2
    np.testing.assert_allclose(c.normalised[1], [[2.5, 1.0], [2.5, 1.0]])
    out = pair_closeness(snaps, "output", [("a", "b")], baseline_pairs=[("a", "b")])
    np.testing.assert_allclose(out.raw[1, :, 0], [10, 5])
    np.testing.assert_allclose(out.normalised, 1.0)


def test_bad_requests_are_user_errors(tmp_path):
    write_snapshot(tmp_path / "embeddings", 0, [[[0, 1]] * 4], [[[0, 1]] * 4])
    snaps = read_run(tmp_path)
    with pytest.raises(DhwtError, match="'z' is not in the vocabulary"):
        pair_closeness(snaps, "input", [("a", "z")], [("a", "b")])
    with pytest.raises(DhwtError, match="side must be"):
        pair_closeness(snaps, "middle", [("a", "b")], [("a", "b")])
    with pytest.raises(DhwtError, match="no embedding snapshots"):
        read_run(tmp_path / "nowhere")
    (tmp_path / "embeddings" / "step_0000005.safetensors").write_bytes(b"garbage")
    with pytest.raises(DhwtError, match="cannot read snapshot"):
        read_run(tmp_path)
