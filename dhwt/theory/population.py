"""The exact masked-LM population of a language as tensors, and a model's exact expected loss
over it: what the empirical checks (dhwt.theory.exor, dhwt.theory.price) train and measure on."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dhwt.models.population import expected_cross_entropy


class one_thread:
    """Run tiny-model torch work on one thread (faster, kinder to a busy machine); restore after."""

    def __enter__(self) -> None:
        self.threads = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        torch.set_num_threads(self.threads)


@dataclass(frozen=True)
class Contexts:
    """The exact masked-LM population: inputs (1, n, L), masked positions (n,), P(r) (n,),
    p(.|r) (n, V) in float64, and the GroundTruth they came from."""

    truth: object
    inputs: torch.Tensor
    positions: torch.Tensor
    probs: torch.Tensor
    conditionals: torch.Tensor

    def index(self, token: str) -> int:
        return self.truth.vocab.index(token)


def contexts(truth) -> Contexts:
    """The masked-LM population of a GroundTruth (of any masked-LM language) as Contexts."""
    return Contexts(truth, torch.from_numpy(truth.inputs).long()[None],
                    torch.from_numpy(truth.positions).long(),
                    torch.from_numpy(truth.context_probs).double(),
                    torch.from_numpy(truth.conditionals).double())


def masked(values: torch.Tensor, ctx: Contexts) -> torch.Tensor:
    """values (S, n, L, ...) -> (S, n, ...) at each context's masked position."""
    return values[:, torch.arange(len(ctx.positions)), ctx.positions]


def population_loss(model: torch.nn.Module, ctx: Contexts) -> torch.Tensor:
    """(S,) sum_r P(r) CE(p(.|r), q(.|r)): the exact expected masked-LM loss, soft targets."""
    inputs = ctx.inputs.expand(model.members, -1, -1)
    log_q = torch.log_softmax(masked(model(inputs), ctx), dim=-1)
    return expected_cross_entropy(log_q, ctx.conditionals, ctx.probs)
