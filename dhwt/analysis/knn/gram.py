"""Gram blocks G = A B^T of the candidate pass and their precision: float32 products by oneDNN
where a probe shows it keeps float32 (else numpy); bfloat16 values into float32 sums where
oneDNN computes them exactly and fast (AMX); or bfloat16 values into float32 sums rounded to
bfloat16 on output (half the bytes written: faster where the float32 output limits the rate),
with every score widened to an upper bound of the exact one in both bfloat16 passes (widened).
candidate_precision() chooses per process (fresh_probes() has it choose again)."""

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
KNN_PRECISIONS = ("float32", "bfloat16", "bfloat16-output")
#: Unit roundoff of float32.
U32 = 2.0**-24


def row_squares(x: np.ndarray) -> np.ndarray:
    """The squared norm of each row of x in float64 (einsum's float64 products and sums, no
    float64 copy of x; 4x torch's float64 vector_norm of float32 rows here).

    Examples:
        >>> import numpy as np
        >>> row_squares(np.array([[3.0, 4.0], [1.0, 0.0]], np.float32))
        array([25.,  1.])
    """
    return np.einsum("ij,ij->i", x, x, dtype=np.float64)


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
    not by the CPU's vendor. Of the bfloat16 passes whose precision probe passes ("bfloat16":
    oneDNN's matmul computes bfloat16 values into exact float32 sums; "bfloat16-output": torch's
    bfloat16 matmul sums in float32 and rounds each sum once to bfloat16), the faster on a block
    of Gram entries (a speed probe of about a tenth of a second each) if it is at least twice as
    fast as the float32 path, else "float32". Either way the neighbours are exact (the float64
    re-rank and its certificate); bfloat16 only trades a faster Gram for more candidates.
    DHWT_KNN_PRECISION=float32|bfloat16|bfloat16-output forces one (a forced bfloat16 pass whose
    probe fails runs its products through gemm: same bound, float32 speed)."""
    global _PRECISION
    if _PRECISION is None:
        forced = os.environ.get("DHWT_KNN_PRECISION")
        if forced is not None and forced not in KNN_PRECISIONS:
            raise DhwtError(f"DHWT_KNN_PRECISION must be one of {', '.join(KNN_PRECISIONS)}, got "
                            f"{forced!r}")
        _PRECISION = forced or _fastest()
    return _PRECISION


def _fastest() -> str:
    """The fastest candidate pass here by the rule of candidate_precision (the speed probe's
    result kept in _SPEEDUPS; the probe runs only where a bfloat16 pass is exact)."""
    global _SPEEDUPS
    passes = exact_passes()
    if not passes:
        return "float32"
    _SPEEDUPS = _speedups()
    return fastest(passes, _SPEEDUPS)


def fastest(passes: list[str], speedups: dict[str, float]) -> str:
    """The rule of candidate_precision: of `passes` (the bfloat16 passes exact here), the one
    with the largest speedup over float32 if that is at least 2, else "float32".

    Examples:
        >>> fastest(["bfloat16", "bfloat16-output"], {"bfloat16": 3.0, "bfloat16-output": 3.5})
        'bfloat16-output'
        >>> fastest(["bfloat16"], {"bfloat16": 1.9, "bfloat16-output": 9.0})
        'float32'
    """
    best = max(passes, key=speedups.__getitem__, default=None)
    return best if best is not None and speedups[best] >= 2 else "float32"


def exact_passes() -> list[str]:
    """The bfloat16 passes whose precision probe passes here (probed once per process):
    "bfloat16" where oneDNN's matmul computes bfloat16 values into exact float32 sums,
    "bfloat16-output" where torch's bfloat16 matmul sums in float32 and rounds each sum once."""
    return [name for name, exact in (("bfloat16", _onednn_bfloat16),
                                     ("bfloat16-output", _bfloat16_output)) if exact()]


