"""The exact population fit of a model: how far its predictions are from the language.

Over every context r of the language with its exact probability P(r) (dhwt.languages.truth), for
each ensemble member:
- cross-entropy  sum_r P(r) sum_y p(y|r) (-log q(y|r)), whose floor is the Bayes optimum;
- accuracy       sum_r P(r) p(argmax_y q(y|r) | r), the expected accuracy on fresh draws.
No variants are drawn, so there is no sampling noise: a fixed evaluation set of drawn variants can
score below the Bayes optimum by chance, this cannot. It lives beside the models so that the
trainer (its "population" metric), dhwt.analysis.population (a run's checkpoint) and the
theorems' checks (dhwt.theory.population) use one formula, expected_cross_entropy.
"""

from __future__ import annotations

import numpy as np
import torch

from dhwt.errors import DhwtError
from dhwt.languages.truth import GroundTruth

CHUNK = 2**13  # contexts x members per forward pass: small passes stay in cache


def population_fit(model: torch.nn.Module, data: GroundTruth | object
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(cross-entropy (S,), expected accuracy (S,)) of an ensemble model over the contexts of
    `data`: a language's GroundTruth, or a task that holds one as `truth` (run.task, a Task).

    Examples:
        >>> import torch
        >>> from dhwt.languages import compute_truth, load_language
        >>> from dhwt.models import ModelConfig, build_model
        >>> truth = compute_truth(load_language("parity", {"n_bits": 3}), "mlm")
        >>> model = build_model(ModelConfig(vocab_size=len(truth.vocab),
        ...                                 max_len=truth.inputs.shape[1]), [1, 2], tied=True)
        >>> with torch.no_grad():  # zero embeddings: uniform predictions over the 7 tokens
        ...     _ = model.embeddings.input_weight.zero_()
        >>> cross_entropy, accuracy = population_fit(model, truth)
        >>> cross_entropy.round(6).tolist()  # log 7 = 1.945910...
        [1.94591, 1.94591]
        >>> accuracy.round(6).tolist()  # ties pick token 0, '0a': P(bit 0 masked) * 0.1
        [0.05, 0.05]
    """
    truth = _truth(data)
    weight0 = next(model.parameters())
    members, device = weight0.shape[0], weight0.device
    chunk = max(1, CHUNK // members)
    ce = torch.zeros(members, dtype=torch.float64)
    acc = torch.zeros(members, dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        for start in range(0, len(truth.context_probs), chunk):
            part = slice(start, start + chunk)
            inputs = torch.as_tensor(truth.inputs[part]).to(device).expand(members, -1, -1)
            padding = (None if truth.padding is None else torch.as_tensor(
                truth.padding[part]).to(device).expand(members, -1, -1))
            logits = model(inputs, padding)  # (S, n, L, V)
            rows = torch.arange(inputs.shape[1], device=device)
            at = logits[:, rows, torch.as_tensor(truth.positions[part]).to(device)]
            at = at.double().cpu()  # (S, n, V)
            p = torch.as_tensor(truth.conditionals[part], dtype=torch.float64)  # (n, V)
            weight = torch.as_tensor(truth.context_probs[part], dtype=torch.float64)  # (n,)
            ce += expected_cross_entropy(at.log_softmax(-1), p, weight)
            chosen = p.gather(1, at.argmax(-1).T).T  # (S, n): p(argmax q | r)
            acc += (chosen * weight).sum(-1)
    return ce.numpy(), acc.numpy()


def expected_cross_entropy(log_q: torch.Tensor, conditionals: torch.Tensor,
                           probs: torch.Tensor) -> torch.Tensor:
    """(S,) sum_r P(r) sum_y p(y|r) (-log q(y|r)): the exact population cross-entropy of the
    members' log-predictions log_q (S, n, V) at n contexts with exact conditionals p (n, V) and
    probabilities P(r) (n,); differentiable, so the theorems' checks descend on it too
    (dhwt.theory.population)."""
    return -((conditionals * log_q).sum(-1) * probs).sum(-1)


def _truth(data: GroundTruth | object) -> GroundTruth:
    """The GroundTruth of `data` (itself, or a task's `truth`); DhwtError for anything else."""
    if isinstance(data, GroundTruth):
        return data
    truth = getattr(data, "truth", None)
    if isinstance(truth, GroundTruth):
        return truth
    if data is None or hasattr(data, "truth"):
        raise DhwtError("this task has no exact ground truth (only synthetic languages do)")
    raise DhwtError(f"population_fit takes a task (with .truth) or a GroundTruth, got "
                    f"{type(data).__name__}")
