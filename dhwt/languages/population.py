"""A language's whole distribution as one weighted batch: the exact population objective.

Every symbol-level string x with its probability P(x) (dhwt.languages.language.symbol_strings),
read as the objective reads it:
- clm: [BOS] x, each next token (and [EOS] after the last) weighted P(x), normalised over every
  target token (the per-token average of the causal loss);
- mlm: x with one maskable position j masked, once per such j, weighted P(x) / m(x).
So sum(weights * CE) of a model on this batch is its exact population cross-entropy
(dhwt.models.population.population_fit computes the same from the exact conditionals), with no
variant or mask drawn. Weights are float64, to be read in the model's precision.

Examples:
    >>> from dhwt.languages import load_language
    >>> batch = population_batch(load_language("parity", {"n_bits": 2}), "mlm")
    >>> batch.inputs.shape  # 16 symbol strings x 2 maskable bits, length 3
    torch.Size([32, 3])
    >>> float(batch.weights.sum())
    1.0
"""

from __future__ import annotations

import numpy as np
import torch

from dhwt.languages.batch import Batch
from dhwt.languages.enumeration import PAD
from dhwt.languages.language import BOS, EOS, MASK, PAD_TOKEN, Language, symbol_strings
from dhwt.languages.task import IGNORE


def population_batch(language: Language, objective: str) -> Batch:
    """The exact population objective of `language` under `objective` as one Batch (B, L)."""
    rows, probs = symbol_strings(language)
    vocab = language.vocab(objective)
    pad = rows == PAD
    filler = vocab.index(PAD_TOKEN) if PAD_TOKEN in vocab else 0
    if objective == "clm":
        length = (~pad).sum(axis=1)
        bos = np.full((len(rows), 1), vocab.index(BOS))
        inputs = np.concatenate([bos, np.where(pad, filler, rows)], axis=1)
        targets = np.concatenate([np.where(pad, IGNORE, rows), np.full_like(bos, IGNORE)], axis=1)
        targets[np.arange(len(rows)), length] = vocab.index(EOS)
        real = targets != IGNORE
        weights = real * probs[:, None]
        padding = np.concatenate([np.zeros_like(bos, dtype=bool), pad], axis=1)
    else:
        maskable = ~pad & language.maskable[language.symbol_class][np.where(pad, 0, rows)]
        string, position = np.nonzero(maskable)
        inputs = np.where(pad, filler, rows)[string]
        targets = np.full_like(inputs, IGNORE)
        targets[np.arange(len(string)), position] = rows[string, position]
        inputs[np.arange(len(string)), position] = vocab.index(MASK)
        weights = np.zeros(inputs.shape)
        weights[np.arange(len(string)), position] = (probs / maskable.sum(axis=1))[string]
        padding = pad[string]
    return Batch(torch.as_tensor(inputs, dtype=torch.long),
                 torch.as_tensor(targets, dtype=torch.long),
                 torch.as_tensor(weights / weights.sum(), dtype=torch.float64),
                 torch.as_tensor(padding) if PAD_TOKEN in vocab else None)
