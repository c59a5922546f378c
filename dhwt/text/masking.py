"""The masking rule of a masked LM on natural text (dhwt.text.text_task), stated exactly.

Each real position of a window is chosen independently with probability `rate`; the loss is on
the chosen positions only. What the model reads at a chosen position depends on `rule`:

- `"mask"` (the default): always [MASK]. This is the rule under which proofs/T5's masked-LM
  results hold (the target is never visible where it is predicted).
- `"bert"`: BERT's 80/10/10: [MASK] with probability 0.8, a token drawn uniformly from the
  other ids (every id but [MASK], the target's own included) with probability 0.1, the target
  itself with probability 0.1. Under it no two maskable tokens are ~sem (proofs/T5, "not
  claimed"): the target is sometimes visible at the predicted position.

Draw order from the generator, so that a batch is a function of the generator's state: the
choice (rand, shape of `tokens`), then for "bert" the 80/10/10 split (rand) and the random
tokens (randint), each over the whole shape.

Examples:
    >>> import torch
    >>> tokens = torch.arange(12).view(2, 6)
    >>> inputs, chosen = apply_mask(tokens, 0.5, "mask", 12, torch.Generator().manual_seed(0))
    >>> bool((inputs[chosen] == 12).all()), torch.equal(inputs[~chosen], tokens[~chosen])
    (True, True)
"""

from __future__ import annotations

import torch

#: The defaults: BERT's rate, and the rule T5 covers.
MASK_RATE = 0.15
MASK_RULE = "mask"
#: Of the chosen positions under "bert": [MASK], a random token, the token itself.
BERT_SPLIT = (0.8, 0.1, 0.1)


def apply_mask(tokens: torch.Tensor, rate: float, rule: str, mask_id: int,
               generator: torch.Generator, real: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, chosen) for long `tokens` of any shape: chosen is True at the positions chosen
    (only where `real`, if given), inputs are tokens with the rule applied there. Random
    tokens of "bert" are drawn from ids 0 .. mask_id - 1 (every id but [MASK], which is last)."""
    chosen = torch.rand(tokens.shape, generator=generator) < rate
    if real is not None:
        chosen &= real
    if rule == "mask":
        return tokens.masked_fill(chosen, mask_id), chosen
    split = torch.rand(tokens.shape, generator=generator)
    random = torch.randint(0, mask_id, tokens.shape, generator=generator)
    inputs = torch.where(chosen & (split < BERT_SPLIT[0]), mask_id, tokens)
    swap = chosen & (split >= BERT_SPLIT[0]) & (split < BERT_SPLIT[0] + BERT_SPLIT[1])
    return torch.where(swap, random, inputs), chosen
