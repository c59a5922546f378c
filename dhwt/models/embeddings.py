"""Input and output embeddings with tying as one visible state.

Tied means one matrix serves both ends: the input lookup and the logits h @ E^T. Untied means a
second Parameter exists for the logits. The whole state is one line: `untied_output is None`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dhwt.errors import DhwtError

MERGES = ("in", "out", "mean")


class TiedEmbeddings(nn.Module):
    """The (S, V, d) input and output embedding matrices of an ensemble of S members.

    `input_weight` is the same Parameter object for the module's whole life (tie writes the merged
    value into it in place), so an optimizer holding it never loses it. `output_weight` is the
    Parameter the logits use: `input_weight` itself when tied, `untied_output` when untied.
    The state dict carries the state: loading a dict with (without) `untied_output` unties (ties)
    first, so a checkpoint restores the tying state with the weights. Parameter order is always
    input then output, so an optimizer built from `parameters()` after loading lines up with one
    that `dhwt.training.tying.apply_switch` extended.
    """

    untied_output: nn.Parameter | None

    def __init__(self, input_weight: torch.Tensor, output_weight: torch.Tensor | None = None):
        super().__init__()
        if input_weight.dim() != 3:
            raise ValueError(f"input_weight must be (S, V, d), got {tuple(input_weight.shape)}")
        if output_weight is not None and output_weight.shape != input_weight.shape:
            raise ValueError(
                f"output_weight shape {tuple(output_weight.shape)} differs from input_weight "
                f"shape {tuple(input_weight.shape)}"
            )
        self.input_weight = nn.Parameter(input_weight)
        self.register_parameter(
            "untied_output", None if output_weight is None else nn.Parameter(output_weight)
        )

    @property
    def tied(self) -> bool:
        """True when one matrix serves as input and output embedding."""
        return self.untied_output is None

    @property
    def output_weight(self) -> nn.Parameter:
        """The (S, V, d) Parameter used for the logits."""
        return self.input_weight if self.untied_output is None else self.untied_output

    def untie(self) -> nn.Parameter:
        """Give the output its own matrix, an exact copy of the input one; return it."""
        if not self.tied:
            raise DhwtError("cannot untie: the embeddings are already untied")
        self.untied_output = nn.Parameter(
            self.input_weight.detach().clone(), requires_grad=self.input_weight.requires_grad
        )
        return self.untied_output

    def tie(self, merge: str = "mean") -> nn.Parameter:
        """Make one matrix serve both ends again; return the Parameter that was removed.

        merge "in" keeps E_in, "out" takes E_out, "mean" takes (E_in + E_out) / 2 (the point that
        moves both matrices least in total squared distance). The value goes into `input_weight`
        in place; the removed Parameter is the former output matrix.
        """
        if merge not in MERGES:
            raise DhwtError(f"tie merge must be one of {', '.join(MERGES)}, got {merge!r}")
        if self.untied_output is None:
            raise DhwtError("cannot tie: the embeddings are already tied")
        removed = self.untied_output
        with torch.no_grad():
            if merge == "out":
                self.input_weight.copy_(removed)
            elif merge == "mean":
                self.input_weight.add_(removed).mul_(0.5)
        self.untied_output = None
        return removed

    def gap(self) -> torch.Tensor:
        """(S,) squared Frobenius distance ||E_in - E_out||^2 per member (zeros when tied).

        Differentiable, so `strength * gap()` serves as the soft-tying penalty.
        """
        if self.untied_output is None:
            return self.input_weight.new_zeros(self.input_weight.shape[0])
        return (self.input_weight - self.untied_output).pow(2).sum(dim=(1, 2))

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        """Adopt the tying state the dict describes (if it holds these embeddings), then load."""
        if prefix + "input_weight" in state_dict:
            has_output = prefix + "untied_output" in state_dict
            if has_output and self.tied:
                self.untie()
            elif not has_output and not self.tied:
                self.tie("in")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        members, vocab, width = self.input_weight.shape
        return f"members={members}, vocab={vocab}, d={width}, tied={self.tied}"