@contextmanager
def fresh_probes() -> Iterator[None]:
    """Inside, this process's choice of candidate pass and every probe behind it start afresh:
    the next candidate_precision() reads DHWT_KNN_PRECISION again and gemm, gemm_bfloat16,
    BfloatOutput and exact_passes() probe again. On exit the choice and the probes' results
    from before are back. For tests and benchmarks that force a precision, or probe a changed
    matmul, within one process.

    Examples:
        >>> from unittest import mock
        >>> with mock.patch.dict("os.environ", DHWT_KNN_PRECISION="bfloat16"), fresh_probes():
        ...     candidate_precision()
        'bfloat16'
    """
    global _PRECISION, _ONEDNN_BFLOAT16, _BFLOAT16_OUTPUT, _SPEEDUPS, _ONEDNN_FLOAT32
    saved = _PRECISION, _ONEDNN_BFLOAT16, _BFLOAT16_OUTPUT, _SPEEDUPS, _ONEDNN_FLOAT32
    _PRECISION = _ONEDNN_BFLOAT16 = _BFLOAT16_OUTPUT = _SPEEDUPS = None
    _ONEDNN_FLOAT32 = {}
    try:
        yield
    finally:
        _PRECISION, _ONEDNN_BFLOAT16, _BFLOAT16_OUTPUT, _SPEEDUPS, _ONEDNN_FLOAT32 = saved


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


def _bfloat16_output() -> bool:
    """Whether torch's matmul of bfloat16 tensors sums in float32 and rounds each sum once to
    bfloat16 (the error model of widened(..., rounded_output=True)): on random bfloat16 values
    every entry must lie within the float32 summation bound of the float64 product plus one
    bfloat16 rounding of it (cached)."""
    global _BFLOAT16_OUTPUT
    if _BFLOAT16_OUTPUT is None:
        generator = torch.Generator().manual_seed(0)
        a, b = (torch.randn(256, 512, generator=generator).bfloat16() for _ in range(2))
        out = torch.mm(a, b.T).double()
        exact = a.double() @ b.double().T
        summed = 2 * 514 * U32 * (a.double().abs() @ b.double().abs().T)
        bound = summed + _U16 * (exact.abs() + summed) + 2.0**-126
        _BFLOAT16_OUTPUT = bool(((out - exact).abs() <= bound).all())
    return _BFLOAT16_OUTPUT


#: The speed probe's ratios to float32 that chose the pass in this process (None: not run).
_SPEEDUPS: dict[str, float] | None = None
#: Whether torch's bfloat16 matmul sums in float32 and rounds once on output (None: not probed).
_BFLOAT16_OUTPUT: bool | None = None


