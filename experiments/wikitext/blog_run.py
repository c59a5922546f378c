"""The blog's two experiments ("The Butterfly Effect", 2024) whole, in one call within a time
budget: exp 1, exp 2 from its final checkpoint, the KNN match curves of both, and a figure of them
beside the blog's.

exp 1 trains the config (default gpu.toml: the blog's settings, 16,000 steps, two members that
differ only in their embedding init) with its evaluations and snapshots, checkpointing only at
step 0 and its last step (checkpoint_every = steps; the trainer always writes those two). exp 2
starts from that last checkpoint's member 0 with the input embeddings redrawn (seeds 100 and 200)
and every loaded weight frozen (init_from, redraw = "input", freeze = "loaded"), for half as many
steps, with exp 1's evaluation and snapshot cadence. Then, on the same device, the overlap
|A∩B|/10 between the two members of each run at their snapshots (member_curves.overlap_rows: raw
inner product, input and output matrices, over all tokens, the blog's average, and over the
tokens seen in training), coarse to fine (first and last step, then midpoints) until the budget
ends, so a short budget gives a coarser curve rather than none.

Before any training it refuses, in one line (`error: ...`, exit 2): a device cuda that torch does
not see; the gpt2 tokenizer without its files (TIKTOKEN_CACHE_DIR, else DATA/gpt2/tiktoken_cache);
no WikiText-2 where DATA or the config says; a budget too short for the planned steps at the
rate declared with --rate (steps per second of exp 1, everything included) or, without --rate,
at the rate a probe measures: a few timed updates, one evaluation, one snapshot and one
checkpoint of exp 1's ensemble, written to a scratch directory (exp 2's step is taken to cost no
more than exp 1's: its loaded weights get no gradient and no optimizer update). After exp 1 the
plan is checked again at exp 1's own rate before exp 2 starts. Training that still overruns is
interrupted when only --curves-seconds are left (the snapshots written so far stay and are
measured; exp 2 then does not start, since it needs exp 1's last checkpoint).

OUT gets five small files: blog_curves.csv and .json (the curves; the json also holds the plan,
the probe's and every phase's seconds, and each member's final valid and test perplexity),
blog_curves.png, blog_metrics.jsonl (both runs' metric lines, each with its "run") and
blog_run.log.
The run directories (snapshots of 412 MB and checkpoints of 1.7 GB at the blog's size) stay in
WORK.

    python experiments/wikitext/blog_run.py --out DIR [--work runs/blog] [--budget 530]
        [--config experiments/wikitext/gpu.toml] [--device cuda] [--precision bf16-mixed]
        [--steps 16000] [--exp2-steps 8000] [--rate STEPS_PER_S] [--data ../shared/data]

A tiny run on the CPU (the test suite's: tests/experiments/test_blog_run.py) gives a small
config and --device cpu --precision fp32 --steps 4.
"""

from __future__ import annotations

import argparse
import csv
import gc
import io
import json
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from dhwt import TrainConfig, load_run, train_run  # noqa: E402
from dhwt.config.device import resolve_device  # noqa: E402
from dhwt.directories import atomic_path, atomic_write_bytes  # noqa: E402
from dhwt.errors import DhwtError  # noqa: E402
from dhwt.runs.run import load_config_text  # noqa: E402
from dhwt.text.corpus import WIKITEXT2, wikitext2_location  # noqa: E402
from dhwt.training.allocator import retained_memory  # noqa: E402
from dhwt.training.precision import tf32_matmuls  # noqa: E402
from dhwt.training.trainer import Trainer, _torch_settings  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from member_curves import overlap_rows  # noqa: E402

