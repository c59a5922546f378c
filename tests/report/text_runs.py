"""Shared by the report tests (imported, not collected): a tiny causal-LM run on random text."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dhwt.training.runner import train_run
from dhwt.config.run import TrainConfig
from dhwt.text.text_task import TextTask

#: Tokens of the random text: ids 0..V-6 occur, the last 5 never do.
V = 40


def make_text_run(run: Path, *, schedule: str = "untied", lr: float = 0.05, steps: int = 4,
                  eval_every: int = 2, d_model: int = 8) -> Path:
    """Two members (seeds 1, 2) of width d_model trained `steps` steps on random text of V - 5
    of V token ids, snapshots every 2 steps, a checkpoint at the end; `run` is the run
    directory."""
    rng = np.random.default_rng(0)
    ids = {s: rng.integers(0, V - 5, n).astype(np.int32)
           for s, n in (("train", 600), ("valid", 100), ("test", 100))}
    task = TextTask(ids, tuple(f"t{i}" for i in range(V)), 8)
    config = TrainConfig.from_dict(dict(
        objective="clm", d_model=d_model, n_layers=1, n_heads=2, d_ff=16, seeds=[1, 2], steps=steps,
        batch_size=4, lr=lr, eval_every=eval_every, snapshot_every=2, checkpoint_every=steps,
        tie_schedule=schedule), "test")
    train_run(config, task, run)
    return run
