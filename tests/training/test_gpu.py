"""The CUDA path, where a GPU is: attention dropout through SDPA's fused kernels with each
member's own generator, fp32 runs that agree with the CPU's, bf16-mixed and tf32 runs that
train and resume, fused AdamW, the deferred NaN guard, and torch.compile. Skipped without a GPU
(experiments/wikitext/gpu_check.sh runs them on a lent one)."""

from __future__ import annotations

import json

import pytest
import torch

from dhwt.training.runner import train_run
from dhwt.config import TrainConfig
from dhwt.errors import DhwtError
from dhwt.models import ModelConfig, Transformer, sdpa
from dhwt.models.dropout import keep_scales
from dhwt.training.trainer import Trainer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
CUDA = torch.device("cuda")
CONFIG = dict(seeds="1-2", steps=40, eval_every=10, snapshot_every=10, checkpoint_every=10,
              tie_schedule="untie@20", lr=1e-2, batch_size=8, d_model=16, d_ff=32, n_heads=2)


@pytest.fixture(scope="module")
def task(make_task):
    return make_task()


def _metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _model(seeds, length=16):
    config = ModelConfig(vocab_size=50, max_len=length, d_model=32, n_heads=4, d_ff=64,
                         n_layers=2, dropout=0.2, causal=True)
    return Transformer(config, seeds, tied=False).to(CUDA).train()


def test_attention_dropout_on_cuda_goes_through_sdpa_one_member_at_a_time(monkeypatch):
    calls = []
    original = sdpa.member_dropout_attention
    monkeypatch.setattr(sdpa, "member_dropout_attention",
                        lambda *a: calls.append(len(a[-1])) or original(*a))
    inputs = torch.randint(0, 50, (2, 3, 16), device=CUDA)
    ensemble, solo = _model([1, 2]), _model([2])
    out = ensemble(inputs)
    assert calls == [2, 2]  # one call per layer, two members each
    assert torch.allclose(out[1], solo(inputs[1:])[0], atol=1e-4)  # member 1 = seed 2 alone


def test_sdpa_dropout_on_cuda_is_the_hand_dropout_in_distribution():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 64, 32, generator=g).to(CUDA) for _ in range(3))
    clean = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    p, draws = 0.3, 2000
    generator = torch.Generator(CUDA).manual_seed(5)
    fused = torch.stack([sdpa.member_dropout_attention(q, k, v, None, True, p, [generator])
                         for _ in range(draws)])
    allowed = torch.ones(64, 64, dtype=torch.bool, device=CUDA).tril()
    weights = (q @ k.mT / 32**0.5).masked_fill(~allowed, float("-inf")).softmax(-1)
    keep = torch.empty(draws, *weights.shape, device=CUDA).bernoulli_(1 - p, generator=generator)
    hand = (weights * keep / (1 - p)) @ v
    for samples in (fused, hand):
        error = (samples.mean(0) - clean).abs() / (samples.std(0) / draws**0.5 + 1e-6)
        assert error.max() < 5.5
    ratio = fused.var(0)[..., 1:, :] / hand.var(0)[..., 1:, :]
    assert 0.85 < ratio.median() < 1.15


def test_fp32_run_on_cuda_agrees_with_the_cpu(task, tmp_path):
    """No dropout, no TF32: the GPU run follows the CPU run to float rounding."""
    cpu = _metrics(train_run(TrainConfig(**CONFIG), task, tmp_path / "cpu").run_dir)
    gpu = _metrics(train_run(TrainConfig(**CONFIG, device="cuda"), task, tmp_path / "gpu").run_dir)
    assert [(r["step"], r["split"]) for r in cpu] == [(r["step"], r["split"]) for r in gpu]
    for a, b in zip(cpu, gpu):
        assert abs(a["loss"] - b["loss"]) <= 1e-3 * abs(a["loss"]) + 1e-5, (a, b)


@pytest.mark.parametrize("values", [dict(precision="bf16-mixed"), dict(tf32=True),
                                    dict(precision="bf16-mixed", dropout=0.1)])
def test_mixed_and_tf32_runs_train_and_resume_on_cuda(task, tmp_path, interrupt_at, values):
    config = TrainConfig(**CONFIG, device="cuda", **values)
    whole = _metrics(train_run(config, task, tmp_path / "whole").run_dir)
    interrupt_at(35)
    with pytest.raises(KeyboardInterrupt):
        train_run(config, task, tmp_path / "cut")
    cut = _metrics(train_run(config, task, tmp_path / "cut", resume=True).run_dir)
    assert [(r["step"], r["split"]) for r in cut] == [(r["step"], r["split"]) for r in whole]
    fp32 = _metrics(train_run(TrainConfig(**CONFIG, device="cuda", dropout=values.get("dropout", 0)),
                          task, tmp_path / "fp32").run_dir)
    for a, b, c in zip(whole, cut, fp32):
        assert abs(a["loss"] - b["loss"]) <= 1e-2 * abs(a["loss"]) + 1e-4, (a, b)
        if "dropout" not in values:  # the same model, rounded otherwise
            assert abs(a["loss"] - c["loss"]) <= 0.05 * abs(c["loss"]) + 1e-3, (a, c)


def test_adamw_is_fused_on_cuda(task):
    trainer = Trainer([(TrainConfig(**CONFIG, device="cuda"), "unused")], task,
                      parallel=_parallel())
    assert trainer.optimizer.defaults["fused"] and not trainer.optimizer.defaults["foreach"]


def _parallel():
    from dhwt.training.distributed import Parallel
    return Parallel(device=CUDA)


def test_a_nan_loss_on_cuda_is_caught_at_the_next_record_naming_its_step(task, tmp_path,
                                                                         monkeypatch, at_step):
    import dhwt.training.trainer as trainer

    models = []
    build = trainer.build_model
    monkeypatch.setattr(trainer, "build_model", lambda *a, **k: models.append(build(*a, **k))
                        or models[-1])

    def poison() -> None:
        with torch.no_grad():
            models[-1].embeddings.input_weight.fill_(float("nan"))

    at_step(13, poison)
    with pytest.raises(DhwtError, match=r"loss became nan at step 13 \(member seed 1\)"):
        train_run(TrainConfig(**CONFIG, device="cuda"), task, tmp_path / "nan")
    steps = {r["step"] for r in _metrics(tmp_path / "nan")}
    assert max(steps) == 10  # nothing of steps 13-20 was recorded


def test_compiled_run_on_cuda_agrees_with_the_plain_one(task, tmp_path):
    plain = _metrics(train_run(TrainConfig(**CONFIG, device="cuda"), task, tmp_path / "a").run_dir)
    compiled = _metrics(train_run(TrainConfig(**CONFIG, device="cuda", compile=True), task,
                              tmp_path / "b").run_dir)
    for a, b in zip(plain, compiled):
        assert abs(a["loss"] - b["loss"]) <= 1e-3 * abs(a["loss"]) + 1e-5, (a, b)


def test_packed_dropout_masks_on_cuda_keep_their_rate_per_member():
    """The packed masks from each member's CUDA generator: rate 1 - p, each its own stream."""
    def generators(seeds):
        return [torch.Generator(CUDA).manual_seed(s) for s in seeds]

    keep = keep_scales("packed", 0.1, (2, 400_000), generators([1, 2]), torch.float32, CUDA)
    assert keep.mean().item() == pytest.approx(1.0, abs=5e-3)
    alone = keep_scales("packed", 0.1, (1, 400_000), generators([2]), torch.float32, CUDA)
    assert torch.equal(keep[1], alone[0]) and not torch.equal(keep[0], keep[1])
