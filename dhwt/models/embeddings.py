"""Input and output embeddings with tying as one visible state.

Tied means one matrix serves both ends: the input lookup and the logits h @ E^T. Untied means a
second Parameter exists for the logits. The state of the whole ensemble is one line,
`untied_output is None`; an ensemble whose members differ (tie variants trained as one batched
computation) also says per member: `tied_members`, True where the logits use the input matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from dhwt.errors import DhwtError

MERGES = ("in", "out", "mean")
#: The state-dict key (under the module's prefix) of `tied_members`, present only when they differ.
TIED_MEMBERS = "tied_members"


class TiedEmbeddings(nn.Module):
    """The (S, V, d) input and output embedding matrices of an ensemble of S members.

    `input_weight` is the same Parameter object for the module's whole life (tie writes the merged
    value into it in place), so an optimizer holding it never loses it. `untied_output` exists
    while any member is untied; `tied_members` says which members' logits use their input rows
    instead (all True when `untied_output` is None, all False when every member is untied). It is
    a tuple, so asking costs no device synchronisation; `_rows` is its copy on the weights'
    device for the logits. A tied member's rows of `untied_output` are unused: they get zero
    gradients and are overwritten when the member unties.

    The state dict carries the state: loading a dict with (without) `untied_output` unties (ties)
    first, and a dict of a mixed ensemble also holds `tied_members` (a homogeneous one does not,
    so its dict is the same as ever). Parameter order is always input then output, so an
    optimizer built from `parameters()` after loading lines up with one that
    `dhwt.training.tying.apply_switch` extended.

    Examples:
        >>> import torch
        >>> from dhwt.models import TiedEmbeddings
        >>> emb = TiedEmbeddings(torch.randn(2, 7, 4))  # 2 members, 7 tokens, d 4: tied
        >>> emb.tied, emb.output_weight is emb.input_weight
        (True, True)
        >>> _ = emb.untie()  # the output matrix starts as an exact copy: no prediction changes
        >>> emb.tied, torch.equal(emb.output_weight, emb.input_weight), emb.gap().tolist()
        (False, True, [0.0, 0.0])
        >>> with torch.no_grad():
        ...     _ = emb.untied_output.add_(1.0)  # as if training moved every output entry by 1
        >>> emb.gap().tolist()  # ||E_in - E_out||^2 = 7 * 4 entries, 1 apart
        [28.0, 28.0]
        >>> _ = emb.tie("mean")  # one matrix again, the midpoint of the two
        >>> emb.tied, emb.gap().tolist()
        (True, [0.0, 0.0])
        >>> _ = emb.untie(members=[0])  # a mixed ensemble: member 0 untied, member 1 tied
        >>> emb
        TiedEmbeddings(members=2, vocab=7, d=4, tied=[False, True])
    """

    untied_output: nn.Parameter | None
    tied_members: tuple[bool, ...]
    _rows: torch.Tensor

    def __init__(self, input_weight: torch.Tensor, output_weight: torch.Tensor | None = None,
                 tied_members: Sequence[bool] | None = None):
        """Tied (no output_weight), untied, or, given tied_members, untied for the members whose
        entry is False (output_weight's rows of the others are not used)."""
        super().__init__()
        if input_weight.dim() != 3:
            raise ValueError(f"input_weight must be (S, V, d), got {tuple(input_weight.shape)}")
        if output_weight is not None and output_weight.shape != input_weight.shape:
            raise ValueError(
                f"output_weight shape {tuple(output_weight.shape)} differs from input_weight "
                f"shape {tuple(input_weight.shape)}"
            )
        members = input_weight.shape[0]
        if tied_members is None:
            tied_members = [output_weight is None] * members
        if len(tied_members) != members or (output_weight is None and not all(tied_members)):
            raise ValueError(f"tied_members must give {members} members and be all True "
                             f"without an output_weight, got {list(tied_members)}")
        self.input_weight = nn.Parameter(input_weight)
        self.register_buffer("_rows", torch.zeros(members, dtype=torch.bool), persistent=False)
        self._set_tied(tied_members)
        if all(tied_members):
            output_weight = None
        self.register_parameter(
            "untied_output", None if output_weight is None else nn.Parameter(output_weight)
        )

    @property
    def tied(self) -> bool:
        """True when one matrix serves as input and output embedding for every member."""
        return self.untied_output is None

    @property
    def mixed(self) -> bool:
        """True when some members are tied and others are not."""
        return self.untied_output is not None and any(self.tied_members)

    @property
    def output_weight(self) -> torch.Tensor:
        """The (S, V, d) matrix used for the logits: `input_weight` when tied, `untied_output`
        when untied, each member's own choice of the two when mixed."""
        if self.untied_output is None:
            return self.input_weight
        if not self.mixed:
            return self.untied_output
        return torch.where(self._rows.view(-1, 1, 1), self.input_weight, self.untied_output)

    def untie(self, members: Sequence[int] | None = None) -> nn.Parameter:
        """Give `members` (default: all) output rows of their own, exact copies of their input
        rows; return `untied_output` (made here if no member was untied before)."""
        chosen = self._members(members, tied=True, action="untie")
        if self.untied_output is None:
            self.untied_output = nn.Parameter(
                self.input_weight.detach().clone(), requires_grad=self.input_weight.requires_grad
            )
        else:
            with torch.no_grad():
                self.untied_output[chosen] = self.input_weight[chosen]
        self._set_tied([t and m not in chosen for m, t in enumerate(self.tied_members)])
        return self.untied_output

    def tie(self, merge: str = "mean", members: Sequence[int] | None = None) -> nn.Parameter | None:
        """Make `members` (default: all) use one matrix again; return `untied_output` if it was
        removed (no member is untied any more), else None.

        merge "in" keeps E_in, "out" takes E_out, "mean" takes (E_in + E_out) / 2 (the point that
        moves both matrices least in total squared distance). The value goes into the members'
        rows of `input_weight` in place.
        """
        if merge not in MERGES:
            raise DhwtError(f"tie merge must be one of {', '.join(MERGES)}, got {merge!r}")
        chosen = self._members(members, tied=False, action="tie")
        output = self.untied_output
        assert output is not None
        with torch.no_grad():
            if merge == "out":
                self.input_weight[chosen] = output[chosen]
            elif merge == "mean":
                self.input_weight[chosen] = (self.input_weight[chosen] + output[chosen]) * 0.5
        self._set_tied([t or m in chosen for m, t in enumerate(self.tied_members)])
        if all(self.tied_members):
            self.untied_output = None
            return output
        return None

    def _members(self, members: Sequence[int] | None, tied: bool, action: str) -> list[int]:
        """The indices of `members` (default: all), each of which must be `tied` now."""
        count = self.input_weight.shape[0]
        chosen = list(range(count)) if members is None else list(members)
        if not chosen or any(not 0 <= m < count for m in chosen) or len(set(chosen)) < len(chosen):
            raise ValueError(f"members must be distinct indices in 0..{count - 1}, got {chosen}")
        state = "untied" if tied else "tied"
        wrong = [m for m in chosen if self.tied_members[m] != tied]
        if wrong:
            who = "the embeddings are" if len(wrong) == count else f"members {wrong} are"
            raise DhwtError(f"cannot {action}: {who} already {state}")
        return chosen

    def _set_tied(self, flags: Sequence[bool]) -> None:
        """tied_members := flags (one per member); `_rows` follows."""
        self.tied_members = tuple(bool(f) for f in flags)
        with torch.no_grad():
            self._rows.copy_(torch.tensor(self.tied_members, dtype=torch.bool))

    def gap(self) -> torch.Tensor:
        """(S,) squared Frobenius distance ||E_in - E_out||^2 per member (zero for tied members).

        Differentiable, so `strength * gap()` serves as the soft-tying penalty.
        """
        if self.untied_output is None:
            return self.input_weight.new_zeros(self.input_weight.shape[0])
        return (self.input_weight - self.output_weight).pow(2).sum(dim=(1, 2))

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str,
                            keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self.mixed:
            destination[prefix + TIED_MEMBERS] = torch.tensor(self.tied_members)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str,
                              local_metadata: dict[str, Any], strict: bool,
                              missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        """Adopt the tying state the dict describes (if it holds these embeddings), then load."""
        if prefix + "input_weight" in state_dict:
            has_output = prefix + "untied_output" in state_dict
            rows = state_dict.get(prefix + TIED_MEMBERS)
            if has_output and self.untied_output is None:
                self.untied_output = nn.Parameter(self.input_weight.detach().clone(),
                                                  requires_grad=self.input_weight.requires_grad)
            elif not has_output:
                self.untied_output = None
            members = self.input_weight.shape[0]
            self._set_tied(rows.tolist() if rows is not None else [not has_output] * members)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        if prefix + TIED_MEMBERS in unexpected_keys:
            unexpected_keys.remove(prefix + TIED_MEMBERS)

    def extra_repr(self) -> str:
        members, vocab, width = self.input_weight.shape
        tied = list(self.tied_members) if self.mixed else self.tied
        return f"members={members}, vocab={vocab}, d={width}, tied={tied}"
