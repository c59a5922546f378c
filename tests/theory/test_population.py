"""dhwt.theory.population: the exact population loss of a model against the mean loss over
batches the Task samples."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dhwt.languages import load_language, load_task, write_dataset
from dhwt.theory import exor
from dhwt.theory.population import population_loss


def test_population_loss_is_the_mean_loss_over_sampled_batches(tmp_path):
    """A second implementation: batches served by the Task (variants and masks drawn afresh) with
    the contract's loss sum(weights * CE), averaged over many draws, approach the exact loss."""
    write_dataset(load_language("parity", {"n_bits": exor.N_BITS}), tmp_path / "data",
                  valid_fraction=0.0, test_fraction=0.0, seed=14)
    task = load_task(tmp_path / "data", "mlm")
    ctx = exor.exor_contexts()
    model = exor.untied_float64(3, ctx)
    generator = torch.Generator().manual_seed(0)
    draws = []
    with torch.no_grad():
        model.embeddings.output_weight.mul_(0.2)  # milder logits: less spread between draws
        exact = float(population_loss(model, ctx)[0])
        for _ in range(150):
            batch = task.train_batch(generator, None)
            padding = None if batch.padding is None else batch.padding[None]
            logits = model(batch.inputs[None], padding)[0]
            ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.targets.reshape(-1),
                                 ignore_index=-100, reduction="none").view(batch.targets.shape)
            draws.append(float((batch.weights.double() * ce).sum()))
    mean, err = float(sum(draws) / len(draws)), float(torch.tensor(draws).std() / len(draws) ** 0.5)
    assert abs(mean - exact) < 4 * err + 1e-9, (mean, exact, err)
    assert err < 0.01 * exact  # the comparison is sharp enough to catch a mis-weighted loss
