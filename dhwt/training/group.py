"""Runs trained as one ensemble: tie variants of one config share a batched computation, and
each run directory is written as if its run had trained alone.

Runs may share an ensemble when their configs agree on every field that fixes the computation
except `tie_schedule` and `seeds` (`group_key`), and they start from their own seeds (no
`init_from`, `vary = "all"`: those share weights or streams within a run, not across runs). Run
k's members are the ensemble's rows `rows[k]`; each member trains exactly as in a solo run
(tests/training/test_group.py checks it to float tolerance), because members never mix and a
tied member's rows of the output matrix, when the ensemble has one for its untied members, are
not used (dhwt.models.embeddings). Checkpoints are per run and equal to a solo run's
(dhwt.training.state), so a group resumes as a group and any of its runs also resumes alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from dhwt.config.run import TrainConfig

#: The fields in which runs of one group may differ.
PER_RUN = ("tie_schedule", "seeds")


def group_key(config: TrainConfig) -> tuple | None:
    """Runs with equal keys can train as one ensemble; None for a run that trains alone."""
    if config.members.init_from is not None or config.members.vary != "all":
        return None
    return tuple(sorted((k, repr(v)) for k, v in config.identity().items() if k not in PER_RUN))


def member_rows(configs: Sequence[TrainConfig]) -> list[range]:
    """The ensemble rows of each run: its seeds, in order, after the previous runs' seeds."""
    rows, start = [], 0
    for config in configs:
        rows.append(range(start, start + len(config.members.seeds)))
        start += len(config.members.seeds)
    return rows
