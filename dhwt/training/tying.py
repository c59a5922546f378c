"""The tie switch: `apply_switch` flips the model's `TiedEmbeddings` and carries the optimizer
along, which is what the paper's tie-then-untie prototype missed (its new output matrix never
reached the optimizer). When switches happen is the schedule's (dhwt.config.schedule).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from dhwt.config.schedule import DEFAULT_MERGE, TieEvent
from dhwt.models.embeddings import TiedEmbeddings


def apply_switch(model: nn.Module, optimizer: torch.optim.Optimizer, event: TieEvent,
                 members: Sequence[int] | None = None) -> None:
    """Flip the tying state of `model.embeddings` and carry `optimizer` (Adam-style state) along.

    members: the indices of the members that switch (default: all; the others keep their state,
    so tie variants can share one ensemble).

    untie: the new output rows are exact copies of the tied rows of E, so no prediction changes.
    A new output matrix joins the optimizer in the same param group as the input matrix (same lr,
    weight decay, betas), right after it, with a copy of every state tensor of E (exp_avg m,
    exp_avg_sq v, step t); an existing one (other members untied already) takes E's state rows
    of the switching members. If E has state (m, v, t) when the switch happens, the next update
    applies AdamW to E_in with the gradient through the input lookup g_in and to E_out with the
    gradient through the logits g_out, each starting from (m, v, t): moments continue and bias
    correction goes on at t + 1. (Tied, the same update would have used g_in + g_out; a fresh
    state would instead restart bias correction at 1 and make the first step about
    lr * sign(g), Adam's largest.) The step counts of the two matrices agree: both take part in
    every update from the output matrix's creation on.

    tie: the members' input rows take the merged value (in: E_in, out: E_out, mean: the
    average), and their state rows merge the same way (in keeps E_in's, out takes E_out's, mean
    averages each moment tensor); once no member is untied, the output Parameter leaves the
    optimizer. Tying equal matrices with equal states changes nothing at all.
    """
    embeddings = model if isinstance(model, TiedEmbeddings) else model.embeddings
    count = embeddings.input_weight.shape[0]
    rows = list(range(count)) if members is None else list(members)
    source = embeddings.input_weight
    group = _group_holding(optimizer, source, "input")
    if event.action == "untie":
        existing = embeddings.untied_output
        output = embeddings.untie(members)
        state = optimizer.state.get(source)
        if existing is None:
            group["params"].insert(_index(group["params"], source) + 1, output)
            if state:
                optimizer.state[output] = {
                    key: value.clone() if torch.is_tensor(value) else value
                    for key, value in state.items()
                }
        elif state:
            for key, value in optimizer.state[output].items():
                if per_member_state(value):
                    value[rows] = state[key][rows]
        return
    output = embeddings.untied_output
    if output is None:
        embeddings.tie(event.merge or DEFAULT_MERGE, members)  # raises: already tied
        return
    output_group = _group_holding(optimizer, output, "output")
    merge = event.merge or DEFAULT_MERGE
    removed = embeddings.tie(merge, members)
    kept, other = optimizer.state.get(source), optimizer.state.get(output)
    if kept and other:
        for key, value in kept.items():
            if per_member_state(value) and merge == "out":
                value[rows] = other[key][rows]
            elif per_member_state(value) and merge == "mean":
                value[rows] = (value[rows] + other[key][rows]) / 2
    elif other and removed is not None:  # the input matrix has no state yet: the output's serves
        optimizer.state[source] = other
    if removed is not None:
        del output_group["params"][_index(output_group["params"], output)]
        optimizer.state.pop(output, None)


def per_member_state(value: object) -> bool:
    """True for an optimizer state tensor with one row per member (moments, not the step)."""
    return torch.is_tensor(value) and value.dim() > 0 and value.is_floating_point()


def tie_penalty(model: nn.Module, strength: float) -> torch.Tensor:
    """Soft tying: (S,) strength * ||E_in - E_out||^2 per member, to add to the loss while
    untied (zeros when tied or strength is 0). Its gradient pulls each matrix towards the other
    by 2 * strength * (difference)."""
    embeddings = model if isinstance(model, TiedEmbeddings) else model.embeddings
    return strength * embeddings.gap()


def _group_holding(optimizer: torch.optim.Optimizer, param: nn.Parameter, what: str) -> dict:
    """The param group that holds `param` (by identity)."""
    for group in optimizer.param_groups:
        if any(p is param for p in group["params"]):
            return group
    raise ValueError(f"the optimizer does not hold the {what} embedding matrix")


def _index(params: list[nn.Parameter], param: nn.Parameter) -> int:
    """Position of `param` in `params` by identity (list.index would compare tensors)."""
    return next(i for i, p in enumerate(params) if p is param)