def _speedups(size: int = 2048, width: int = 512) -> dict[str, float]:
    """How many times faster a size x size x width Gram block is in each bfloat16 pass than on
    the float32 path (gemm); the best of three runs each."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, width, generator=generator).bfloat16().float()
    out = torch.empty(size, size)
    seconds = {}
    for name, multiply in (("float32", gemm), ("bfloat16", gemm_bfloat16),
                           ("bfloat16-output", BfloatOutput())):
        multiply(a, a, out)  # warm up (and the float32 path's own probe)
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            multiply(a, a, out)
            runs.append(time.perf_counter() - start)
        seconds[name] = min(runs)
    return {name: seconds["float32"] / t for name, t in seconds.items()}


def gemm_bfloat16(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """out = a @ b.T for float32 a, b holding bfloat16 values: by oneDNN with bfloat16 allowed
    where its probe passed (on AMX, several times the float32 speed), else by gemm. Either way
    the products are exact and the sums float32, the error model of widened."""
    if _onednn_bfloat16():
        with _onednn_matmul():
            torch.mm(a, b.T, out=out)
    else:
        gemm(a, b, out)


class BfloatOutput:
    """out = a @ b.T for float32 a, b holding bfloat16 values, by torch's bfloat16 matmul into a
    bfloat16 block (float32 sums, each rounded once to bfloat16 where _bfloat16_output's probe
    passed, else by gemm), then widened to float32 in out. Keeps its bfloat16 block between
    calls (a fresh one costs a page fault per 4 KiB)."""

    def __init__(self) -> None:
        self._block = torch.empty(0, dtype=torch.bfloat16)

    def __call__(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        if not _bfloat16_output():
            gemm(a, b, out)
            return
        if self._block.numel() < out.numel():
            self._block = torch.empty(out.numel(), dtype=torch.bfloat16)
        block = self._block[: out.numel()].view(out.shape)
        torch.mm(a.bfloat16(), b.bfloat16().T, out=block)
        out.copy_(block)


def widening(d: int, rounded_output: bool = False) -> float:
    """The constant C of widened for width d: C = c = 2u + u^2 + 2 gamma_{d+2} (u = 2^-8, the
    bfloat16 unit roundoff; gamma: float32 summation), or with rounded_output C = c + u / (1 - u).

    Examples:
        >>> round(widening(512) / 2.0**-8, 4), round(widening(512, True) / 2.0**-8, 4)
        (2.0196, 3.0235)
    """
    gamma = (d + 2) * U32 / (1 - (d + 2) * U32)
    c = 2 * _U16 + _U16**2 + 2 * gamma
    return c + _U16 / (1 - _U16) if rounded_output else c


def widened(left: np.ndarray, right: np.ndarray,
            rounded_output: bool = False) -> tuple[np.ndarray, np.ndarray, float]:
    """(left', right', scale): float32 matrices of bfloat16 values whose product, summed in
    float32 from exact products (gemm_bfloat16), is for every (i, j) at least scale times the
    exact left_i . right_j, and at most about 2C |left_i| |right_j| above it (C = widening(d),
    about 2^-7). rounded_output: the product's sums are then rounded to bfloat16 (BfloatOutput),
    and C is widening(d, True), about 3 * 2^-8: the rounded score is still an upper bound, at
    most about (2C + u) |left_i| |right_j| (2.7%) above the exact one.

    How: left and right are scaled by powers of two to entries of at most 1 (exact), rounded to
    bfloat16 (relative error u = 2^-8 each), and given two more columns, [c |l_i|, delta] and
    [|r_j|, 1], rounded up, that add at least c |l_i| |r_j| + delta. c = 2u + u^2 + 2 gamma
    (gamma: float32 summation over d + 2 terms) covers the rounding of the inputs
    ((2u + u^2) |l_i| |r_j|) and of the sums; delta covers values flushed to zero below 2^-126
    (at most 2^-126 per entry and product). With C >= c the float32 sum W then exceeds the exact
    s by at least (C - c) |l_i| |r_j| + delta / 2. Rounded output: the bfloat16 result is at
    least W - u |W| - 2^-126 (to nearest, or flushed), and u |W| <= u |l_i| |r_j| + u (W - s)
    (Cauchy-Schwarz, |s| <= |l_i| |r_j|), so C - c = u / (1 - u) and delta / 2 >= 2^-126 / (1 -
    u) keep it at least s. When left is right (inner product, cosine) both
    sides get [sqrt(c) |x_i|, sqrt(delta)] instead and stay one matrix, so the Gram stays
    symmetric and is stored once."""
    d = left.shape[1]
    symmetric = left is right
    scales = [2.0 ** -math.ceil(math.log2(max(largest_magnitude(side), 2.0**-100)))
              for side in ((left,) if symmetric else (left, right))]
    c = widening(d, rounded_output)
    delta = 4.0 ** math.ceil(math.log(8 * (d + 2) * 2.0**-126, 4))  # an even power of two
    sides = (((left, scales[0], math.sqrt(c), math.sqrt(delta)),) if symmetric else
             ((left, scales[0], c, delta), (right, scales[1], 1.0, 1.0)))
    widened = []
    for side, scale, factor, last in sides:
        out = np.empty((len(side), d + 2), np.float32)
        np.multiply(side, np.float32(scale), out=out[:, :d])
        norms = np.sqrt(row_squares(out[:, :d]))
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
