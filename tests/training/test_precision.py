"""The precision settings on the CPU: bf16-mixed computes its products in bfloat16 and its loss in
float32, trains, resumes bit for bit, and bad combinations are one-line errors; and the member
dropout of SDPA (the GPU path, run here on the CPU's math kernels) draws each member's mask from
its own generator, equal in distribution to the hand-written dropout."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from dhwt.training.runner import train_run
from dhwt.config import TrainConfig
from dhwt.errors import DhwtError
from dhwt.models import ModelConfig, Transformer, build_model
from dhwt.models.sdpa import member_dropout_attention
from dhwt.runs.checkpoints import latest_checkpoint
from dhwt.training.precision import autocast, check_precision

CONFIG = dict(seeds="1-2", steps=30, eval_every=10, snapshot_every=10, checkpoint_every=10,
              tie_schedule="untie@15", dropout=0.1, lr=1e-2, batch_size=8, d_model=16, d_ff=32,
              n_heads=2)
BF16 = torch.bfloat16
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def task(make_task):
    return make_task()


def _loss(model, inputs, targets, precision):
    weights = torch.full(targets.shape, 1.0 / targets[0].numel())
    with autocast(precision, CPU):
        return model(inputs, targets=targets, weights=weights)


@pytest.mark.parametrize("vocab", [7, 200])  # feature-major logits, and the fused token-major loss
def test_bf16_mixed_rounds_the_products_and_keeps_the_loss_float32(vocab):
    config = ModelConfig(vocab_size=vocab, max_len=8, d_model=32, d_ff=64, n_heads=4, causal=True)
    model = Transformer(config, [1, 2], tied=False)
    inputs = torch.randint(0, vocab, (2, 4, 8), generator=torch.Generator().manual_seed(0))
    targets = inputs.roll(-1, dims=2)
    exact, mixed = _loss(model, inputs, targets, "fp32"), _loss(model, inputs, targets,
                                                                "bf16-mixed")
    assert exact.dtype == mixed.dtype == torch.float32
    gap = ((mixed - exact).abs() / exact).max().item()
    assert 0 < gap < 0.02, gap  # rounded (bfloat16's unit roundoff is 2^-8), but only that
    mixed.sum().backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None)
    with torch.autocast("cpu", dtype=BF16):
        assert model(inputs).dtype == BF16  # the logits are a bfloat16 product


def test_the_fused_loss_under_bf16_equals_cross_entropy_of_the_same_logits():
    """The in-place loss path (V >= 64) against F.cross_entropy of the model's bfloat16 logits
    read in float32: the same loss, and gradients equal to bfloat16 rounding."""
    config = ModelConfig(vocab_size=300, max_len=8, d_model=32, d_ff=64, n_heads=4, causal=True)
    inputs = torch.randint(0, 300, (1, 4, 8), generator=torch.Generator().manual_seed(1))
    targets = inputs.roll(-1, dims=2)
    grads = []
    for fused in (True, False):
        model = Transformer(config, [3], tied=False)
        with torch.autocast("cpu", dtype=BF16):
            if fused:
                loss = _loss(model, inputs, targets, "bf16-mixed")
            else:
                logits = model(inputs).float()
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 300),
                                                         targets.reshape(-1)).view(1)
        loss.sum().backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (fused_loss, fused_grads), (plain_loss, plain_grads) = grads
    assert torch.allclose(fused_loss, plain_loss, rtol=1e-5)
    for a, b in zip(fused_grads, plain_grads):
        assert torch.allclose(a, b, rtol=0.05, atol=0.02 * b.abs().max().item())


def _outcome(run_dir):
    _, state = latest_checkpoint(run_dir / "checkpoints")
    return state, (run_dir / "metrics.jsonl").read_text()


def test_bf16_mixed_trains_records_and_resumes_bit_for_bit(task, tmp_path, interrupt_at,
                                                          assert_same):
    config = TrainConfig(**CONFIG, precision="bf16-mixed")
    whole = train_run(config, task, tmp_path / "whole").run_dir
    assert 'precision = "bf16-mixed"' in (whole / "config.toml").read_text()
    fp32 = _outcome(train_run(TrainConfig(**CONFIG), task, tmp_path / "fp32").run_dir)
    interrupt_at(25)
    with pytest.raises(KeyboardInterrupt):
        train_run(config, task, tmp_path / "cut")
    train_run(config, task, tmp_path / "cut", resume=True)
    state, metrics = _outcome(tmp_path / "cut")
    assert metrics == _outcome(whole)[1]
    assert_same(state, _outcome(whole)[0])
    assert metrics != fp32[1]  # the precision changes the numbers
    last = [json.loads(line) for line in metrics.splitlines()][-1]
    assert last["step"] == 30 and last["loss"] == last["loss"]  # finite
    with pytest.raises(DhwtError, match="cannot resume .* with precision = 'fp32': the run was "
                                        "configured with 'bf16-mixed'"):
        train_run(TrainConfig(**CONFIG), task, tmp_path / "cut", resume=True)


@pytest.mark.parametrize("values, message", [
    (dict(precision="fp16"), "precision must be one of fp32, bf16-mixed, got 'fp16'"),
    (dict(tf32=True), "tf32 = true needs a CUDA device (TF32 is a GPU's float32 mode); device "
                      "is cpu"),
    (dict(tf32="yes", device="cuda"), "tf32 must be"),
    (dict(compile=1), "compile must be"),
])
def test_bad_precision_settings_are_one_line_errors(values, message):
    with pytest.raises(DhwtError) as info:
        TrainConfig(grammar="parity", **values)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_tf32_where_auto_resolves_to_the_cpu_is_refused():
    with pytest.raises(DhwtError, match=r"^tf32 = true needs a CUDA device .* on cpu$"):
        check_precision("fp32", True, CPU)
    check_precision("bf16-mixed", False, CPU)  # the CPU computes bfloat16 (fast with AMX/AVX512)


def test_train_flag_refuses_an_unknown_precision_in_one_line(cli, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('grammar = "parity"\nsteps = 2\nprecision = "fp8"\n')
    code, out, err = cli(["train", "--config", config, "--out", tmp_path / "run"])
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert "precision must be one of fp32, bf16-mixed" in err
    code, out, err = cli(["train", "--grammar", "parity", "--precision", "fp8", "--out",
                          tmp_path / "run"])
    assert code == 2 and "'fp8' is not one of 'fp32', 'bf16-mixed'" in err, err
    assert not (tmp_path / "run").exists()


# -- member dropout through SDPA ------------------------------------------------------------------
def _qkv(rows, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(rows, 2, 6, 4, generator=g) for _ in range(3)]


def test_member_dropout_attention_draws_from_the_members_generators_only():
    q, k, v = _qkv(6)
    generators = [torch.Generator().manual_seed(s) for s in (5, 6, 7)]
    before = torch.get_rng_state()
    out = member_dropout_attention(q, k, v, None, True, 0.3, generators)
    assert torch.equal(torch.get_rng_state(), before)  # the default generator is as it was
    for s, seed in enumerate((5, 6, 7)):
        rows = slice(2 * s, 2 * s + 2)
        own = torch.Generator().manual_seed(seed)
        alone = member_dropout_attention(q[rows], k[rows], v[rows], None, True, 0.3, [own])
        assert torch.equal(out[rows], alone)
        assert torch.equal(own.get_state(), generators[s].get_state())  # advanced as by a draw
    again = member_dropout_attention(q, k, v, None, True, 0.3,
                                     [torch.Generator().manual_seed(s) for s in (5, 6, 7)])
    assert torch.equal(again, out)
    following = member_dropout_attention(q, k, v, None, True, 0.3, generators)
    assert not torch.equal(following, out)  # the generators moved on


def test_member_dropout_attention_is_the_hand_dropout_in_distribution():
    """For fixed q, k, v: over many draws, both paths average to the attention without dropout
    and have the same spread (each weight kept with probability 1 - p, scaled by 1 / (1 - p))."""
    q, k, v = _qkv(1, seed=3)
    allowed = torch.ones(6, 6, dtype=torch.bool).tril()
    clean = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    p, draws = 0.4, 2000
    generator = torch.Generator().manual_seed(11)
    sdpa = torch.stack([member_dropout_attention(q, k, v, None, True, p, [generator])
                        for _ in range(draws)])
    weights = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~allowed, float("-inf")).softmax(-1)
    keep = torch.empty(draws, *weights.shape).bernoulli_(1 - p, generator=generator)
    hand = (weights * keep / (1 - p)) @ v
    for samples in (sdpa, hand):
        error = (samples.mean(0) - clean).abs() / (samples.std(0) / draws**0.5 + 1e-6)
        assert error.max() < 5  # the mean is the clean attention (5 standard errors)
    ratio = sdpa.var(0)[..., 1:, :] / hand.var(0)[..., 1:, :]  # row 0 attends to itself only
    assert 0.8 < ratio.median() < 1.25 and ratio.min() > 0.6 and ratio.max() < 1.6


@pytest.mark.parametrize("vocab", [7, 200])  # both loss paths (dhwt.models.output)
@pytest.mark.parametrize("architecture, causal", [("lstm", True), ("lstm", False),
                                                  ("mixer", False), ("transformer", False)])
def test_every_architecture_runs_under_bf16_mixed(architecture, causal, vocab):
    config = ModelConfig(vocab_size=vocab, max_len=8, architecture=architecture, causal=causal)
    model = build_model(config, [1, 2], tied=True)
    inputs = torch.randint(0, vocab - 1, (2, 3, 8), generator=torch.Generator().manual_seed(2))
    exact, mixed = (_loss(model, inputs, inputs, p) for p in ("fp32", "bf16-mixed"))
    assert mixed.dtype == torch.float32
    assert ((mixed - exact).abs() / exact).max() < 0.02
    mixed.sum().backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="torch.compile on the CPU needs a C++ compiler")
def test_compiled_run_on_the_cpu_agrees_with_the_plain_one(task, tmp_path):
    """compile = true (torch.compile; about a minute of compiling) trains the same model: the
    metrics agree to float rounding across an untie (a recompile) and a resume may drop it."""
    values = {**CONFIG, "steps": 20, "tie_schedule": "untie@10", "dropout": 0.0}
    plain = _outcome(train_run(TrainConfig(**values), task, tmp_path / "plain").run_dir)[1]
    compiled = train_run(TrainConfig(**values, compile=True), task, tmp_path / "compiled").run_dir
    lines = [(json.loads(a), json.loads(b)) for a, b in zip(
        plain.splitlines(), _outcome(compiled)[1].splitlines(), strict=True)]
    for a, b in lines:
        assert (a["step"], a["split"]) == (b["step"], b["split"])
        assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]), (a, b)
    train_run(TrainConfig(**{**values, "steps": 30}), task, compiled, resume=True)  # not compiled
    assert json.loads(_outcome(compiled)[1].splitlines()[-1])["step"] == 30