HERE = Path(__file__).parent
#: The blog's curves as its post states them (../../../shared/REFERENCES.md section 2): exp 1
#: rises to about 26% near step 3,000 and then declines; exp 2 rises monotonically and levels
#: off near 32% (overlap |A∩B|/10 over all 50,257 tokens). Only these points are published.
BLOG = {"exp1_peak": 0.26, "exp1_peak_step": 3000, "exp2_level": 0.32}
#: exp 2's members: input embeddings redrawn with these seeds, data order seed 100's (the blog).
EXP2_SEEDS = [100, 200]
PROBE_STEPS = 10        # timed updates of the probe, after WARMUP untimed ones
WARMUP = 3
#: What OUT gets (a device call returns at most 8 files).
RESULTS = ("blog_curves.csv", "blog_curves.json", "blog_curves.png", "blog_metrics.jsonl",
           "blog_run.log")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for the small results")
    parser.add_argument("--work", default="runs/blog", help="folder for the two run directories "
                        "(replaced if dhwt made them)")
    parser.add_argument("--budget", type=float, default=530.0,
                        help="seconds for the whole script, imports excepted (default 530)")
    parser.add_argument("--curves-seconds", type=float, default=90.0,
                        help="seconds of the budget kept for the curves and the figure")
    parser.add_argument("--config", default=str(HERE / "gpu.toml"), help="exp 1's config")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", default="bf16-mixed")
    parser.add_argument("--steps", type=int, help="exp 1's steps (default: the config's)")
    parser.add_argument("--exp2-steps", type=int, help="exp 2's steps (default: half exp 1's)")
    parser.add_argument("--rate", type=float, help="declared steps per second of exp 1, "
                        "evaluations, snapshots and checkpoints included (skips the probe)")
    parser.add_argument("--data", default=os.environ.get("DHWT_DATA", "../shared/data"),
                        help="folder holding WikiText-2 and gpt2/tiktoken_cache "
                        "(default: DHWT_DATA, else ../shared/data)")
    return parser.parse_args(argv)


class Log:
    """Lines to stdout and to OUT/blog_run.log, each with the seconds since the start."""

    def __init__(self, path: Path, start: float) -> None:
        self.path, self.start = path, start
        path.write_text("")

    def __call__(self, line: str) -> None:
        stamped = f"[{time.monotonic() - self.start:6.1f} s] {line}"
        print(stamped, flush=True)
        with self.path.open("a") as log:
            log.write(stamped + "\n")


def exp1_config(args: argparse.Namespace) -> TrainConfig:
    """The config file with the command's steps, device and precision, checkpointing only at
    step 0 and the last step."""
    values = TrainConfig.toml_values(args.config)
    steps = args.steps or int(values.get("steps", 0)) or None
    if steps is None:
        raise DhwtError(f"config file {args.config} sets no steps; give --steps")
    return TrainConfig.from_dict({**values, "steps": steps, "checkpoint_every": steps,
                                  "device": args.device, "precision": args.precision},
                                 args.config)


def exp2_config(exp1: TrainConfig, source: Path, steps: int) -> TrainConfig:
    """exp 2 as the blog: exp 1's member 0 at its last checkpoint, input embeddings redrawn
    with EXP2_SEEDS, everything loaded frozen, a new data order shared by both members."""
    return exp1.replace(init_from=str(source.resolve()), init_member=0, seeds=EXP2_SEEDS,
                        vary="embeddings", redraw="input", freeze="loaded", steps=steps,
                        checkpoint_every=steps)


def check_inputs(config: TrainConfig, data: Path) -> None:
    """DhwtError for what the run would miss: the GPU, the gpt2 tokenizer's files, the corpus.
    Sets TIKTOKEN_CACHE_DIR and DHWT_DATA from `data` where they are unset."""
    resolve_device(config.placement.device)
    if config.data.tokenizer == "gpt2":
        cache = Path(os.environ.setdefault("TIKTOKEN_CACHE_DIR",
                                           str(data / "gpt2" / "tiktoken_cache")))
        if not cache.is_dir() or not any(cache.iterdir()):
            raise DhwtError(f"the gpt2 tokenizer's files are not in {cache} (TIKTOKEN_CACHE_DIR, "
                            f"else DATA/gpt2/tiktoken_cache; the GPU has no network); point "
                            "TIKTOKEN_CACHE_DIR or --data at a copy of ../shared/data")
    if config.data.corpus == WIKITEXT2 and config.data.data is None:
        os.environ.setdefault("DHWT_DATA", str(data))
        if wikitext2_location() is None:
            raise DhwtError(f"no WikiText-2 in {os.environ['DHWT_DATA']} (DHWT_DATA, else "
                            "--data); point either at a copy of ../shared/data")


