"""Benchmark of dhwt.analysis.knn: exact KNN Match Similarity of two GPT-2-sized spaces.

    nice -n 10 .venv/bin/python experiments/benchmarks/bench_knn.py [--repeats 1] [--n 50257]

Data: two 50257 x 512 float32 matrices with non-trivial shared neighbourhoods: a shared rank-32
token factor mapped into each space by its own random map, plus independent noise, with
log-normal row scales (inner-product hubs) partly shared between the spaces. Seeded.

1. Time (median over --repeats, the two methods alternating) of dhwt's `knn_match(A, B, k=10)`
   (both neighbour searches, the float64 re-ranking and the scores) against two exact faiss-cpu
   IndexFlatIP searches (k + 1 neighbours, one search per space; the `bench` extra), with the
   CPU model and the flags that decide the path (AVX-512, its BF16 and VNNI, AMX), the
   candidate pass's precision with the probes that chose it, its GEMM path, and dhwt's time per
   phase (Gram
   blocks, filter, merge, re-rank, setup; dhwt.analysis.knn.phase_times). Target ratio <= 0.5.
   Without faiss the baseline is the naive chunked method (full Gram matrix in row chunks +
   torch.topk), and the script says so. faiss-cpu's wheels bundle an OpenBLAS (0.3.15 in faiss
   1.15.1) that does not know newer Xeons under KVM and falls back to a generic kernel (a
   10,000 x 512 self-search at 28 GFLOP/s against 131 with the AVX-512 kernel, Intel Xeon with
   AMX, 2026-11-26), so on an AVX-512 CPU the script sets OPENBLAS_CORETYPE=SkylakeX (unless
   set) before faiss loads its OpenBLAS: the baseline a user tuning faiss would get. numpy's
   own OpenBLAS, loaded before, keeps its choice.
2. Exactness: the neighbour lists of --check-rows random rows of each space against a float64
   brute force (scores of the row against every row, self masked, lexsort with the same tie
   rule). Must be 100%. faiss's agreement on the same rows is printed for information.
3. Peak memory of one dhwt knn_match in a fresh child process that loads the two matrices from
   .npy files: VmHWM from /proc/self/status (peak resident memory of the whole process:
   interpreter, torch, the inputs and the engine; ru_maxrss would also count the parent's memory
   at the fork) and tracemalloc's peak of the allocations made during the call. Target < 2 GB.
4. Against the naive full-matrix method (V x V scores in memory, argsort) at --small-n rows,
   where that fits.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
import tracemalloc

import numpy as np
import torch

from dhwt.analysis import knn
from dhwt.analysis.knn import gram
from dhwt.analysis.knn import knn_match, match_neighbours, nearest_neighbours


def make_spaces(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two (n, d) float32 spaces sharing a rank-32 token factor and part of their row scales."""
    rng = np.random.default_rng(seed)
    factor = rng.standard_normal((n, 32)).astype(np.float32)
    shared_scale = rng.standard_normal((n, 1)).astype(np.float32)
    spaces = []
    for _ in range(2):
        mapped = factor @ rng.standard_normal((32, d)).astype(np.float32) / np.float32(4)
        noise = rng.standard_normal((n, d), dtype=np.float32)
        scale = np.exp(0.3 * shared_scale + 0.2 * rng.standard_normal((n, 1)).astype(np.float32))
        spaces.append(np.ascontiguousarray((mapped + noise) * scale, np.float32))
    return spaces[0], spaces[1]


