"""Tie schedules: when the embeddings switch between tied and untied, and the switch itself.

The language (case-insensitive, spaces ignored):

    tied | untied                       one state for the whole run
    untie@N | tie@N[:in|:out|:mean]     a switch taking effect after N updates (0 <= N < steps)
    untie@2000,tie@8000:in              switches in increasing steps, alternating

A schedule of switches starts in the state its first switch leaves (untie@N starts tied); it may
be opened by `tied` or `untied` to say so explicitly. A switch at step N is applied after N
optimizer updates, before update N + 1 (so untie@0 trains untied from an output matrix that
copies the input one, while `untied` draws the output matrix independently). `tie` merges the two
matrices by the mean unless told otherwise: (E_in + E_out) / 2 is the one matrix closest to both
(least total squared change).

`apply_switch` flips the model's `TiedEmbeddings` and carries the optimizer along, which is what
the paper's tie-then-untie prototype missed (its new output matrix never reached the optimizer).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from dhwt.errors import DhwtError
from dhwt.models.embeddings import MERGES, TiedEmbeddings

DEFAULT_MERGE = "mean"
_GRAMMAR = "expected tied, untied, untie@N, tie@N[:in|:out|:mean] or switches joined by commas"
_SWITCH = re.compile(r"(?P<action>untie|tie)@(?P<step>[^:]*)(?::(?P<merge>.*))?")


@dataclass(frozen=True)
class TieEvent:
    """One switch: after `step` updates, `action` ("tie" or "untie"); `merge` for ties only."""

    step: int
    action: str
    merge: str | None = None

    def __str__(self) -> str:
        return f"{self.action}@{self.step}" + (f":{self.merge}" if self.merge else "")


@dataclass(frozen=True)
class TieSchedule:
    """The tying state at step 0 and the switches after it. `str()` gives text `parse` reads back
    (canonical: merges spelled out, no redundant opening state)."""

    initial_tied: bool
    events: tuple[TieEvent, ...] = ()

    def __str__(self) -> str:
        if not self.events:
            return "tied" if self.initial_tied else "untied"
        return ",".join(str(e) for e in self.events)

    @classmethod
    def parse(cls, text: str, steps: int) -> TieSchedule:
        """Read a schedule for a run of `steps` updates; DhwtError naming the first problem."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise DhwtError(f"a tie schedule needs a positive number of steps, got {steps!r}")
        if not isinstance(text, str) or not text.strip():
            raise DhwtError(f"tie schedule is empty; {_GRAMMAR}")
        items = re.sub(r"\s+", "", text.lower()).split(",")
        if "" in items:
            raise DhwtError(f"tie schedule {text!r} has an empty item between commas; {_GRAMMAR}")
        opening = items[0] if items[0] in ("tied", "untied") else None
        switches = items[1:] if opening else items
        for item in switches:
            if item in ("tied", "untied"):
                raise DhwtError(
                    f"{item!r} may only open a tie schedule (got {text!r}); the switches after "
                    "it say what follows"
                )
        events = tuple(_parse_switch(item, text, steps) for item in switches)
        if opening is not None:
            initial_tied = opening == "tied"
        else:
            initial_tied = events[0].action == "untie"
        tied, previous, previous_item = initial_tied, None, ""
        for item, event in zip(switches, events):
            if previous is not None and event.step <= previous.step:
                raise DhwtError(
                    f"tie schedule steps must increase: {item!r} comes after {previous_item!r} "
                    f"in {text!r}"
                )
            if (event.action == "tie") == tied:
                state = "tied" if tied else "untied"
                since = f"after {previous_item!r}" if previous else f"the schedule starts {state}"
                raise DhwtError(
                    f"{item!r} would {event.action} embeddings that are already {state} "
                    f"({since}); switches must alternate"
                )
            tied, previous, previous_item = not tied, event, item
        return cls(initial_tied, events)


def _parse_switch(item: str, text: str, steps: int) -> TieEvent:
    """One `untie@N` or `tie@N[:merge]` item of `text`."""
    match = _SWITCH.fullmatch(item)
    if match is None:
        raise DhwtError(f"cannot read {item!r} in tie schedule {text!r}; {_GRAMMAR}")
    action, step_text, merge = match["action"], match["step"], match["merge"]
    if re.fullmatch(r"-\d+", step_text):
        raise DhwtError(
            f"step {step_text} in {item!r} is negative; a switch step counts updates from 0"
        )
    if not re.fullmatch(r"\d+", step_text):
        raise DhwtError(f"step {step_text!r} in {item!r} is not a whole number of updates")
    step = int(step_text)
    if step >= steps:
        raise DhwtError(
            f"switch {item!r} is at or beyond the end of the run ({steps} steps); a switch step "
            f"must be in [0, {steps})"
        )
    if action == "untie":
        if merge is not None:
            raise DhwtError(f"{item!r}: untie takes no merge mode (merges are for tie@N)")
        return TieEvent(step, action)
    if merge is None:
        merge = DEFAULT_MERGE
    if merge not in MERGES:
        raise DhwtError(
            f"unknown merge mode {merge!r} in {item!r}; allowed: {', '.join(MERGES)}"
        )
    return TieEvent(step, action, merge)


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
