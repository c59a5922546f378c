"""Gram blocks G = A B^T of the candidate pass and their precision: float32 products by oneDNN
where a probe shows it keeps float32 (else numpy), or bfloat16 values into float32 sums where
oneDNN computes them exactly and fast (AMX), with every score widened to an upper bound of the
exact one (widened). candidate_precision() chooses per process."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from dhwt.checks import largest_magnitude
from dhwt.errors import DhwtError

#: Default rows per block: a 6144 x 6144 float32 block is 144 MiB (5-7% faster than 4096 here).
BLOCK = 6144
#: Precisions of the candidate pass; candidate_precision() chooses one per process.
PRECISIONS = ("float32", "bfloat16")
#: Unit roundoff of float32.
U32 = 2.0**-24


def gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """out = a @ b.T in float32, by oneDNN's AVX-512 kernel where it is checked to compute in
    float32, else by numpy.

    Why: numpy's and faiss's OpenBLAS run their AVX2 (Haswell) kernel on AMD AVX-512 CPUs and
    torch's MKL its AVX2 path, while oneDNN picks kernels by instruction set: about 2x faster
    here. torch sends a float32 matmul to oneDNN only when its mkldnn matmul precision is
    "bf16", which *allows* oneDNN to round the inputs to bfloat16 (e.g. on CPUs with AMX), and
    that would void the float32 rounding bound of the certificate. So every block shape is
    first run on a probe that bfloat16 cannot hold, and kept only if it comes out at float32
    accuracy."""
    shape = (a.shape[0], b.shape[0], a.shape[1])
    if shape not in _ONEDNN_FLOAT32:
        _ONEDNN_FLOAT32[shape] = _onednn_is_float32(shape, out)
    if _ONEDNN_FLOAT32[shape]:
        with _onednn_matmul():
            torch.mm(a, b.T, out=out)
    else:
        np.matmul(a.numpy(), b.numpy().T, out=out.numpy())


#: Block shape (rows, columns, width) -> whether oneDNN's matmul computed it in float32.
_ONEDNN_FLOAT32: dict[tuple[int, int, int], bool] = {}


@contextmanager
def _onednn_matmul() -> Iterator[None]:
    """torch's float32 matmuls go to oneDNN inside (the setting is process-wide)."""
    saved = torch.backends.mkldnn.matmul.fp32_precision
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    try:
        yield
    finally:
        torch.backends.mkldnn.matmul.fp32_precision = saved


def _onednn_is_float32(shape: tuple[int, int, int], out: torch.Tensor) -> bool:
    """Whether oneDNN's matmul of this shape keeps float32 inputs: every entry 1 + 2^-10 (which
    bfloat16 rounds to 1) must give d (1 + 2^-10)^2 within the float32 bound (out is scratch)."""
    if not (torch.backends.mkldnn.is_available()
            and hasattr(torch.backends.mkldnn, "matmul")):
        return False
    rows, cols, d = shape
    value = 1 + 2.0**-10
    with _onednn_matmul():
        torch.mm(torch.full((rows, d), value), torch.full((cols, d), value).T, out=out)
    exact = d * value * value
    tolerance = 2 * (d + 6) * U32 * exact
    return exact - tolerance <= out.amin().item() and out.amax().item() <= exact + tolerance


#: Unit roundoff of bfloat16 (8 significant bits, round to nearest).
_U16 = 2.0**-8
#: The precision chosen by candidate_precision() in this process (None: not yet).
_PRECISION: str | None = None
#: Whether oneDNN multiplies bfloat16 values exactly into float32 sums here (None: not probed).
_ONEDNN_BFLOAT16: bool | None = None


def candidate_precision() -> str:
    """The precision of the candidate pass in this process, chosen at its first use by probes,
    not by the CPU's vendor: "bfloat16" where oneDNN's bfloat16 matmul computes bfloat16 values
    into exact float32 sums (a precision probe) and a block of Gram entries at least twice as
    fast as the float32 path (a speed probe of about a tenth of a second), else "float32".
    Either way the neighbours are exact (the float64 re-rank and its certificate); bfloat16 only
    trades a faster Gram for more candidates. DHWT_KNN_PRECISION=float32|bfloat16 forces one."""
    global _PRECISION
    if _PRECISION is None:
        forced = os.environ.get("DHWT_KNN_PRECISION")
        if forced is not None and forced not in PRECISIONS:
            raise DhwtError(f"DHWT_KNN_PRECISION must be one of {', '.join(PRECISIONS)}, got "
                            f"{forced!r}")
        _PRECISION = forced or ("bfloat16" if _onednn_bfloat16() and _bfloat16_speedup() >= 2
                                else "float32")
    return _PRECISION


