"""Tie schedules: when the embeddings switch between tied and untied.

The language (case-insensitive, spaces ignored):

    tied | untied                       one state for the whole run
    untie@N | tie@N[:in|:out|:mean]     a switch taking effect after N updates (0 <= N < steps)
    untie@2000,tie@8000:in              switches in increasing steps, alternating

A schedule of switches starts in the state its first switch leaves (untie@N starts tied); it may
be opened by `tied` or `untied` to say so explicitly. A switch at step N is applied after N
optimizer updates, before update N + 1 (so untie@0 trains untied from an output matrix that
copies the input one, while `untied` draws the output matrix independently). `tie` merges the two
matrices by the mean unless told otherwise: (E_in + E_out) / 2 is the one matrix closest to both
(least total squared change). The switch itself is dhwt.training.tying.apply_switch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dhwt.errors import DhwtError
from dhwt.models.embeddings import MERGES

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


@dataclass(frozen=True)
class TieHistory:
    """How a member came to be untied at `step`: untied_at None means untied from the start
    (independent matrices); else the step of its last untie, when both were one copy."""

    step: int
    untied_at: int | None

    @property
    def since(self) -> int | None:
        return None if self.untied_at is None else self.step - self.untied_at


def tie_history(schedule: TieSchedule, step: int) -> TieHistory | None:
    """The history of a member trained by `schedule`, read at `step` (None: tied there; a switch
    at N takes effect after N updates, so a snapshot of step N shows it).

    Examples:
        >>> tie_history(TieSchedule.parse("untie@20", 100), 40)
        TieHistory(step=40, untied_at=20)
        >>> tie_history(TieSchedule.parse("untie@20", 100), 10) is None
        True
    """
    tied, untied_at = schedule.initial_tied, None
    for event in schedule.events:
        if event.step > step:
            break
        tied = event.action == "tie"
        untied_at = None if tied else event.step
    return None if tied else TieHistory(step, untied_at)


def last_tie(schedule: TieSchedule, step: int) -> int | None:
    """The step of the schedule's last tie switch at or before `step` (a switch at N shows from
    the snapshot of step N on); None: none, so a member tied at `step` is tied from the start.

    Examples:
        >>> last_tie(TieSchedule.parse("tie@100", 200), 200)
        100
        >>> last_tie(TieSchedule.parse("untie@50,tie@100", 200), 20) is None
        True
    """
    ties = [e.step for e in schedule.events if e.action == "tie" and e.step <= step]
    return ties[-1] if ties else None