def records(steps: int, every: int) -> int:
    """How many times a run of `steps` records on an `every` cadence (step 0, every multiple,
    the last step)."""
    return steps // every + 1 + (steps % every != 0)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def probe(config: TrainConfig, task: object, scratch: Path) -> dict[str, float]:
    """Seconds of exp 1's pieces on this machine, under the settings its run trains in:
    building the ensemble ("setup"), one update ("step", the mean of PROBE_STEPS after WARMUP),
    one evaluation, one snapshot and one checkpoint, all written under `scratch`."""
    timed: dict[str, float] = {}
    start = time.perf_counter()
    trainer = Trainer([(config, scratch / "probe")], task)
    timed["setup"] = time.perf_counter() - start
    device, place = trainer.device, config.placement
    try:  # under the torch settings Trainer.run trains in
        with (_torch_settings(place.threads, device), tf32_matmuls(place.tf32),
              retained_memory(device.type == "cpu")):
            pieces(trainer, timed)
    finally:
        del trainer
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return timed


def pieces(trainer: Trainer, timed: dict[str, float]) -> None:
    """Into `timed`, the seconds of one update, evaluation, snapshot and checkpoint."""
    for _ in range(WARMUP):
        trainer._update()
    sync(trainer.device)
    for name, work, times in (("step", trainer._update, PROBE_STEPS),
                              ("evaluation", trainer.evaluate, 1),
                              ("snapshot", lambda: trainer._snapshot(trainer.runs[0]), 1),
                              ("checkpoint", trainer._checkpoint, 1)):
        start = time.perf_counter()
        for _ in range(times):
            work()
        sync(trainer.device)
        timed[name] = (time.perf_counter() - start) / times


def projected(config: TrainConfig, timed: dict[str, float]) -> float:
    """Seconds a run of `config` takes at the probe's `timed` pieces: setup, its updates, its
    evaluations (one more for the test split at the end), snapshots and two checkpoints."""
    steps, record = config.optim.steps, config.record
    return (timed["setup"] + steps * timed["step"]
            + (records(steps, record.eval_every) + 1) * timed["evaluation"]
            + records(steps, record.snapshot_every) * timed["snapshot"]
            + 2 * timed["checkpoint"])


@contextmanager
def deadline(seconds: float) -> Iterator[list[bool]]:
    """Interrupt the main thread (KeyboardInterrupt, as Ctrl-C) once `seconds` have passed; the
    list yielded holds True once that happened."""
    expired = [False]

    def expire(signum: int, frame: object) -> None:
        expired[0] = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield expired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def train_until(config: TrainConfig, task: object, run_dir: Path, seconds: float,
                inputs: Sequence[Path] = ()) -> bool:
    """Train `config` into `run_dir` (replacing a run dhwt made there); False if interrupted
    at the deadline `seconds` from now (the trainer keeps what it wrote: its snapshots so far)."""
    with deadline(seconds) as expired:
        try:
            train_run(config, task, run_dir, overwrite=True, inputs=list(inputs))
        except KeyboardInterrupt:  # the trainer's Interrupted, or one between its steps
            if not expired[0]:
                raise
            return False
    return True


def coarse_to_fine(steps: Sequence[int]) -> list[int]:
    """`steps` ordered first, last, then midpoints of ever finer halves, so that any prefix
    spreads over the whole run.

    >>> coarse_to_fine([0, 1, 2, 3, 4, 5, 6, 7, 8])
    [0, 8, 4, 2, 6, 1, 3, 5, 7]
    """
    if len(steps) <= 2:
        return list(steps)
    order, spans = [0, len(steps) - 1], [(0, len(steps) - 1)]
    while spans:
        finer = []
        for low, high in spans:
            if high - low > 1:
                middle = (low + high) // 2
                order.append(middle)
                finer += [(low, middle), (middle, high)]
        spans = finer
    return [steps[i] for i in order]