def oracle_rows(x: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """float64 brute-force inner-product neighbours of `rows`, self masked, ties to lower id."""
    x64 = x.astype(np.float64)
    score = x64[rows] @ x64.T
    score[np.arange(len(rows)), rows] = -np.inf
    ids = np.broadcast_to(np.arange(len(x)), score.shape)
    return np.lexsort((ids, -score), axis=1)[:, :k]


def faiss_search(x: np.ndarray, k: int) -> np.ndarray:
    """Exact inner-product neighbours by faiss IndexFlatIP (k + 1, self removed afterwards)."""
    import faiss

    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    _, found = index.search(x, k + 1)
    return found


def cpu_model() -> str:
    """The CPU's model name (lscpu's), for every figure the benchmarks print."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


#: CPU flags that decide which Gram products are fast (lscpu's names).
PATH_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8")


def cpu_flags() -> str:
    """Which of PATH_FLAGS this CPU has (from /proc/cpuinfo), e.g. 'avx2 avx512f avx512_bf16'."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return " ".join(flag for flag in PATH_FLAGS if flag in have) or "none of them"
    except OSError:
        pass
    return "unknown"


def knn_path() -> str:
    """The candidate pass dhwt chose here and the probes that chose it (the speed probe measured
    for this line when the pass was forced or no bfloat16 pass is exact)."""
    precision = knn.candidate_precision()
    speedups = gram._SPEEDUPS if gram._SPEEDUPS is not None else gram._speedups()
    return (f"{precision} (probes: oneDNN bfloat16 products into exact float32 "
            f"sums {gram._onednn_bfloat16()}, bfloat16 matmul rounding float32 sums once "
            f"{gram._bfloat16_output()}; Gram block speed vs float32: "
            + ", ".join(f"{name} {ratio:.2f}x" for name, ratio in speedups.items()
                        if name != "float32")
            + f"; DHWT_KNN_PRECISION={os.environ.get('DHWT_KNN_PRECISION', 'unset')})")


def faiss_path() -> str:
    """What faiss was built for (its compile options: the SIMD level of its kernels)."""
    try:
        import faiss
    except ImportError:
        return "not installed"
    return f"faiss {faiss.__version__}, {faiss.get_compile_options().strip()}"


def naive_chunked(x: np.ndarray, k: int, chunk: int = 4096) -> np.ndarray:
    """The naive chunked method: every row chunk against the whole matrix, torch.topk."""
    xt = torch.from_numpy(x)
    out = []
    for s in range(0, len(x), chunk):
        score = xt[s:s + chunk] @ xt.T
        score[torch.arange(len(score)), torch.arange(s, s + len(score))] = -torch.inf
        out.append(torch.topk(score, k, dim=1).indices.numpy())
    return np.concatenate(out)


def without_self(found: np.ndarray, k: int) -> np.ndarray:
    """faiss's k + 1 lists with the row itself removed (or the last entry if self is absent)."""
    rows = np.arange(len(found))[:, None]
    keep = found != rows
    return np.array([f[m][:k] for f, m in zip(found, keep)])


def agreement(got: np.ndarray, ref: np.ndarray) -> float:
    """Share of rows whose neighbour lists (as ordered lists) are identical."""
    return float((got == ref).all(axis=1).mean())


def timed(fns, repeats: int) -> tuple[list[float], list[object]]:
    """Median time and last result of each function, calling them in turn `repeats` times (so
    that a change in machine load hits all of them alike)."""
    times, results = [[] for _ in fns], [None] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            results[i] = fn()
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times], results


def memory_child(folder: str, k: int) -> None:
    """Run in a fresh process: peak memory of one dhwt knn_match, printed as JSON."""
    a, b = np.load(Path(folder) / "a.npy"), np.load(Path(folder) / "b.npy")
    base = peak_rss_mb()
    tracemalloc.start()
    knn_match(a, b, k)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(json.dumps({"maxrss_mb": peak_rss_mb(), "inputs_rss_mb": base,
                      "tracemalloc_peak_mb": peak / 2**20}))


