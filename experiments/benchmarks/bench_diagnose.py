"""Benchmark of `dhwt diagnose` on checkpoints written to a temporary folder.

    nice -n 10 .venv/bin/python experiments/benchmarks/bench_diagnose.py [--repeats 1]

1. Exact: an untied 50,257 x 768 pair (a GPT-NeoX-layout checkpoint, float32 safetensors; the
   spaces of bench_knn.make_spaces: a shared rank-32 factor, noise, log-normal hubs). The whole
   diagnosis through dhwt.analysis.diagnose_result.diagnose_path (reading the checkpoint, both exact
   neighbour searches, the sampled chance level, CKA, Procrustes) against one exact
   `knn_match(A, B)` of the same matrices already in memory, timed alternately in this run.
   Target ratio <= 1.2.
2. Sampled: a 131,072 x 4,096 untied pair (bfloat16 on disk, 2 GiB), 4,096 query tokens, each
   exact against all rows, plus 512 chance queries. Target < 120 s wall.

Prints the CPU model, the flags and probes that decide the KNN path (bench_knn.knn_path), torch's
thread count and the load average beside every figure. --n N runs the exact part at N rows (a
quick check of the ratio's direction; the target is at 50,257).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).parent))
from bench_knn import cpu_flags, cpu_model, knn_path, make_spaces  # noqa: E402

from dhwt import DiagnoseOptions, diagnose_path, knn_match  # noqa: E402


def write(folder: Path, e_in: torch.Tensor, e_out: torch.Tensor) -> Path:
    folder.mkdir(parents=True)
    save_file({"gpt_neox.embed_in.weight": e_in.contiguous(),
               "embed_out.weight": e_out.contiguous()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt_neox",
                                                    "tie_word_embeddings": False}))
    return folder


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--skip-sampled", action="store_true")
    parser.add_argument("--n", type=int, default=50_257, help="rows of the exact pair")
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}; flags: {cpu_flags()}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; load average {os.getloadavg()[0]:.1f}")
    print(f"dhwt candidate pass: {knn_path()}")  # probes run here, before either timing
    with tempfile.TemporaryDirectory() as tmp:
        a, b = make_spaces(args.n, 768, seed=0)
        folder = write(Path(tmp) / "exact", torch.from_numpy(a), torch.from_numpy(b))
        diagnose_times, knn_times = [], []
        for _ in range(args.repeats):
            t, result = timed(lambda: diagnose_path(str(folder), DiagnoseOptions()))
            diagnose_times.append(t)
            t, match = timed(partial(knn_match, a, b, 10))  # no closure: `del a, b` below
            knn_times.append(t)
        d = result.subjects[0].diagnosis
        assert np.array_equal(d.overlap_per_token, match.overlap), "diagnose != knn_match"
        ratio = statistics.median(diagnose_times) / statistics.median(knn_times)
        print(f"exact {args.n:,} x 768: diagnose {statistics.median(diagnose_times):.1f} s, one "
              f"knn_match {statistics.median(knn_times):.1f} s: ratio diagnose / knn_match "
              f"{ratio:.2f} (target <= 1.2); overlap {d.overlap.mean:.4f}, chance "
              f"{d.chance.mean:.4f} [{d.chance.low:.4f}, {d.chance.high:.4f}]; load average "
              f"after {os.getloadavg()[0]:.1f}")
        del a, b, result, match
        if args.skip_sampled:
            return
        generator = torch.Generator().manual_seed(1)
        n, width = 131_072, 4_096
        shared = torch.randn(n, 64, generator=generator)
        spaces = []
        for _ in range(2):
            space = shared @ torch.randn(64, width, generator=generator) / 8
            space += torch.randn(n, width, generator=generator)
            spaces.append(space.to(torch.bfloat16))
        del shared, space
        folder = write(Path(tmp) / "sampled", *spaces)
        del spaces
        t, result = timed(lambda: diagnose_path(str(folder), DiagnoseOptions(queries=4096)))
        d = result.subjects[0].diagnosis
        print(f"sampled 131,072 x 4,096, 4,096 queries: {t:.1f} s (target < 120 s); overlap "
              f"{d.overlap.mean:.4f} [{d.overlap.low:.4f}, {d.overlap.high:.4f}], chance "
              f"{d.chance.mean:.4f}; CKA over {d.whole_rows:,} rows")


if __name__ == "__main__":
    main()
