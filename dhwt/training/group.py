"""Runs trained as one ensemble: tie variants of one config share a batched computation, and
each run directory is written as if its run had trained alone.

Runs may share an ensemble when their configs agree on every field that fixes the computation
except `tie_schedule` and `seeds` (`group_key`), and they start from their own seeds (no
`init_from`, `vary = "all"`: those share weights or streams within a run, not across runs). Run
k's members are the ensemble's rows `rows[k]`; each member trains exactly as in a solo run
(tests/training/test_group.py checks it to float tolerance), because members never mix and a
tied member's rows of the output matrix, when the ensemble has one for its untied members, are
not used (dhwt.models.embeddings).

Checkpoints are per run and equal to a solo run's: `run_state` cuts the ensemble's model and
optimizer state to a run's rows (a tied run's without the output matrix), and `join_states`
puts the runs' checkpoints of one step back together (a tied run's unused output rows and
their optimizer state become copies of its input rows', as an untie would make them). So a
group resumes as a group, and any of its run directories also resumes alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dhwt.errors import DhwtError
from dhwt.models.embeddings import TIED_MEMBERS
from dhwt.config.run import TrainConfig
from dhwt.training.members import INPUT, OUTPUT
from dhwt.training.tying import per_member_state

#: The fields in which runs of one group may differ.
PER_RUN = ("tie_schedule", "seeds")
_TIED_KEY = "embeddings." + TIED_MEMBERS


def group_key(config: TrainConfig) -> tuple | None:
    """Runs with equal keys can train as one ensemble; None for a run that trains alone."""
    if config.init_from is not None or config.vary != "all":
        return None
    return tuple(sorted((k, repr(v)) for k, v in config.identity().items() if k not in PER_RUN))


def member_rows(configs: Sequence[TrainConfig]) -> list[range]:
    """The ensemble rows of each run: its seeds, in order, after the previous runs' seeds."""
    rows, start = [], 0
    for config in configs:
        rows.append(range(start, start + len(config.seeds)))
        start += len(config.seeds)
    return rows


def run_state(model: dict[str, torch.Tensor], optimizer: dict, names: list[list[str]],
              rows: range, tied: bool) -> tuple[dict[str, torch.Tensor], dict, list[list[str]]]:
    """One run's share of the ensemble's state dicts: (model, optimizer, optimizer param names)
    as a solo run of those members would hold them. `names`: the optimizer's parameters by
    name, per param group (optimizer state dicts index parameters in that order)."""
    drop = {_TIED_KEY} | ({OUTPUT} if tied else set())
    cut = {key: _rows(value, rows) for key, value in model.items() if key not in drop}
    index = {name: i for i, name in enumerate(n for group in names for n in group)}
    state, groups, kept, position = {}, [], [], 0
    for group, group_names in zip(optimizer["param_groups"], names):
        keep = [n for n in group_names if n not in drop]
        for name in keep:
            saved = optimizer["state"].get(index[name])
            if saved is not None:
                state[position] = {key: _rows(value, rows) if per_member_state(value)
                                   else value.clone() for key, value in saved.items()}
            position += 1
        groups.append({**group, "params": list(range(position - len(keep), position))})
        kept.append(keep)
    return cut, {"state": state, "param_groups": groups}, kept


def join_states(parts: Sequence[tuple[dict[str, torch.Tensor], dict, list[list[str]]]]
                ) -> tuple[dict[str, torch.Tensor], dict, list[list[str]]]:
    """The ensemble's (model, optimizer, names) from its runs' `run_state`s of one step, in
    row order. A run without the output matrix (tied) lends its input rows for it, weights and
    optimizer state alike; the ensemble holds `tied_members` when its runs differ."""
    models = [model for model, _, _ in parts]
    tied = [OUTPUT not in model for model in models]
    widest = next((p for p, t in zip(parts, tied) if not t), parts[0])
    model = {key: torch.cat([m.get(key, m[INPUT]) if key == OUTPUT else m[key] for m in models])
             for key in widest[0]}
    if any(tied) and not all(tied):
        model[_TIED_KEY] = torch.tensor([t for m, t in zip(models, tied)
                                         for _ in range(m[INPUT].shape[0])])
    names = widest[2]
    flat = [n for group in names for n in group]
    states = [_by_name(optimizer, part_names) for _, optimizer, part_names in parts]
    state = {}
    for i, name in enumerate(flat):
        found = [s.get(name, s.get(INPUT) if name == OUTPUT else None) for s in states]
        if all(f is None for f in found):
            continue
        if any(f is None for f in found):
            raise DhwtError(f"the runs' checkpoints disagree on whether {name} has optimizer "
                            "state (not of one step of runs that can train together); resume "
                            "each run on its own")
        state[i] = {key: torch.cat([f[key] for f in found]) if per_member_state(value)
                    else value.clone()  # the step: one tensor per parameter, stepped in place
                    for key, value in found[0].items()}
    groups, start = [], 0
    for group, group_names in zip(widest[1]["param_groups"], names):
        groups.append({**group, "params": list(range(start, start + len(group_names)))})
        start += len(group_names)
    return model, {"state": state, "param_groups": groups}, names


def _by_name(optimizer: dict, names: list[list[str]]) -> dict[str, dict]:
    """An optimizer state dict's per-parameter state keyed by parameter name."""
    flat = [n for group in names for n in group]
    return {flat[i]: value for i, value in optimizer["state"].items()}


def _rows(value: torch.Tensor, rows: range) -> torch.Tensor:
    """value[rows] as its own tensor (a view would save the whole ensemble's storage); the
    tensor itself when `rows` covers every member."""
    if rows.start == 0 and rows.stop == value.shape[0]:
        return value
    return value[rows.start:rows.stop].clone()
