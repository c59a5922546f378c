"""A run's record up to a checkpoint, checked before a resume continues it.

A resume from the checkpoint of step N keeps the lines of metrics.jsonl and the embedding
snapshots of steps <= N and goes on after them, so they must hold the run's record up to N: the
evaluation (a line per member) of every step the trainer evaluated, and a snapshot that reads of
every step it snapshotted. The trainer records step 0, every multiple of eval_every (of
snapshot_every), and the run's last step: N if it is the run's configured steps, or if the
checkpoint lies off the checkpoint_every schedule (so it was the last step before an extension
with --steps). Records beyond these (the last steps of earlier extensions) are kept and not
required.

What is lost cannot be computed again, with one exception: the snapshot of step N, whose
matrices the checkpoint holds; the trainer rewrites it from the restored model, bit for bit.
Anything else missing or damaged stops the resume with one line that names it.
"""

from __future__ import annotations

from pathlib import Path

from dhwt.config import TrainConfig
from dhwt.errors import DhwtError, brief
from dhwt.runs import layout
from dhwt.runs.metrics import read_metrics
from dhwt.runs.snapshots import check_snapshot, snapshot_path

#: What a user can do about a record that is lost.
REMEDY = "restore it from a copy, or train the run again with --overwrite"


def recorded_steps(every: int, step: int, last: bool) -> list[int]:
    """The steps up to the checkpoint of `step` that a run recording every `every` steps has
    recorded; `last`: `step` was the run's last step then (recorded whatever `every`).

    Examples:
        >>> recorded_steps(50, 200, last=False)
        [0, 50, 100, 150, 200]
        >>> recorded_steps(30, 200, last=False)
        [0, 30, 60, 90, 120, 150, 180]
        >>> recorded_steps(30, 200, last=True)
        [0, 30, 60, 90, 120, 150, 180, 200]
    """
    steps = list(range(0, step + 1, every))
    return steps + [step] if last and steps[-1] != step else steps


def check_history(run_dir: Path, config: TrainConfig, step: int) -> str | None:
    """DhwtError unless `run_dir` holds its record up to the checkpoint of `step` (see the
    module docstring); what happened to the snapshot of `step` ("missing", or "damaged" and
    why) when it must be rewritten, else None."""
    record = config.record
    last = step % record.checkpoint_every != 0 or step == config.optim.steps
    metrics = run_dir / layout.METRICS
    if not metrics.is_file():
        raise DhwtError(f"cannot resume {run_dir}: {metrics} is missing, and the evaluations up "
                        f"to the checkpoint of step {step} cannot be computed again; {REMEDY}")
    seeds = set(config.members.seeds)
    seen: dict[int, set[int]] = {}
    for line in read_metrics(metrics):
        seen.setdefault(int(line["step"]), set()).add(int(line["seed"]))
    lacking = [s for s in recorded_steps(record.eval_every, step, last)
               if not seeds <= seen.get(s, set())]
    if lacking:
        raise DhwtError(f"cannot resume {run_dir}: {metrics} lacks the evaluation of step"
                        f"{'s' * (len(lacking) > 1)} {brief(lacking, str)} (of every member), "
                        f"which cannot be computed again; {REMEDY}")
    lost = {}
    for at in recorded_steps(record.snapshot_every, step, last):
        problem = _snapshot_problem(snapshot_path(run_dir / layout.EMBEDDINGS, at), at,
                                    config.members.seeds)
        if problem is not None:
            lost[at] = problem
    early = [at for at in lost if at != step]
    if early:
        first = snapshot_path(run_dir / layout.EMBEDDINGS, early[0])
        more = f" (and {len(early) - 1} more before step {step})" if len(early) > 1 else ""
        raise DhwtError(f"cannot resume {run_dir}: snapshot {first} is {lost[early[0]]}{more}; "
                        f"only the snapshot of the checkpoint's step ({step}) can be written "
                        f"again; {REMEDY}")
    return lost.get(step)


def _snapshot_problem(path: Path, step: int, seeds: list[int]) -> str | None:
    """Why the snapshot of `step` at `path` is not one of this run's, or None if it is."""
    if not path.is_file():
        return "missing"
    try:
        snapshot = check_snapshot(path)
    except DhwtError as exc:
        return f"damaged ({exc})"
    if snapshot.step != step or list(snapshot.seeds) != seeds:
        return (f"damaged (it holds step {snapshot.step} of seeds {list(snapshot.seeds)}, not "
                f"step {step} of seeds {seeds})")
    return None