def _onednn_bfloat16() -> bool:
    """Whether oneDNN's matmul with bfloat16 allowed multiplies bfloat16 values (as float32
    tensors) exactly and sums in float32: on random bfloat16 values every entry must lie within
    the float32 summation bound of the float64 product (cached)."""
    global _ONEDNN_BFLOAT16
    if _ONEDNN_BFLOAT16 is None:
        _ONEDNN_BFLOAT16 = False
        if torch.backends.mkldnn.is_available() and hasattr(torch.backends.mkldnn, "matmul"):
            generator = torch.Generator().manual_seed(0)
            a, b = (torch.randn(256, 512, generator=generator).bfloat16().float()
                    for _ in range(2))
            out = torch.empty(256, 256)
            with _onednn_matmul():
                torch.mm(a, b.T, out=out)
            exact = a.double() @ b.double().T
            bound = 2 * 514 * U32 * (a.double().abs() @ b.double().abs().T)
            _ONEDNN_BFLOAT16 = bool(((out.double() - exact).abs() <= bound).all())
    return _ONEDNN_BFLOAT16


def _bfloat16_speedup(size: int = 2048, width: int = 512) -> float:
    """How many times faster a size x size x width Gram block is with bfloat16 allowed in
    oneDNN than on the float32 path (gemm); the best of three runs each."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, width, generator=generator).bfloat16().float()
    out = torch.empty(size, size)
    seconds = []
    for multiply in (gemm, gemm_bfloat16):
        multiply(a, a, out)  # warm up (and the float32 path's own probe)
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            multiply(a, a, out)
            runs.append(time.perf_counter() - start)
        seconds.append(min(runs))
    return seconds[0] / seconds[1]


def gemm_bfloat16(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """out = a @ b.T for float32 a, b holding bfloat16 values: by oneDNN with bfloat16 allowed
    where its probe passed (on AMX, several times the float32 speed), else by gemm. Either way
    the products are exact and the sums float32, the error model of widened."""
    if _onednn_bfloat16():
        with _onednn_matmul():
            torch.mm(a, b.T, out=out)
    else:
        gemm(a, b, out)


def widened(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(left', right', scale): float32 matrices of bfloat16 values whose product, summed in
    float32 from exact products (gemm_bfloat16), is for every (i, j) at least scale times the
    exact left_i . right_j, and at most about 2c |left_i| |right_j| above it (c ~ 2^-7).

    How: left and right are scaled by powers of two to entries of at most 1 (exact), rounded to
    bfloat16 (relative error u = 2^-8 each), and given two more columns, [c |l_i|, delta] and
    [|r_j|, 1], rounded up, that add at least c |l_i| |r_j| + delta. c = 2u + u^2 + 2 gamma
    (gamma: float32 summation over d + 2 terms) covers the rounding of the inputs
    ((2u + u^2) |l_i| |r_j|) and of the sums; delta covers values flushed to zero below 2^-126
    (at most 2^-126 per entry and product). When left is right (inner product, cosine) both
    sides get [sqrt(c) |x_i|, sqrt(delta)] instead and stay one matrix, so the Gram stays
    symmetric and is stored once."""
    d = left.shape[1]
    symmetric = left is right
    scales = [2.0 ** -math.ceil(math.log2(max(largest_magnitude(side), 2.0**-100)))
              for side in ((left,) if symmetric else (left, right))]
    gamma = (d + 2) * U32 / (1 - (d + 2) * U32)
    c = 2 * _U16 + _U16**2 + 2 * gamma
    delta = 4.0 ** math.ceil(math.log(8 * (d + 2) * 2.0**-126, 4))  # an even power of two
    sides = (((left, scales[0], math.sqrt(c), math.sqrt(delta)),) if symmetric else
             ((left, scales[0], c, delta), (right, scales[1], 1.0, 1.0)))
    widened = []
    for side, scale, factor, last in sides:
        out = np.empty((len(side), d + 2), np.float32)
        np.multiply(side, np.float32(scale), out=out[:, :d])
        norms = np.sqrt(np.einsum("ij,ij->i", out[:, :d], out[:, :d], dtype=np.float64))
        out[:, d] = _bfloat16_up(factor * norms)
        out[:, d + 1] = last  # a power of two: exact
        rounded = torch.from_numpy(out[:, :d]).bfloat16()  # to nearest
        out[:, :d] = rounded.float().numpy()
        widened.append(out)
    return widened[0], widened[-1], scales[0] * scales[-1]


def _bfloat16_up(values: np.ndarray) -> np.ndarray:
    """Non-negative float64 values rounded up to bfloat16 values (as float32)."""
    as32 = values.astype(np.float32)
    as32 = np.where(as32 < values, np.nextafter(as32, np.float32(np.inf)), as32)
    bits = as32.view(np.uint32)
    up = (bits & 0xFFFF) != 0
    bits = np.where(up, (bits & 0xFFFF0000) + 0x10000, bits).astype(np.uint32)
    return bits.view(np.float32)
