"""Training throughput of dhwt's causal transformer vs HF transformers' GPT-2 (issue 5; target
dhwt >= 1.1x), with MFU against a matmul peak measured in the same run.

One training step = forward, loss (the mean cross-entropy over every position), backward, AdamW
update, on a fixed random batch (the data pipeline is not timed). dhwt: `Transformer` with one
member (S = 1), untied head, pre-LN, final LayerNorm, sinusoidal positions (a buffer), dropout
where GPT-2 has it (`ff_dropout=False`: embeddings, attention weights, the two residual
branches; not after the feed-forward activation), and its training loss path
`model(inputs, targets=, weights=)` with weights 1 / T (dhwt.models.output: token-major logits,
log-softmax and gradient in place). HF: `GPT2LMHeadModel` with the same widths, depth, heads,
vocabulary, context, activation, dropout rate and places, untied head, SDPA attention; its
positions are a learned table (what GPT-2 has), its loss `F.cross_entropy` of its logits (what
`labels=` computes, without the shift). Shapes:
  cpu    experiments/wikitext/cpu.toml: d 128, 2 layers, 4 heads, d_ff 512, relu, context 128,
         batch 16, vocabulary 8192, dropout 0.1
  small  GPT-2-small-like: d 768, 12 layers, 12 heads, d_ff 3072, gelu, context 128, batch 4,
         vocabulary 50257, dropout 0.1 (about 10 s per step here)
  blog   experiments/wikitext/gpu.toml, the blog's setting: d 512, 6 layers, 8 heads, d_ff 2048,
         relu, context 512, batch 12, vocabulary 50257 (give --dropout 0.2 for its dropout)
`--dropout 0` also times both without dropout (dhwt draws its masks from per-member generators,
never the global RNG; with dropout both compute the attention softmax by hand, since SDPA's CPU
kernels take no dropout and the math fallback is what HF then runs; without, both use SDPA).

Rounds alternate dhwt and HF, in reverse order every other round (same load and the same place
in a round for both); the script prints medians, their ratio (and the ratio paired by round: the
median of HF's step over dhwt's within each round, which a machine whose speed drifts during the
run moves less, with a distribution-free 95% interval for that median, `median_interval`; give
--steps 1 and many rounds, e.g. 21, for a tight one; the target counts as shown where that
interval lies above it), the CPU, the load average before and after,
and MFU = model FLOPs per second / measured peak, with model FLOPs per token = 6 N + 6 n_layers
* context * d (N: parameters touched per token, i.e. all but the embedding tables, plus the
output matrix; the attention term counts the causal half of QK^T and AV, forward and
backward). Peak: median GFLOP/s of a 2048^3 float32 torch.mm.

    nice -n 10 .venv/bin/python experiments/benchmarks/bench_text_throughput.py \\
        [--shape cpu] [--shape small] [--shape blog] [--rounds 5] [--steps 5] [--threads 2] \\
        [--dropout 0.1] [--precision fp32] [--precision bf16-mixed] [--device cpu|cuda] \\
        [--compile] [--floor] [--packed] [--profile] [--memory kept|system|shipped]

`--memory`: `kept` (the default) runs both models with freed memory kept by the process, as
dhwt's CPU runs keep it (dhwt.training.allocator: a step's large tensors reuse mapped pages
instead of fresh, page-faulted ones); `system` both with the system malloc's defaults;
`shipped` each as its trainer runs it: dhwt's steps kept, HF's with the system malloc (HF's
Trainer sets nothing), every runner's round after one untimed step in its setting.

`--profile` instead times single steps under torch.profiler (alternating, `--rounds` of them)
and prints where each step's time goes: matmuls of the layers and of the output layer, the
loss's elementwise ops (log-softmax, exp, gather/scatter, nll, the zero-filled (T, V) gradient),
dropout masks, the AdamW step, the rest (medians, ms per step; the profiler's own overhead goes
into "rest"); with `--packed` dhwt's packed masks as a third column; not with --compile or --floor.

`--precision bf16-mixed` runs both models' forward passes under torch.autocast with bfloat16
(dhwt: its `precision` setting, dhwt.training.precision; HF: the same autocast around its forward
and the loss of its float32-cast logits), fp32 everything in float32; each precision given is
timed. `--device cuda` times on the GPU (steps end with a read of the loss, so each timed step is
complete), with the peak a 8192^3 product in the step's precision (bfloat16 for bf16-mixed, TF32
off for fp32).

`--compile` also times both models through torch.compile (dhwt's as the trainer's `compile =
true` does it: the model, its loss path included; HF's model), alternating with the eager ones
in the same rounds, and prints a second line: the compiled rates, each model's compile time (its
two warm-up steps less two timed steps; outside the tokens/s), and the ratios compiled/compiled,
dhwt compiled / HF eager and compiled/eager per model. On the CPU it needs a C++ compiler.

`--packed` also times dhwt with `dropout_masks = "packed"` (dhwt.models.dropout: two mask
elements per 32-bit draw; the default, "bernoulli", draws one per element with torch's serial
CPU kernel) and prints its ratios over HF and over dhwt's default masks.

`--floor` also times the Skeleton: the same matmuls (HF's layout), embedding lookup and fused
AdamW with nothing else, and prints its tokens/s over HF's: the most that any change to the
other ops (LayerNorm, activation, softmax, dropout, loss) could make of the ratio.

Needs the bench extra (`pip install -e '.[bench]'`) for transformers, imported lazily.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from dhwt.analysis.intervals import median_interval
from dhwt.models import ModelConfig, Transformer
from dhwt.training.allocator import glibc, retained_memory
from dhwt.training.precision import autocast

sys.path.insert(0, str(Path(__file__).parent))
from bench_knn import cpu_flags, cpu_model  # noqa: E402


@dataclass(frozen=True)
class Shape:
    d: int
    layers: int
    heads: int
    d_ff: int
    activation: str
    context: int
    batch: int
    vocab: int


#: dhwt's training step at least this many times HF's rate (issue 35).
TARGET = 1.1
SHAPES = {
    "cpu": Shape(128, 2, 4, 512, "relu", 128, 16, 8192),
    "small": Shape(768, 12, 12, 3072, "gelu", 128, 4, 50257),
    "blog": Shape(512, 6, 8, 2048, "relu", 512, 12, 50257),
}


def batch(shape: Shape, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, shape.vocab, (shape.batch, shape.context + 1), generator=g)
    return tokens[:, :-1].contiguous().to(device), tokens[:, 1:].contiguous().to(device)


def dhwt_step(shape: Shape, dropout: float, precision: str, device: torch.device,
              compiled: bool = False, masks: str = "bernoulli") -> tuple[Callable[[], float], int]:
    config = ModelConfig(
        vocab_size=shape.vocab, max_len=shape.context, d_model=shape.d, n_layers=shape.layers,
        n_heads=shape.heads, d_ff=shape.d_ff, dropout=dropout, ff_dropout=False,
        dropout_masks=masks,
        activation=shape.activation, norm="pre", final_norm=True, positions="sinusoidal",
        causal=True, emb_init="xavier", emb_scale=True, init="xavier")
    model = Transformer(config, [1], tied=False).to(device)
    net = torch.compile(model) if compiled else model  # as the trainer's `compile = true`
    inputs, targets = (t[None] for t in batch(shape, device))
    weights = torch.full(targets.shape, 1.0 / targets.numel(), device=device)  # mean CE

    def loss() -> torch.Tensor:
        with autocast(precision, device):
            return net(inputs, targets=targets, weights=weights).sum()

    return _step(model, loss, model.parameters()), _dense_params(model)


def hf_step(shape: Shape, dropout: float, precision: str, device: torch.device,
            compiled: bool = False) -> tuple[Callable[[], float], int]:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=shape.vocab, n_positions=shape.context, n_embd=shape.d, n_layer=shape.layers,
        n_head=shape.heads, n_inner=shape.d_ff, activation_function=shape.activation,
        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout, tie_word_embeddings=False,
        bos_token_id=0, eos_token_id=0)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).to(device)
    model.train()
    net = torch.compile(model) if compiled else model
    inputs, targets = batch(shape, device)

    def loss() -> torch.Tensor:
        with autocast(precision, device):
            logits = net(input_ids=inputs).logits
        return F.cross_entropy(logits.float().reshape(-1, shape.vocab), targets.reshape(-1))

    return _step(model, loss, model.parameters()), _dense_params(model)


class Skeleton(torch.nn.Module):
    """The step's matmuls alone (HF's token-major layout): embedding lookup, per layer the
    in-projection, QK^T and AV of every head, the out-projection and the two feed-forward
    products with the residual adds, then the output layer; no LayerNorm, activation, softmax,
    dropout or loss (the logits' backward starts from a fixed gradient)."""

    def __init__(self, shape: Shape):
        super().__init__()
        s = shape
        self.shape = s
        draw = torch.Generator().manual_seed(0)

        def weight(*size: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.randn(*size, generator=draw) * 0.02)

        self.embedding, self.output = weight(s.vocab, s.d), weight(s.vocab, s.d)
        self.layers = torch.nn.ParameterList(
            weight(*size) for _ in range(s.layers) for size in (
                (3 * s.d, s.d), (3 * s.d,), (s.d, s.d), (s.d,), (s.d_ff, s.d), (s.d_ff,),
                (s.d, s.d_ff), (s.d,)))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        s = self.shape
        x = F.embedding(inputs.reshape(-1), self.embedding)  # (T, d)
        for i in range(s.layers):
            w_in, b_in, w_out, b_out, w_1, b_1, w_2, b_2 = self.layers[8 * i:8 * i + 8]
            q, k, v = F.linear(x, w_in, b_in).view(
                s.batch, s.context, 3, s.heads, s.d // s.heads).permute(2, 0, 3, 1, 4)
            heads = ((q @ k.transpose(-2, -1)) @ v).transpose(1, 2).reshape(-1, s.d)
            x = x + F.linear(heads, w_out, b_out)
            x = x + F.linear(F.linear(x, w_1, b_1), w_2, b_2)
        return F.linear(x, self.output)


def skeleton_step(shape: Shape, device: torch.device) -> tuple[Callable[[], float], int]:
    """A training step of the Skeleton, with the same fused AdamW: the floor of both models'
    steps (see --floor)."""
    model = Skeleton(shape).to(device)
    inputs = batch(shape, device)[0]
    grad = torch.randn(inputs.numel(), shape.vocab, device=device) / inputs.numel()

    def loss() -> torch.Tensor:
        return _Seeded.apply(model(inputs), grad)

    return _step(model, loss, model.parameters()), _dense_params(model)


class _Seeded(torch.autograd.Function):
    """A zero whose backward hands `grad` to the logits: their backward starts there without a
    pass over them."""

    @staticmethod
    def forward(ctx, logits, grad):  # type: ignore[override]
        ctx.grad = grad
        return logits.new_zeros(())

    @staticmethod
    def backward(ctx, _):  # type: ignore[override]
        return ctx.grad, None


def _step(model: torch.nn.Module, loss: Callable[[], torch.Tensor],
          params) -> Callable[[], float]:
    params = list(params)
    # Fused for both: what dhwt's trainer uses, and HF Trainer's default (adamw_torch_fused).
    optimizer = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                                  weight_decay=0.0, fused=True)
    model.train()

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        value = loss()
        value.backward()
        optimizer.step()
        return value.item()

    return step


def _dense_params(model: torch.nn.Module) -> int:
    """Parameters every token touches: all but the input embedding and position tables."""
    skip = ("embeddings.input_weight", "transformer.wte.weight", "transformer.wpe.weight",
            "positions", "embedding")
    total = 0
    for name, p in model.named_parameters():
        if name.endswith(skip):
            continue
        total += p.numel()
    return total


def flops_per_token(shape: Shape) -> float:
    """6 N + 6 L T d (see the module doc); N from the shape, the same for both models."""
    d, ff = shape.d, shape.d_ff
    per_layer = 4 * d * d + 2 * d * ff
    return 6 * (shape.layers * per_layer + shape.vocab * d) + 6 * shape.layers * shape.context * d


def matmul_peak(precision: str, device: torch.device, repeats: int = 5) -> float:
    """Median GFLOP/s of an n^3 matmul in the products' type of `precision` (n 2048 on the CPU,
    8192 on a GPU)."""
    n = 8192 if device.type == "cuda" else 2048
    dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float32
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    torch.mm(a, b)
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        torch.mm(a, b)
        _sync(device)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e9


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


#: --memory's choices, as the first line prints them.
MEMORY = {"kept": "freed memory kept for both (dhwt's CPU runs' setting)",
          "system": "system malloc for both",
          "shipped": "dhwt with freed memory kept, HF with the system malloc"}


def measure(shape_name: str, dropout: float, rounds: int, steps: int, precision: str,
            device: torch.device, compiled: bool = False, floor: bool = False,
            packed: bool = False, shipped: bool = False) -> dict[str, float]:
    """Tokens/s, MFU and parameters of each runner (dhwt, hf; with `compiled` also "dhwt
    compiled" and "hf compiled"), keyed "<runner>_<what>", and the measured peak. A compiled
    runner's compile time (its two warm-up steps less two timed steps) is "<runner>_compile_s",
    outside its tokens/s. With `floor` also "skeleton" (Skeleton, in float32); with `packed`
    also "dhwt packed" (dropout_masks = "packed"). With `shipped` dhwt's rounds run with freed
    memory kept, the others' with the system malloc, each after one untimed step in its setting
    (the kept heap then holds a step's blocks, as from a run's second step on)."""
    shape = SHAPES[shape_name]
    tokens = shape.batch * shape.context
    runners = {"dhwt": dhwt_step(shape, dropout, precision, device),
               "hf": hf_step(shape, dropout, precision, device)}
    if compiled:
        runners["dhwt compiled"] = dhwt_step(shape, dropout, precision, device, compiled=True)
        runners["hf compiled"] = hf_step(shape, dropout, precision, device, compiled=True)
    if floor:
        runners["skeleton"] = skeleton_step(shape, device)
    if packed:
        runners["dhwt packed"] = dhwt_step(shape, dropout, precision, device, masks="packed")
    warm_up = {}
    for name, (run, _) in runners.items():  # allocator, threads, first AdamW state, compiling
        start = time.perf_counter()
        run()
        run()
        warm_up[name] = time.perf_counter() - start
    times: dict[str, list[float]] = {name: [] for name in runners}
    peaks = []
    order = list(runners.items())
    for round_ in range(rounds):
        peaks.append(matmul_peak(precision, device, 3))
        for name, (run, _) in order if round_ % 2 == 0 else order[::-1]:
            with retained_memory(shipped and name.startswith("dhwt")):
                if shipped:  # the same untimed step for every runner: caches alike
                    run()
                start = time.perf_counter()
                for _ in range(steps):
                    run()
                times[name].append((time.perf_counter() - start) / steps)
    peak = statistics.median(peaks)
    result = {"peak_gflops": peak}
    for name, values in times.items():
        step = statistics.median(values)
        result[f"{name}_tokens_s"] = tokens / step
        result[f"{name}_mfu"] = tokens / step * flops_per_token(shape) / (peak * 1e9)
        result[f"{name}_params"] = runners[name][1]
        result[f"{name}_compile_s"] = warm_up[name] - 2 * step
    result["ratio"] = result["dhwt_tokens_s"] / result["hf_tokens_s"]
    for name in ("dhwt", "dhwt packed"):
        if name in times:  # HF's step over dhwt's within each round: immune to slow drift
            per_round = [h / d for h, d in zip(times["hf"], times[name])]
            result[f"{name}_paired"] = (statistics.median(per_round),
                                        *median_interval(per_round), len(per_round))
    return result


def _paired(r: dict, name: str) -> str:
    """The ratio of `name` over HF paired by round and the target, as printed: the target counts
    as shown where the 95% interval of the paired median lies above it."""
    median, low, high, rounds = r[f"{name}_paired"]
    if rounds < 6:  # median_interval gives the range
        return (f"paired by round {median:.3f}, range {low:.3f}-{high:.3f}; target >= {TARGET} "
                "(too few rounds to show it)")
    return (f"paired by round {median:.3f}, 95% interval of the median {low:.3f}-{high:.3f}; "
            f"target >= {TARGET} {'shown' if low >= TARGET else 'not shown'}")


PARTS = {
    "loss elementwise": ("aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::exp",
                         "aten::scatter_add_", "aten::gather", "aten::nll_loss_forward",
                         "aten::nll_loss_backward", "aten::nll_loss_nd"),
    "dropout masks": ("aten::bernoulli_", "aten::random_"),
}
MATMULS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")


def profile_steps(shape_name: str, dropout: float, rounds: int,
                  packed: bool = False) -> dict[str, dict[str, float]]:
    """Median ms per step of each part (see the module doc), per model (with `packed` also
    dhwt with dropout_masks = "packed")."""
    from torch.profiler import ProfilerActivity, profile

    shape = SHAPES[shape_name]
    cpu = torch.device("cpu")
    runners = {"dhwt": dhwt_step(shape, dropout, "fp32", cpu)[0],
               "hf": hf_step(shape, dropout, "fp32", cpu)[0]}
    if packed:
        runners["dhwt packed"] = dhwt_step(shape, dropout, "fp32", cpu, masks="packed")[0]
    for run in runners.values():
        run()
    parts: dict[str, dict[str, list[float]]] = {}
    for _ in range(rounds):
        for name, run in runners.items():
            start = time.perf_counter()
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                run()
            times = {"step": (time.perf_counter() - start) * 1e3}
            for event in prof.key_averages(group_by_input_shape=True):
                ms = event.self_cpu_time_total / 1e3
                if event.key in MATMULS:
                    part = ("matmul, output layer" if str(shape.vocab) in str(event.input_shapes)
                            else "matmul, layers")
                    times[part] = times.get(part, 0.0) + ms
                for part, keys in PARTS.items():
                    if event.key in keys or (part == "loss elementwise" and _zero_grad_of_logits(
                            event, shape.vocab)):
                        times[part] = times.get(part, 0.0) + ms
                if event.key.startswith("Optimizer.step"):
                    times["AdamW step"] = event.cpu_time_total / 1e3
            times["rest"] = 2 * times["step"] - sum(times.values())
            for part, ms in times.items():
                parts.setdefault(part, {}).setdefault(name, []).append(ms)
    return {part: {name: statistics.median(v) for name, v in by.items()}
            for part, by in parts.items()}


def _zero_grad_of_logits(event, vocab: int) -> bool:
    """F.cross_entropy's backward zero-fills a (T, V) gradient (not the (V, d) tables)."""
    shapes = event.input_shapes
    return event.key == "aten::fill_" and bool(shapes and shapes[0]) and shapes[0][-1] == vocab


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5, help="steps timed per round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dropout", type=float, action="append")
    parser.add_argument("--precision", action="append", choices=["fp32", "bf16-mixed"])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--floor", action="store_true",
                        help="also time a step of the matmuls and AdamW alone (Skeleton)")
    parser.add_argument("--compile", action="store_true",
                        help="also time both models through torch.compile (compile time apart)")
    parser.add_argument("--packed", action="store_true",
                        help="also time dhwt with dropout_masks = \"packed\" (its faster masks)")
    parser.add_argument("--memory", choices=MEMORY, default="kept",
                        help="kept: both models with freed memory kept, as dhwt's CPU runs keep "
                             "it (dhwt.training.allocator); system: both with the system "
                             "malloc; shipped: dhwt kept, HF with the system malloc")
    parser.add_argument("--profile", action="store_true",
                        help="where the time of a step goes, instead of the throughput (CPU, "
                             "fp32)")
    args = parser.parse_args()
    if args.profile and (args.compile or args.floor or args.memory == "shipped"):
        parser.error("--profile times the eager models under one allocator: give it without "
                     "--compile, --floor and --memory shipped")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    where = (torch.cuda.get_device_name(device) if device.type == "cuda"
             else f"CPU {cpu_model()} (flags: {cpu_flags()}), {args.threads} threads")
    if glibc() is None:  # nothing to keep memory with: the system malloc's defaults for both
        args.memory = "system"
    with retained_memory(args.memory == "kept"):
        print(f"torch {torch.__version__}, {where}, {MEMORY[args.memory]}, load {_load()}")
        run_all(args, device)


