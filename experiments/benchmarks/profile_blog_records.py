"""Where a blog-scale run's time goes beside its updates (issue 50), measured on the CPU: host
synchronisations per update and per evaluation, and the seconds and bytes of one update, one
evaluation, one snapshot and one checkpoint, for exp 1's ensemble (gpu.toml: two untied members,
the GPT-2 vocabulary of 50,257 tokens) with a small body.

The body is cut to what a shared CPU runs in seconds (d 64, 2 layers, 2 heads, d_ff 256, context
64, batch 4; evaluation over --eval-windows windows of each split), while the vocabulary, which
sizes the snapshots, the checkpoints and the logits, stays the blog's. Host synchronisations are
counted under torch.profiler as the calls of the ops that read a value back from the device
(SYNCING: `.item()`, `bool()`, `float()` and `.tolist()` end in aten::_local_scalar_dense;
nonzero and masked_select size their output from the data): on a GPU each one waits for every
queued kernel. The update runs with the NaN guard's GPU branch (the losses kept on the device
until the next record, dhwt.training.trainer.Trainer._check_loss), so its count is the one a GPU
update would show, except where the CPU and CUDA paths of an op differ (attention dropout: a
hand softmax here, SDPA's fused kernel on a GPU). Also printed: the bytes of a snapshot and of a
checkpoint at the blog's shape (d 512, 6 layers), counted from the parameters on torch's meta
device (snapshot and checkpoint: timed without the profiler). Needs WikiText-2 and the gpt2
tokenizer's files (DHWT_DATA, TIKTOKEN_CACHE_DIR).

    DHWT_DATA=../shared/data TIKTOKEN_CACHE_DIR=../shared/data/gpt2/tiktoken_cache \\
        nice -n 10 .venv/bin/python experiments/benchmarks/profile_blog_records.py \\
        [--updates 5] [--eval-windows 32]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from dhwt import TrainConfig
from dhwt.runs.layout import run_paths
from dhwt.runs.run import load_config_text
from dhwt.training.allocator import retained_memory
from dhwt.training.memory import Need
from dhwt.training.trainer import Trainer, _torch_settings

sys.path.insert(0, str(Path(__file__).parent))
from bench_knn import cpu_model  # noqa: E402

CONFIG = Path(__file__).parents[1] / "wikitext" / "gpu.toml"
SMALL = {"d_model": 64, "n_layers": 2, "n_heads": 2, "d_ff": 256, "seq_len": 64,
         "batch_size": 4, "device": "cpu", "threads": 1, "precision": "fp32"}
#: Ops that read a value back to the host (a device synchronisation on a GPU).
SYNCING = ("aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select",
           "aten::_unique2", "aten::unique_consecutive", "aten::repeat_interleave")


def syncs(work, times: int = 1) -> tuple[float, Counter[str]]:
    """Seconds per call of `work` (called `times` times under the profiler) and its syncing
    ops per call, by where they were called from (the nearest caller that is neither
    aten::item nor aten::is_nonzero: a Python frame or the op that reads)."""
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        start = time.perf_counter()
        for _ in range(times):
            work()
        seconds = (time.perf_counter() - start) / times
    counts: Counter[str] = Counter()
    for event in prof.events():
        if event.name in SYNCING:
            caller = event.cpu_parent
            while caller is not None and caller.name in ("aten::item", "aten::is_nonzero"):
                caller = caller.cpu_parent
            where = "top level" if caller is None else caller.name
            counts[f"{event.name.removeprefix('aten::')} from {where}"] += 1 / times
    return seconds, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--eval-windows", type=int, default=32)
    args = parser.parse_args()
    values = TrainConfig.toml_values(CONFIG)
    config = TrainConfig.from_dict({**values, **SMALL, "eval_windows": args.eval_windows})
    task = load_config_text(config)
    print(f"{cpu_model()}, torch {torch.__version__}, 1 thread; vocabulary {len(task.vocab)}, "
          f"small body {SMALL}, {args.eval_windows} evaluation windows per split")
    with (tempfile.TemporaryDirectory() as scratch, _torch_settings(1, torch.device("cpu")),
          retained_memory(True)):  # the settings Trainer.run trains in
        trainer = Trainer([(config, Path(scratch) / "run")], task)
        trainer._check_loss = lambda loss: trainer._pending.append((trainer.step, loss.detach()))
        trainer._update()  # warm-up
        for name, work, times in (("update", trainer._update, args.updates),
                                  ("evaluation", trainer.evaluate, 1),
                                  ("guards before a record", lambda: (
                                      trainer._check_pending(), trainer._guard_weights()), 1)):
            seconds, counts = syncs(work, times)
            print(f"{name}: {seconds:.3f} s; host reads per call: {sum(counts.values()):g}")
            for where, count in counts.most_common():
                print(f"    {count:g} {where}")
        # timed only: torch.profiler's stack records fail to decode around torch.save (2.13)
        for name, work in (("snapshot", lambda: trainer._snapshot(trainer.runs[0])),
                           ("checkpoint", trainer._checkpoint)):
            start = time.perf_counter()
            work()
            print(f"{name}: {time.perf_counter() - start:.3f} s")
        paths = run_paths(Path(scratch) / "run")
        for kind, folder in (("snapshot", paths.embeddings), ("checkpoint", paths.checkpoints)):
            sizes = [p.stat().st_size for p in folder.iterdir()]
            print(f"{kind} file: {max(sizes) / 1e6:.1f} MB")
    blog = TrainConfig.from_dict(values)
    model = blog.model_for(len(task.vocab), blog.data.seq_len)
    per_member = Need.of(model, 1, 1, 1).parameters
    members = len(blog.members.seeds)
    table = len(task.vocab) * model.d_model
    print(f"blog shape: {per_member:,} parameters per member; a snapshot holds "
          f"{members * 2 * table * 4 / 1e6:.0f} MB (input and output tables of {members} members), "
          f"a checkpoint after step 0 {members * per_member * 12 / 1e9:.2f} GB (weights and "
          f"AdamW's two moments), at step 0 {members * per_member * 4 / 1e9:.2f} GB (no moments "
          "yet)")


if __name__ == "__main__":
    main()
