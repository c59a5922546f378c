"""The population batch is the exact population objective: a model's weighted loss on it equals
dhwt.models.population.population_fit's cross-entropy, computed from the exact conditionals
(another path: contexts and soft targets instead of strings and hard targets)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dhwt.languages import compute_truth, load_language
from dhwt.languages.population import population_batch
from dhwt.models import ModelConfig, build_model
from dhwt.models.population import population_fit


@pytest.mark.parametrize("name,overrides,objective", [
    ("parity", {"n_bits": 3}, "mlm"),            # variants drawn per position: expanded
    ("four-cases", {}, "clm"),                   # strings of unequal length: padded
    ("four-cases", {}, "mlm"),
    ("demand", {"k": 3, "dose": 0.5}, "clm"),
])
def test_the_loss_on_the_batch_is_the_population_cross_entropy(name, overrides, objective):
    language = load_language(name, overrides)
    batch = population_batch(language, objective)
    assert float(batch.weights.sum()) == pytest.approx(1.0, abs=1e-15)
    config = ModelConfig(vocab_size=len(language.vocab(objective)), max_len=batch.inputs.shape[1],
                         d_model=8, d_ff=16, causal=objective == "clm")
    model = build_model(config, [0, 1, 2], tied=True).double()
    members = (3, -1, -1)
    with torch.no_grad():
        loss = model(batch.inputs.expand(members),
                     None if batch.padding is None else batch.padding.expand(members),
                     targets=batch.targets.expand(members), weights=batch.weights.expand(members))
    cross_entropy, _ = population_fit(model, compute_truth(language, objective))
    np.testing.assert_allclose(loss.numpy(), cross_entropy, rtol=1e-12)