def peak_rss_mb() -> float:
    """Peak resident memory of this process (VmHWM), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=50257)
    parser.add_argument("--d", type=int, default=512)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--check-rows", type=int, default=300)
    parser.add_argument("--small-n", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-child", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child, args.k)
        return

    print(f"CPU: {cpu_model()}; flags: {cpu_flags()}; threads: torch "
          f"{torch.get_num_threads()}; data {args.n} x {args.d} float32 x 2, k={args.k}, seed "
          f"{args.seed}; load average {os.getloadavg()[0]:.1f}")
    print(f"dhwt candidate pass: {knn_path()}")
    a, b = make_spaces(args.n, args.d, args.seed)

    phases: list[dict[str, float]] = []

    def dhwt_match():  # what knn_match does, keeping the neighbour lists for the check below
        with knn.phase_times() as seconds:
            lists = [nearest_neighbours(x, args.k) for x in (a, b)]
        phases.append(seconds)
        return lists, match_neighbours(*lists)

    if "avx512f" in cpu_flags().split():
        os.environ.setdefault("OPENBLAS_CORETYPE", "SkylakeX")
    try:
        import faiss  # noqa: F401

        core = os.environ.get("OPENBLAS_CORETYPE", "unset")
        baseline = f"faiss IndexFlatIP x 2 (OPENBLAS_CORETYPE={core})"

        def base_search():
            return [without_self(faiss_search(x, args.k), args.k) for x in (a, b)]
    except ImportError:
        baseline = "naive chunked matmul+topk x 2 (faiss-cpu not installed)"

        def base_search():
            return [naive_chunked(x, args.k) for x in (a, b)]

    (t_dhwt, t_base), ((lists, match), base_lists) = timed([dhwt_match, base_search],
                                                           args.repeats)
    print(f"dhwt knn_match (2 spaces, exact)     {t_dhwt:8.2f} s   "
          f"overlap {match.mean_overlap:.4f}  jaccard {match.mean_jaccard:.4f}")
    print(f"{baseline:36s} {t_base:8.2f} s")
    print(f"ratio dhwt / baseline                {t_dhwt / t_base:8.3f}   (target <= 0.5)")
    median = {name: statistics.median(p[name] for p in phases) for name in phases[0]}
    print("dhwt per phase (median over repeats, both spaces): "
          + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in median.items()))
    if knn.candidate_precision() == "bfloat16":
        path = "bfloat16 Gram blocks by oneDNN (bfloat16 values, float32 sums)"
    elif knn.candidate_precision() == "bfloat16-output":
        path = "bfloat16 Gram blocks by torch's bfloat16 matmul (float32 sums rounded once)"
    else:
        onednn = sorted(shape for shape, ok in gram._ONEDNN_FLOAT32.items() if ok)
        path = f"float32 Gram blocks by oneDNN for shapes {onednn}, numpy for the others"
    print(f"dhwt GEMM path: {path}; faiss: {faiss_path()}; load average after the timing "
          f"{os.getloadavg()[0]:.1f}")

    rows = np.random.default_rng(args.seed + 1).choice(args.n, args.check_rows, replace=False)
    for name, x, mine, base in zip("AB", (a, b), lists, base_lists):
        ref = oracle_rows(x, rows, args.k)
        mine = mine.indices[rows]
        print(f"exact agreement with float64 oracle, space {name}, {len(rows)} rows: "
              f"dhwt {agreement(mine, ref):.4f}   baseline {agreement(base[rows], ref):.4f}")

    with tempfile.TemporaryDirectory() as folder:
        np.save(Path(folder) / "a.npy", a)
        np.save(Path(folder) / "b.npy", b)
        child = subprocess.run([sys.executable, __file__, "--memory-child", folder, "--k",
                                str(args.k)], capture_output=True, text=True, check=True)
    mem = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"peak memory of one dhwt knn_match (fresh process): peak RSS {mem['maxrss_mb']:.0f} MB "
          f"(before the call, inputs loaded: {mem['inputs_rss_mb']:.0f} MB); tracemalloc peak "
          f"during the call {mem['tracemalloc_peak_mb']:.0f} MB   (target < 2048 MB)")

    small_a, _ = make_spaces(args.small_n, args.d, args.seed)

    def full_matrix() -> np.ndarray:
        x64 = small_a.astype(np.float64)
        score = x64 @ x64.T
        np.fill_diagonal(score, -np.inf)
        ids = np.broadcast_to(np.arange(len(score)), score.shape)
        return np.lexsort((ids, -score), axis=1)[:, :args.k]

    (t_small, t_full), (mine, ref) = timed(
        [lambda: nearest_neighbours(small_a, args.k).indices, full_matrix], args.repeats)
    print(f"at n={args.small_n}: dhwt {t_small:.2f} s, naive full matrix (float64, lexsort) "
          f"{t_full:.2f} s, ratio {t_small / t_full:.3f}, agreement {agreement(mine, ref):.4f}")


if __name__ == "__main__":
    main()
