"""Device hygiene: every tensor a forward pass makes lives on the device of the model's inputs.

There is no GPU here, so the models run on torch's "meta" device instead: meta tensors carry
shapes and no data, and an op that mixes a meta tensor with a (non-scalar) CPU tensor raises. A
mask, position table or state built on the CPU inside forward therefore fails these tests just as
it would fail on a GPU (checked: they failed on the models before masks took the inputs' device).
"""

from __future__ import annotations

import pytest
import torch

from dhwt.languages.batch import Batch
from dhwt.models import ModelConfig, build_model
from dhwt.training.ensemble import member_loss

MEMBERS, BATCH, LENGTH, VOCAB = 2, 3, 6, 7
META = torch.device("meta")

# (id, ModelConfig fields): every architecture, both objectives, every positions option, and
# dropout (whose masks and explicit attention mask are made inside forward)
CASES = [
    (f"transformer-{objective}-{positions}-dropout{dropout}",
     dict(causal=objective == "clm", positions=positions, dropout=dropout))
    for objective in ("mlm", "clm")
    for positions in ("none", "learned", "sinusoidal")
    for dropout in (0.0, 0.1)
] + [
    ("transformer-clm-packed-dropout", dict(causal=True, dropout=0.1, dropout_masks="packed")),
    ("transformer-pre-ln-final-norm-bias",
     dict(norm="pre", final_norm=True, output_bias=True, emb_scale=True)),
    ("lstm-mlm", dict(architecture="lstm")),
    ("lstm-clm", dict(architecture="lstm", causal=True)),
    ("mixer-mlm", dict(architecture="mixer", final_norm=True)),
]


def _meta_batch(padded: bool) -> Batch:
    """An (S, B, L) batch on the meta device; pads (if any) made on the CPU, then moved."""
    inputs = torch.zeros(MEMBERS, BATCH, LENGTH, dtype=torch.long, device=META)
    padding = None
    if padded:
        padding = torch.zeros(MEMBERS, BATCH, LENGTH, dtype=torch.bool)
        padding[:, 0, -2:] = True
        padding = padding.to(META)
    weights = torch.empty(MEMBERS, BATCH, LENGTH, device=META)
    return Batch(inputs, torch.zeros_like(inputs), weights, padding)


@pytest.mark.parametrize("padded", [False, True], ids=["nopad", "pad"])
@pytest.mark.parametrize("fields", [c for _, c in CASES], ids=[i for i, _ in CASES])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_forward_loss_and_backward_stay_on_the_inputs_device(fields, padded, tied):
    config = ModelConfig(vocab_size=VOCAB, max_len=LENGTH, **fields)
    model = build_model(config, [1, 2], tied=tied).to(META)
    model.train()  # dropout on, so its masks are made too
    batch = _meta_batch(padded)
    logits = model(batch.inputs, batch.padding)
    assert logits.device == META and logits.shape == (MEMBERS, BATCH, LENGTH, VOCAB)
    hidden = model.hidden(batch.inputs, batch.padding)
    assert hidden.device == META and hidden.shape == (MEMBERS, BATCH, LENGTH, config.d_model)
    loss = member_loss(logits, batch) + model.embeddings.gap()
    assert loss.device == META and loss.shape == (MEMBERS,)
    loss.sum().backward()
    assert all(p.grad.device == META for p in model.parameters())


def test_weights_are_drawn_on_the_cpu_then_moved():
    """The same seed gives the same initial weights whatever device the model goes to: the
    weights are drawn before any move, so moving is the only difference."""
    config = ModelConfig(vocab_size=VOCAB, max_len=LENGTH, positions="learned")
    moved = build_model(config, [5], tied=False).to(META)
    reference = build_model(config, [5], tied=False)
    assert all(p.device == META for p in moved.parameters())
    assert all(b.device == META for b in moved.buffers())
    for (name, p), (ref_name, ref) in zip(moved.named_parameters(), reference.named_parameters()):
        assert name == ref_name and p.shape == ref.shape
    assert all(p.device.type == "cpu" for p in reference.parameters())


def test_dropout_generators_are_the_cpu_ones_on_cpu_and_none_on_meta():
    config = ModelConfig(vocab_size=VOCAB, max_len=LENGTH, dropout=0.1)
    model = build_model(config, [5, 6], tied=True)
    assert model.dropout_generators(torch.device("cpu")) is model.generators
    assert model.dropout_generators(META) is None
