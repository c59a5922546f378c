"""The checkpoint codec: a live ensemble's state cut into one checkpoint per run, and put back.

A run's checkpoint holds its rows of the model (with the tying state) and of the optimizer, the
step, the config and model_args (dhwt.runs.run rebuilds the model from them alone), the device it
was written on, and every RNG: the members' data and draw streams, their dropout generators and
the global torch, numpy and Python states (nothing draws from those, but they are kept equal to
an uninterrupted run's). It equals the checkpoint of a solo run of those members: `run_state`
cuts the ensemble's model and optimizer state to a run's rows (a tied run's without the output
matrix), and `join_states` puts the runs' checkpoints of one step back together (a tied run's
unused output rows and their optimizer state become copies of its input rows', as an untie
would make them). The file format itself is dhwt.runs.checkpoints'.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from dhwt.config.run import TrainConfig
from dhwt.errors import DhwtError
from dhwt.models.base import EnsembleLM
from dhwt.models.embeddings import TIED_MEMBERS
from dhwt.runs.layout import run_paths
from dhwt.runs.checkpoints import cpu_copy
from dhwt.runs.run import model_args
from dhwt.training.members import INPUT, OUTPUT
from dhwt.training.tying import per_member_state

CHECKPOINT_FORMAT = 1
_TIED_KEY = "embeddings." + TIED_MEMBERS
#: The members' generator streams a checkpoint holds, by name.
Streams = dict[str, list[torch.Generator]]


def encode(model: EnsembleLM, optimizer: torch.optim.Optimizer, streams: Streams,
           device: torch.device, step: int, runs: Sequence[tuple[TrainConfig, range]]
           ) -> list[dict[str, object]]:
    """Each run's checkpoint of the current state, in the order of `runs` (config, rows)."""
    names = {id(p): n for n, p in model.named_parameters()}
    weights, adam = cpu_copy(model.state_dict()), cpu_copy(optimizer.state_dict())
    groups = [[names[id(p)] for p in g["params"]] for g in optimizer.param_groups]
    dropout = model.rng_state()
    states = []
    for config, rows in runs:
        run_model, run_optimizer, run_groups = run_state(
            weights, adam, groups, rows, model.embeddings.tied_members[rows.start])
        cut = slice(rows.start, rows.stop)
        states.append({
            "format": CHECKPOINT_FORMAT,
            "step": step,
            "config": config.to_dict(),
            "model_args": model_args(model.config),
            "device": str(device),  # where it was written (a resume may go elsewhere)
            "model": run_model,
            "optimizer": run_optimizer,
            "optimizer_params": run_groups,
            "rng": {
                **{name: [g.get_state() for g in gens[cut]] for name, gens in streams.items()},
                "dropout": dropout[cut].clone(),
                "dropout_device": device.type,  # the type of device they draw on
                "torch": torch.get_rng_state(),
                "numpy": _numpy_state(),
                "python": random.getstate(),
            },
        })
    return states


def check(path: Path, state: dict[str, object], config: TrainConfig) -> None:
    """DhwtError unless `state` (read from `path`) is of this format and of a run configured as
    `config` (TrainConfig.resume_key: steps may have been extended since)."""
    if state.get("format") != CHECKPOINT_FORMAT:
        raise DhwtError(f"checkpoint {path} has format {state.get('format')!r}; this dhwt reads "
                        f"format {CHECKPOINT_FORMAT}")
    # read through TrainConfig so that fields added since the checkpoint take their defaults
    if TrainConfig.from_dict(state["config"], str(path)).resume_key() != config.resume_key():
        raise DhwtError(f"checkpoint {path} was written with a different config than "
                        f"{run_paths(path.parents[1]).config}")


def decode(states: Sequence[dict[str, object]], model: EnsembleLM,
           optimizer: Callable[[list[list[torch.nn.Parameter]]], torch.optim.Optimizer],
           streams: Streams, device: torch.device) -> tuple[torch.optim.Optimizer, int]:
    """Load the runs' checkpoints of one step (in row order) into `model` (which adopts their
    tying state) and `streams`, and set the global RNGs; return the optimizer that
    `optimizer(param groups)` builds, loaded, and the step."""
    joined, adam, groups = join_states(
        [(s["model"], s["optimizer"], s["optimizer_params"]) for s in states])
    model.load_state_dict(joined)
    params = dict(model.named_parameters())
    built = optimizer([[params[n] for n in group] for group in groups])
    built.load_state_dict(adam)
    rngs = [s["rng"] for s in states]
    for name, gens in streams.items():
        for g, saved in zip(gens, [x for r in rngs for x in r[name]]):
            g.set_state(saved)
    if all(r.get("dropout_device", "cpu") == device.type for r in rngs):
        model.set_rng_state(torch.cat([r["dropout"] for r in rngs]))
    else:  # another device's generator states do not fit this device's generators
        model.reseed_dropout(int(states[0]["step"]))
    rng = rngs[0]  # nothing draws from the global generators: equal in every run
    torch.set_rng_state(rng["torch"])
    _set_numpy_state(rng["numpy"])
    random.setstate(rng["python"])
    return built, int(states[0]["step"])


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


def _numpy_state() -> list[object]:
    """numpy's global RNG state as plain lists (checkpoints load with weights_only=True)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return [name, keys.tolist(), int(pos), int(has_gauss), float(gauss)]


def _set_numpy_state(state: list[object]) -> None:
    name, keys, pos, has_gauss, gauss = state
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