def measure_curves(runs: dict[str, Path], device: str, seconds: float, log: Log,
                   written: Callable[[dict[str, list[dict[str, object]]]], None]
                   ) -> dict[str, list[dict[str, object]]]:
    """Each run's overlap rows (member_curves.overlap_rows), one snapshot step at a time,
    alternating runs, coarse to fine, while the last step's time still fits in `seconds`;
    `written` gets the rows so far after each step."""
    start = time.monotonic()
    queues = {name: coarse_to_fine(load_run(path).steps) for name, path in runs.items()}
    rows: dict[str, list[dict[str, object]]] = {name: [] for name in runs}
    slowest = 0.0
    while any(queues.values()):
        for name, queue in queues.items():
            if not queue:
                continue
            left = seconds - (time.monotonic() - start)
            if left < slowest * 1.5:
                log(f"curves: stopped for time with {sum(map(len, queues.values()))} steps "
                    "left")
                return rows
            began = time.monotonic()
            step = queue.pop(0)
            rows[name] += overlap_rows(load_run(runs[name]), [step], device)
            rows[name].sort(key=lambda row: row["step"])
            slowest = max(slowest, time.monotonic() - began)
            written(rows)
    return rows


def write_csv(rows: dict[str, list[dict[str, object]]], path: Path) -> None:
    """One line per run and step: experiment, step and the overlap columns."""
    columns = ["experiment", "step"] + sorted({k for r in rows.values() for row in r
                                               for k in row} - {"step"})
    text = io.StringIO()
    writer = csv.DictWriter(text, columns, restval="")
    writer.writeheader()
    for name, found in rows.items():
        writer.writerows({"experiment": name, **row} for row in found)
    atomic_write_bytes(path, text.getvalue().encode())


