"""What the members of an ensemble share and what they draw themselves (TrainConfig.members.vary,
init_from, redraw, freeze, symmetric_init), applied to a freshly built model before its first
update.

The model arrives with member i drawn entirely from seeds[i] (dhwt.models.init). Then:
- vary = "embeddings": every member takes member 0's non-embedding weights (and, in the trainer,
  seeds[0]'s data order and dropout masks); its input and untied output embeddings stay its own.
- init_from: every member takes member `init_member` of the source checkpoint, except the
  embedding matrices named by `redraw`, which keep their draw from the member's own seed.
- symmetric_init: in every member, each symbol of a group takes the input row of the group's
  first symbol (after init_from), so the group's input rows start equal.
- freeze: the chosen weights stop requiring gradients, so they get no gradient and the trainer
  gives them no optimizer state.
"Embedding" means the input matrix and the untied output matrix; positions, norms and the output
bias belong to the body.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dhwt.errors import DhwtError, brief
from dhwt.models.base import EnsembleLM
from dhwt.runs.layout import run_paths
from dhwt.runs.checkpoints import checkpoint_path, latest_checkpoint, load_checkpoint
from dhwt.checks import split_init_from
from dhwt.config.run import TrainConfig

INPUT = "embeddings.input_weight"
OUTPUT = "embeddings.untied_output"
EMBEDDINGS = (INPUT, OUTPUT)


def redrawn_names(redraw: str) -> tuple[str, ...]:
    """The embedding parameters a `redraw` value keeps from the members' own seeds."""
    return {"both": EMBEDDINGS, "input": (INPUT,), "output": (OUTPUT,)}[redraw]


def prepare_members(model: EnsembleLM, config: TrainConfig, vocab: Sequence[str]) -> None:
    """Apply config.members.vary, init_from, symmetric_init and freeze to a freshly built `model`
    of the task whose symbols are `vocab` (see the module doc)."""
    if config.members.init_from is not None:
        source = source_weights(config.members.init_from, config.members.init_member)
        keep = set(redrawn_names(config.members.redraw))
        _share(model, source, skip=keep)
    elif config.members.vary == "embeddings":
        state = model.state_dict()
        _share(model, {name: value[0].clone() for name, value in state.items()},
               skip=set(EMBEDDINGS))
    if config.members.symmetric_init:
        _equalise(model, config.members.symmetric_init, vocab)
    if config.members.vary == "embeddings":
        model.set_rng_state(model.rng_state()[:1].expand(model.members, -1))
    trainable = {"none": None, "non-embedding": set(EMBEDDINGS),
                 "loaded": set(redrawn_names(config.members.redraw))}[config.members.freeze]
    if trainable is not None:
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(name in trainable)


def source_weights(init_from: str, member: int) -> dict[str, torch.Tensor]:
    """One member's weights from a run's checkpoint (`RUN_DIR` newest, `RUN_DIR@STEP` that step),
    each without the member dimension; a tied source's matrix serves as its output matrix too."""
    run, step = split_init_from(init_from)
    directory = run_paths(run).checkpoints
    if step is None:
        path, state = latest_checkpoint(directory)
    else:
        path = checkpoint_path(directory, step)
        if not path.is_file():
            raise DhwtError(f"init_from {init_from!r}: no checkpoint of step {step} in "
                            f"{directory} (the last few checkpoints are kept)")
        state = load_checkpoint(path)
    weights = state["model"]
    members = weights[INPUT].shape[0]
    if member >= members:
        raise DhwtError(f"init_member {member} is out of range: {path} holds {members} members")
    picked = {name: value[member] for name, value in weights.items()}
    picked.setdefault(OUTPUT, picked[INPUT])
    return picked


def _share(model: EnsembleLM, weights: dict[str, torch.Tensor], skip: set[str]) -> None:
    """Copy `weights` (no member dimension) into every member, except the names in `skip`."""
    state = model.state_dict()
    with torch.no_grad():
        for name, target in state.items():
            if name in skip:
                continue
            if name not in weights or weights[name].shape != target.shape[1:]:
                got = tuple(weights[name].shape) if name in weights else "nothing"
                raise DhwtError(f"init_from: the source has {got} for {name}, this model needs "
                                f"{tuple(target.shape[1:])} (same architecture and vocabulary?)")
            target.copy_(weights[name].expand_as(target))


def _equalise(model: EnsembleLM, groups: list[list[str]], vocab: Sequence[str]) -> None:
    """Give every symbol of each group its group's first symbol's input row, in every member."""
    index = {symbol: i for i, symbol in enumerate(vocab)}
    for symbol in (s for group in groups for s in group):
        if symbol not in index:
            raise DhwtError(f"symmetric_init names {symbol!r}, which is not a symbol of the "
                            f"task (its symbols: {brief(vocab)})")
    weight = model.embeddings.input_weight
    with torch.no_grad():
        for first, *rest in groups:
            for symbol in rest:
                weight[:, index[symbol]] = weight[:, index[first]]