def run_all(args: argparse.Namespace, device: torch.device) -> None:
    """Every shape, dropout and precision asked for: a profile or a throughput line each."""
    for shape_name in args.shape or ["cpu"]:
        for dropout in args.dropout or [0.1]:
            if args.profile:
                print(f"{shape_name}, dropout {dropout}: ms per step, medians of {args.rounds} "
                      f"profiled steps")
                for part, by in profile_steps(shape_name, dropout, args.rounds,
                                              args.packed).items():
                    packed = f"   dhwt packed {by['dhwt packed']:8.1f}" if args.packed else ""
                    print(f"  {part:22s} dhwt {by['dhwt']:8.1f}   HF {by['hf']:8.1f}{packed}")
                print(f"load {_load()}", flush=True)
                continue
            for precision in args.precision or ["fp32"]:
                report(shape_name, dropout, precision, device, args)


def report(shape_name: str, dropout: float, precision: str, device: torch.device,
           args: argparse.Namespace) -> None:
    """Measure one shape, dropout and precision, and print its line (and with --compile a
    second one, of the compiled models)."""
    r = measure(shape_name, dropout, args.rounds, args.steps, precision, device, args.compile,
                args.floor, args.packed, args.memory == "shipped")
    s = SHAPES[shape_name]
    print(f"{shape_name} (d {s.d}, {s.layers} layers, batch {s.batch} x {s.context}, "
          f"V {s.vocab}), dropout {dropout}, {precision}: dhwt {r['dhwt_tokens_s']:.0f} tok/s "
          f"(MFU {r['dhwt_mfu']:.1%}), HF GPT-2 {r['hf_tokens_s']:.0f} tok/s (MFU "
          f"{r['hf_mfu']:.1%}), ratio {r['ratio']:.3f} ({_paired(r, 'dhwt')}); "
          f"matmul peak {r['peak_gflops']:.0f} GFLOP/s; dense params dhwt {r['dhwt_params']:,} "
          f"HF {r['hf_params']:,}; load {_load()}", flush=True)
    if args.floor:
        print(f"  floor: the matmuls, embedding lookup and AdamW alone "
              f"{r['skeleton_tokens_s']:.0f} tok/s; floor / HF GPT-2 "
              f"{r['skeleton_tokens_s'] / r['hf_tokens_s']:.3f} (the largest ratio a change "
              f"outside them can give)", flush=True)
    if args.packed:
        packed = r["dhwt packed_tokens_s"]
        print(f"  dropout_masks = \"packed\": dhwt {packed:.0f} tok/s (MFU "
              f"{r['dhwt packed_mfu']:.1%}); ratio over HF GPT-2 {packed / r['hf_tokens_s']:.3f} "
              f"({_paired(r, 'dhwt packed')}), over dhwt's bernoulli masks "
              f"{packed / r['dhwt_tokens_s']:.3f}", flush=True)
    if args.compile:
        dhwt, hf = r["dhwt compiled_tokens_s"], r["hf compiled_tokens_s"]
        print(f"  torch.compile: dhwt {dhwt:.0f} tok/s (MFU {r['dhwt compiled_mfu']:.1%}, "
              f"compiling {r['dhwt compiled_compile_s']:.0f} s), HF GPT-2 {hf:.0f} tok/s (MFU "
              f"{r['hf compiled_mfu']:.1%}, compiling {r['hf compiled_compile_s']:.0f} s); "
              f"ratio compiled/compiled {dhwt / hf:.3f}, dhwt compiled / HF eager "
              f"{dhwt / r['hf_tokens_s']:.3f}; compiled/eager dhwt "
              f"{dhwt / r['dhwt_tokens_s']:.3f}, HF {hf / r['hf_tokens_s']:.3f}", flush=True)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