def figure(rows: dict[str, list[dict[str, object]]], path: Path, title: str) -> None:
    """Both experiments' input overlap (all tokens, the blog's average; seen tokens dashed)
    beside the blog's published points."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, name in zip(axes, ("exp1", "exp2")):
        found = rows.get(name, [])
        for column, style, label in (("input_all", "-o", "all tokens (the blog's average)"),
                                     ("input_seen", "--s", "tokens seen in training")):
            points = [(r["step"], r[column]) for r in found if column in r]
            if points:
                ax.plot(*zip(*points), style, label=f"dhwt, {label}")
        if name == "exp1":
            ax.plot([BLOG["exp1_peak_step"]], [BLOG["exp1_peak"]], "k*", markersize=12,
                    label="blog: peak ~26% near step 3,000, then declines")
        else:
            ax.axhline(BLOG["exp2_level"], color="k", linestyle=":",
                       label="blog: rises monotonically, levels off ~32%")
        ax.set(xlabel=f"{name} step", title={"exp1": "exp 1: only the embedding init differs",
                                             "exp2": "exp 2: inputs redrawn, rest frozen"}[name])
        ax.legend(fontsize=7)
    axes[0].set_ylabel("KNN overlap |A∩B|/10 (input, ip)")
    axes[0].set_ylim(bottom=0)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


def final_perplexities(lines: list[dict[str, object]]) -> dict[str, list[float]]:
    """Each split's perplexity per member at the last evaluation of a run's metric `lines`."""
    if not lines:
        return {}
    last = max(line["step"] for line in lines)
    found: dict[str, list[float]] = {}
    for line in sorted(lines, key=lambda x: x["member"]):
        if line["step"] == last and line["split"] in ("valid", "test"):
            found.setdefault(line["split"], []).append(math.exp(line["loss"]))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    start = time.monotonic()
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "blog_run.log", start)

    def left() -> float:
        return args.budget - (time.monotonic() - start)

    summary: dict[str, object] = {"blog": BLOG, "budget_s": args.budget, "seconds": {}}
    try:
        config1 = exp1_config(args)
        steps2 = args.exp2_steps or max(config1.optim.steps // 2, 1)
        check_inputs(config1, Path(args.data))
        device = resolve_device(config1.placement.device)
        where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        log(f"device {device} ({where}), torch {torch.__version__}; exp 1 {config1.optim.steps}"
            f" steps, exp 2 {steps2}, {config1.placement.precision}, budget {args.budget:.0f} s")
        summary |= {"device": where, "torch": torch.__version__, "config": str(args.config),
                    "precision": config1.placement.precision,
                    "steps": {"exp1": config1.optim.steps, "exp2": steps2}}
        if args.curves_seconds >= args.budget:
            raise DhwtError(f"--budget {args.budget:g} s leaves nothing to train beside "
                            f"--curves-seconds {args.curves_seconds:g}")
        if args.rate is not None:
            need = (config1.optim.steps + steps2) / args.rate
            basis = f"the declared --rate {args.rate:g} steps/s"
        began = time.monotonic()
        task = load_config_text(config1)
        summary["seconds"]["data"] = time.monotonic() - began
        log(f"data: {len(task.vocab)} tokens in the vocabulary, "
            f"{summary['seconds']['data']:.1f} s")
        if args.rate is None:
            work.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=work, prefix=".probe-") as scratch:
                timed = probe(config1, task, Path(scratch))
            summary["probe_s"] = timed
            log("probe: " + ", ".join(f"{k} {v:.3f} s" for k, v in timed.items()))
            need = (projected(config1, timed)
                    + projected(exp2_config(config1, work / "exp1", steps2), timed))
            basis = f"the probe's {1 / timed['step']:.2f} steps/s and record costs"
        summary["projected_training_s"] = need
        if need + args.curves_seconds > left():
            raise DhwtError(f"exp 1's {config1.optim.steps} and exp 2's {steps2} steps need "
                            f"about {need:.0f} s at {basis}, plus --curves-seconds "
                            f"{args.curves_seconds:g}: more than the {left():.0f} s left of "
                            f"--budget {args.budget:g}; give fewer --steps or a longer budget")
        log(f"plan: training about {need:.0f} s at {basis}; {left():.0f} s left")
    except DhwtError as exc:
        log(f"error: {exc}")
        write_summary(summary | {"refused": str(exc)}, out)
        return 2

    runs = {"exp1": work / "exp1", "exp2": work / "exp2"}
    began = time.monotonic()
    finished = train_until(config1, task, runs["exp1"], left() - args.curves_seconds)
    took = summary["seconds"]["exp1"] = time.monotonic() - began
    log(f"exp 1: {'finished' if finished else 'stopped for time'} in {took:.1f} s")
    trained = {"exp1": runs["exp1"]}
    if finished:
        config2 = exp2_config(config1, runs["exp1"], steps2)
        need2 = took * steps2 / config1.optim.steps
        if need2 + args.curves_seconds > left():
            log(f"exp 2: not started: at exp 1's rate it needs about {need2:.0f} s, "
                f"more than the {left() - args.curves_seconds:.0f} s left for training")
        else:
            began = time.monotonic()
            done = train_until(config2, task, runs["exp2"], left() - args.curves_seconds,
                               inputs=[runs["exp1"]])
            summary["seconds"]["exp2"] = time.monotonic() - began
            log(f"exp 2: {'finished' if done else 'stopped for time'} in "
                f"{summary['seconds']['exp2']:.1f} s")
            trained["exp2"] = runs["exp2"]
    lines = {name: load_run(path).metrics() for name, path in trained.items()}
    atomic_write_bytes(out / "blog_metrics.jsonl", "".join(
        json.dumps({"run": name, **line}) + "\n" for name, found in lines.items()
        for line in found).encode())
    summary["perplexity"] = {name: final_perplexities(found) for name, found in lines.items()}

    began = time.monotonic()

    def written(rows: dict[str, list[dict[str, object]]]) -> None:
        write_csv(rows, out / "blog_curves.csv")
        write_summary(summary | {"curves": rows}, out)

    rows = measure_curves(trained, str(device), left() - 2, log, written)
    summary["seconds"]["curves"] = time.monotonic() - began
    summary["curves"] = rows
    figure(rows, out / "blog_curves.png", f"dhwt on {where}, {config1.placement.precision}; "
           f"steps measured: " + ", ".join(f"{n} {len(r)}" for n, r in rows.items()))
    write_summary(summary, out)
    for name, found in rows.items():
        for row in found:
            log(f"{name} step {row['step']}: " + ", ".join(
                f"{k} {v:.4f}" for k, v in row.items() if k != "step"))
    log("done")
    return 0


def write_summary(summary: dict[str, object], out: Path) -> None:
    atomic_write_bytes(out / "blog_curves.json", json.dumps(summary, indent=1).encode())


if __name__ == "__main__":
    sys.exit(main())
