"""The training loop: S seeds as one ensemble-native model, a tie schedule, exact resume.

Steps. "Step N" is the state after N optimizer updates. The update from step N to N + 1 uses the
lr `LRSchedule.lr_at(N)`. At step N, in this order: tie-schedule events whose step is N are
applied (so an event at step N takes effect after N updates, before update N + 1 is computed);
then, when due, the evaluation (metrics.jsonl), the embedding snapshot and the checkpoint record
that state. Step 0 (before any update) and the last step are always recorded.

Data. Member i draws its training batches from its own generator, stream "data" of seeds[i], and
the fresh-draw evaluation batches from stream "draw"; the model's dropout uses the model's own
per-member generators. So member i equals a solo run of seeds[i] (to float tolerance) and nothing
draws from the global RNGs (their states are checkpointed all the same). With vary =
"embeddings" every member uses the streams of seeds[0] instead (same batches, same dropout), and
init_from / freeze set the start and the trainable weights (dhwt.training.members); frozen
weights are left out of the optimizer.

Per update the loss is sum_i sum(weights_i * CE_i) (+ tie_penalty * sum_i gap_i while untied).

metrics.jsonl: per evaluated step, one line per member and split with step, member (index),
seed, split ("train" and "valid": the task's fixed evaluation batches over every string and
loss position; "test" likewise, at the last step only; "train_fresh": a new training batch from
the member's draw stream), loss
(sum of weights * CE), accuracy (sum of weights * [argmax == target]), lr (the lr of the next
update, lr_at(step)), tied, and gap (||E_in - E_out||^2 of the member).

Resume. A checkpoint holds the model (with its tying state), the optimizer, the step and every RNG
state. Resuming from step N cuts metrics.jsonl back to the lines of steps <= N and deletes
snapshots of later steps, then runs on; the result equals an uninterrupted run bit for bit.

Several processes (torchrun; dhwt.training.distributed): every process draws the same batches,
computes its block of rows with the rows' global loss weights, and DDP sums the gradients, so the
run equals one process to float tolerance; only rank 0 writes, and checkpoints do not depend on
the number of processes.

Devices (TrainConfig.device, dhwt.training.device). The model and optimizer live on the device;
the task draws every batch on the CPU from the CPU generators above, and the batch is then moved,
so a run draws the same data on every device. Metrics, snapshots and checkpoints are written from
CPU copies, and checkpoints are read onto the CPU (then loaded into the model wherever it is), so
a checkpoint written on a GPU resumes on the CPU and vice versa. Resume on another device
continues from the same weights, optimizer state, step and data generators; only the dropout
generators are per device type (dhwt.models.base), so after a resume on another type of device
they start afresh from the seed and step (a deterministic choice, not the uninterrupted run's
masks). Bit-for-bit equality with an uninterrupted run is a CPU guarantee; on a GPU the run asks
for deterministic algorithms but only warns where torch has none.

NaN guard. A nan or inf member loss (training or evaluation) or weight stops the run with
DhwtError("loss became nan at step N (member seed S); last good checkpoint: PATH"). Weights are
checked before anything of a step is recorded, so no metric line, snapshot or checkpoint holds a
non-finite value and every checkpoint kept is good.
"""

from __future__ import annotations

import io
import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from dhwt.errors import DhwtError
from dhwt.languages import Batch, Task
from dhwt.models import ModelConfig, build_model
from dhwt.models.init import member_generator
from dhwt.training import run_dir as layout
from dhwt.training.checkpoint import (atomic_write_bytes, checkpoint_path, cpu_copy,
                                      latest_checkpoint, remove_stray_temporaries,
                                      save_checkpoint)
from dhwt.training.config import TrainConfig
from dhwt.training.device import resolve_device
from dhwt.training.distributed import SINGLE, Parallel
from dhwt.training.ensemble import (chunked_metrics, clip_member_grads, eval_rows, repeat_batch,
                                    stack_batches)
from dhwt.training.lr import LRSchedule
from dhwt.training.members import prepare_members
from dhwt.training.metrics import MetricsWriter, read_metrics, truncate_metrics
from dhwt.training.run_report import FIGURE, write_figure, write_report
from dhwt.training.snapshots import remove_snapshots_after, save_snapshot
from dhwt.training.tying import TieSchedule, apply_switch, tie_penalty

# Generator streams of a seed for the trainer's draws, beside the model's (dhwt.models.init).
DATA_STREAM = int.from_bytes(b"data", "big")
DRAW_STREAM = int.from_bytes(b"draw", "big")
CHECKPOINT_FORMAT = 1
#: Training count per token id, written at the start for tasks that count them (text).
TOKEN_COUNTS = "token_counts.npy"


@dataclass(frozen=True)
class RunResult:
    """What a finished run left: its directory, final step, last evaluation and checkpoint."""

    run_dir: Path
    step: int
    final_metrics: list[dict[str, object]]
    checkpoint: Path
    seconds: float


def train(config: TrainConfig, task: Task, run_dir: str | Path, resume: bool = False, *,
          overwrite: bool = False, parallel: Parallel = SINGLE) -> RunResult:
    """Train `config.seeds` on `task` into `run_dir`; return when `config.steps` are done.

    Fresh (resume=False): `run_dir` must not exist (or `overwrite`); it is created with
    config.toml before any training. resume=True: continue `run_dir` from its newest checkpoint;
    `config` must equal the run's config.toml. A damaged newest checkpoint is an error naming the
    previous one (see dhwt.training.checkpoint). `parallel`: this process's place in a torchrun
    launch (dhwt.training.distributed); only rank 0 writes.
    """
    run_dir = Path(run_dir)
    if resume and overwrite:
        raise DhwtError("--resume continues a run and --overwrite replaces it; give only one")
    if resume:
        check_resumable(run_dir, config)
        return Trainer(config, task, run_dir, parallel).run(resume=True)
    trainer = parallel.on_writer(lambda: layout.create_run_dir(
        run_dir, config.to_toml(), overwrite=overwrite,
        fill=lambda _: Trainer(config, task, run_dir, parallel)))
    return (trainer or Trainer(config, task, run_dir, parallel)).run(resume=False)


def check_resumable(run_dir: Path, config: TrainConfig) -> None:
    """DhwtError unless `run_dir` is a run whose config.toml equals `config` in every field but
    where it runs (TrainConfig.identity)."""
    saved_path = run_dir / layout.CONFIG
    if not saved_path.is_file():
        raise DhwtError(f"cannot resume {run_dir}: it has no {layout.CONFIG} (not a run directory)")
    saved = TrainConfig.from_toml(saved_path).identity()
    for key, value in config.identity().items():
        if saved[key] != value:
            raise DhwtError(f"cannot resume {run_dir} with {key} = {value!r}: the run was "
                            f"configured with {saved[key]!r} (see {saved_path})")


def model_config(config: TrainConfig, task: Task) -> ModelConfig:
    """The model for `task` with the architecture `config` asks for."""
    if task.objective != config.objective:
        raise DhwtError(f"the task's objective is {task.objective!r} but the config asks for "
                        f"{config.objective!r}")
    return config.model_config(vocab_size=len(task.vocab), max_len=task.seq_len,
                               causal=config.objective == "clm")


class Trainer:
    """One run's live state. Building it validates everything (model, schedule, data splits)."""

    def __init__(self, config: TrainConfig, task: Task, run_dir: Path,
                 parallel: Parallel = SINGLE) -> None:
        self.config, self.task, self.run_dir = config, task, Path(run_dir)
        self.parallel = parallel
        parallel.check(config.dropout, task, config.batch_size)
        self.device = resolve_device(config.device, parallel.local_rank, parallel.world_size)
        self.schedule = TieSchedule.parse(config.tie_schedule, config.steps)
        self.model = build_model(model_config(config, task), config.seeds,
                                 tied=self.schedule.initial_tied)
        prepare_members(self.model, config)
        self.model.to(self.device)  # weights drawn on the CPU: the same on every device
        self.optimizer = self._optimizer([[p for p in self.model.parameters() if p.requires_grad]])
        self.lr = LRSchedule(config.lr_schedule, config.lr, config.lr_min, config.steps,
                             config.lr_period, config.warmup_steps)
        members = len(config.seeds)
        data_seeds = config.seeds[:1] * members if config.vary == "embeddings" else config.seeds
        self.data_generators = [member_generator(s, DATA_STREAM) for s in data_seeds]
        self.draw_generators = [member_generator(s, DRAW_STREAM) for s in data_seeds]
        self.eval_batches = {split: parallel.shard(repeat_batch(task.eval_batch(split).to(
                                 self.device), members))
                             for split in ("train", "valid", "test") if task.n_strings(split) > 0}
        self.eval_rows = eval_rows(members, task.seq_len, len(task.vocab))
        self.net = self.model  # what the training forward calls (DDP around it in parallel)
        self.step = 0
        self.last_checkpoint: Path | None = None
        self._last_eval: list[dict[str, object]] = []

    # -- the run ----------------------------------------------------------------------------
    def run(self, resume: bool) -> RunResult:
        """Train to config.steps (from the newest checkpoint if `resume`), then write the report.
        A failed write (full disk, lost permission) stops the run with a DhwtError naming the last
        good checkpoint; everything written before it stays valid for --resume."""
        started = time.perf_counter()
        try:
            with _torch_settings(self.config.threads, self.device):
                self._train(resume)
            final = self.parallel.on_writer(self._finish, share=True)
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            raise DhwtError(f"cannot write the run directory {self.run_dir} at step {self.step}: "
                            f"{exc.strerror or exc}{where}; last good checkpoint: "
                            f"{_named(self.last_checkpoint)}; free space (or fix permissions) "
                            "and continue with --resume") from None
        assert self.last_checkpoint is not None and final is not None
        return RunResult(self.run_dir, self.step, final, self.last_checkpoint,
                         time.perf_counter() - started)

    def _train(self, resume: bool) -> None:
        metrics_path = self.run_dir / layout.METRICS
        if resume:
            self._restore()
            if self.parallel.writes:
                truncate_metrics(metrics_path, self.step)
                remove_snapshots_after(self.run_dir / layout.EMBEDDINGS, self.step)
        self.net = self.parallel.wrap(self.model)  # a collective: after every rank has restored
        writer = MetricsWriter(metrics_path) if self.parallel.writes else None
        try:
            if not resume:
                if self.parallel.writes and hasattr(self.task, "token_counts"):
                    buffer = io.BytesIO()
                    np.save(buffer, self.task.token_counts())
                    atomic_write_bytes(self.run_dir / TOKEN_COUNTS, buffer.getvalue())
                self._apply_events()
                self._record(writer, force=True)
            bar = tqdm(total=self.config.steps, initial=self.step, unit="step", desc="train",
                       disable=None if self.parallel.writes else True, dynamic_ncols=True)
            with bar:
                while self.step < self.config.steps:
                    self._update()
                    self._apply_events()
                    if self._record(writer, force=self.step == self.config.steps):
                        bar.set_postfix_str(self._postfix())
                    bar.update(1)
        finally:
            if writer is not None:
                writer.close()

    def _finish(self) -> list[dict[str, object]]:
        """Write the figure and report (rank 0); the final evaluation's metric lines."""
        records = read_metrics(self.run_dir / layout.METRICS)
        final = [r for r in records if r["step"] == self.config.steps]
        write_figure(records, self.run_dir / FIGURE, self.task.truth, self.schedule.events)
        write_report(self.run_dir / layout.REPORT, self.config, final, self.task.truth)
        return final

    def _update(self) -> None:
        """One optimizer update: step N -> N + 1."""
        c = self.config
        lr = self.lr.lr_at(self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        batch = self._draw(self.data_generators)
        loss = self.net(batch.inputs, batch.padding, targets=batch.targets, weights=batch.weights)
        if c.tie_penalty and not self.model.embeddings.tied and self.parallel.writes:
            loss = loss + tie_penalty(self.model, c.tie_penalty)  # once, not once per process
        self._guard(self.parallel.sum(loss), "loss")
        self.optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()
        if c.grad_clip is not None:
            clip_member_grads(self.model.parameters(), c.grad_clip)
        self.optimizer.step()
        self.step += 1

    def _apply_events(self) -> None:
        """Apply the tie-schedule events of the current step (after self.step updates)."""
        for event in self.schedule.events:
            if event.step == self.step:
                apply_switch(self.model, self.optimizer, event)
                self.net = self.parallel.wrap(self.model)  # DDP hooks are per Parameter

    def _record(self, writer: MetricsWriter | None, force: bool) -> bool:
        """Evaluate, snapshot and checkpoint the current step as due; True if it evaluated."""
        c, step = self.config, self.step
        evaluate = force or step % c.eval_every == 0
        snapshot = force or step % c.snapshot_every == 0
        checkpoint = force or step % c.checkpoint_every == 0
        if evaluate or snapshot or checkpoint:
            self._guard_weights()
        if evaluate:
            self._last_eval = self.evaluate()
            if writer is not None:
                writer.write(self._last_eval)
        if snapshot and self.parallel.writes:
            emb = self.model.embeddings
            save_snapshot(self.run_dir / layout.EMBEDDINGS, step, emb.input_weight,
                          emb.output_weight, tied=emb.tied, seeds=c.seeds, vocab=self.task.vocab)
        if checkpoint:
            self._checkpoint()
        return evaluate

    def _postfix(self) -> str:
        """Mean fresh-draw loss and accuracy over members, for the progress bar."""
        fresh = [r for r in self._last_eval if r["split"] == "train_fresh"]
        return (f"loss {sum(r['loss'] for r in fresh) / len(fresh):.4f} "
                f"acc {sum(r['accuracy'] for r in fresh) / len(fresh):.3f}")

    # -- evaluation -------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> list[dict[str, object]]:
        """Metric lines for the current step: per member, the deterministic "train" and "valid"
        evaluation batches ("test" too at the last step) and "train_fresh", a fresh training
        batch from the member's draw stream (new variants and masks; the yardstick against the
        Bayes optimum). Each batch is evaluated in chunks of `eval_rows` sequences, so logit
        memory stays bounded (dhwt.training.ensemble.EVAL_BYTES) on whole text splits."""
        self.model.eval()
        try:
            batches = {split: batch for split, batch in self.eval_batches.items()
                       if split != "test" or self.step == self.config.steps}
            batches["train_fresh"] = self._draw(self.draw_generators)
            emb = self.model.embeddings
            gap, tied, lr = emb.gap().tolist(), emb.tied_members, self.lr.lr_at(self.step)
            lines = []
            for split, batch in batches.items():
                loss, accuracy = map(self.parallel.sum,
                                     chunked_metrics(self.model, batch, self.eval_rows))
                self._guard(loss, f"{split} loss")
                for i, seed in enumerate(self.config.seeds):
                    lines.append({"step": self.step, "member": i, "seed": seed, "split": split,
                                  "loss": float(loss[i]), "accuracy": float(accuracy[i]),
                                  "lr": lr, "tied": tied[i], "gap": gap[i]})
            return lines
        finally:
            self.model.train()

    def _draw(self, generators: list[torch.Generator]) -> Batch:
        """This process's rows of a batch drawn on the CPU from `generators`, on the device."""
        batch = stack_batches([self.task.train_batch(g, self.config.batch_size)
                               for g in generators])
        return self.parallel.shard(batch).to(self.device)

    def _guard(self, values: torch.Tensor, what: str) -> None:
        """Stop with a clear error if any member's value in `values` (S,) is nan or inf."""
        values = values.detach()
        if not bool(torch.isfinite(values).all()):
            i = int((~torch.isfinite(values)).nonzero()[0, 0])
            bad = "nan" if math.isnan(float(values[i])) else "inf"
            raise DhwtError(f"{what} became {bad} at step {self.step} (member seed "
                            f"{self.config.seeds[i]}); last good checkpoint: "
                            f"{_named(self.last_checkpoint)}")

    # -- checkpoints ------------------------------------------------------------------------
    def _guard_weights(self) -> None:
        """Stop before recording a state whose weights are not all finite."""
        with torch.no_grad():
            flat = [p.reshape(p.shape[0], -1) for p in self.model.parameters()]
            nan = torch.stack([f.isnan().any(1) for f in flat]).any(0)
            inf = torch.stack([f.isinf().any(1) for f in flat]).any(0)
        marks = torch.where(nan, math.nan, torch.where(inf, math.inf, 0.0))
        self._guard(marks, "a weight")

    def _checkpoint(self) -> None:
        if not self.parallel.writes:  # rank 0 writes the state every rank holds
            self.last_checkpoint = checkpoint_path(self.run_dir / layout.CHECKPOINTS, self.step)
            return
        names = {id(p): n for n, p in self.model.named_parameters()}
        state = {
            "format": CHECKPOINT_FORMAT,
            "step": self.step,
            "config": self.config.to_dict(),
            "device": str(self.device),  # where it was written (a resume may go elsewhere)
            "model": cpu_copy(self.model.state_dict()),
            "optimizer": cpu_copy(self.optimizer.state_dict()),
            "optimizer_params": [[names[id(p)] for p in g["params"]]
                                 for g in self.optimizer.param_groups],
            "rng": {
                "data": [g.get_state() for g in self.data_generators],
                "draw": [g.get_state() for g in self.draw_generators],
                "dropout": self.model.rng_state(),
                "dropout_device": self.device.type,  # the type of device those generators draw on
                "torch": torch.get_rng_state(),
                "numpy": _numpy_state(),
                "python": random.getstate(),
            },
        }
        self.last_checkpoint = save_checkpoint(self.run_dir / layout.CHECKPOINTS, self.step, state)

    def _restore(self) -> None:
        """Load the newest checkpoint: model, tying state, optimizer, step, every RNG."""
        directory = self.run_dir / layout.CHECKPOINTS
        if self.parallel.writes:
            remove_stray_temporaries(directory)
        path, state = latest_checkpoint(directory)
        if state.get("format") != CHECKPOINT_FORMAT:
            raise DhwtError(f"checkpoint {path} has format {state.get('format')!r}; this dhwt "
                            f"reads format {CHECKPOINT_FORMAT}")
        # read through TrainConfig so fields added since the checkpoint take their defaults
        if TrainConfig.from_dict(state["config"], str(path)).identity() != self.config.identity():
            raise DhwtError(f"checkpoint {path} was written with a different config than "
                            f"{self.run_dir / layout.CONFIG}")
        self.model.load_state_dict(state["model"])  # adopts the saved tying state
        params = dict(self.model.named_parameters())
        self.optimizer = self._optimizer([[params[n] for n in group]
                                          for group in state["optimizer_params"]])
        self.optimizer.load_state_dict(state["optimizer"])
        rng = state["rng"]
        for g, s in zip(self.data_generators, rng["data"]):
            g.set_state(s)
        for g, s in zip(self.draw_generators, rng["draw"]):
            g.set_state(s)
        if rng.get("dropout_device", "cpu") == self.device.type:
            self.model.set_rng_state(rng["dropout"])
        else:  # another device's generator states do not fit this device's generators
            self.model.reseed_dropout(int(state["step"]))
        torch.set_rng_state(rng["torch"])
        _set_numpy_state(rng["numpy"])
        random.setstate(rng["python"])
        self.step = int(state["step"])
        self.last_checkpoint = path

    def _optimizer(self, groups: list[list[torch.nn.Parameter]]) -> torch.optim.AdamW:
        """AdamW, multi-tensor (foreach) on every device: on the CPU torch's default is one
        parameter at a time, whose per-op overhead is a fifth of an EXor step (bench_ensemble)."""
        c = self.config
        return torch.optim.AdamW([{"params": g} for g in groups], lr=c.lr, foreach=True,
                                 betas=(c.beta1, c.beta2), eps=c.eps, weight_decay=c.weight_decay)


def _named(checkpoint: Path | None) -> str:
    """A checkpoint for a message, or what it means that there is none yet."""
    return str(checkpoint) if checkpoint else "none (the run stopped before its first checkpoint)"


class _torch_settings:
    """Deterministic algorithms and the thread count for the run, restored afterwards.

    On the CPU a nondeterministic op is an error. On a GPU it is a warning (torch lacks
    deterministic kernels for some ops there), and cuBLAS gets the workspace setting its
    deterministic mode needs (CUBLAS_WORKSPACE_CONFIG, unless the user set it)."""

    def __init__(self, threads: int, device: torch.device) -> None:
        self.threads, self.device = threads, device

    def __enter__(self) -> None:
        self.saved = (torch.are_deterministic_algorithms_enabled(),
                      torch.is_deterministic_algorithms_warn_only_enabled(),
                      torch.get_num_threads())
        if self.device.type == "cuda":
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=self.device.type != "cpu")
        torch.set_num_threads(self.threads)

    def __exit__(self, *exc: object) -> None:
        torch.use_deterministic_algorithms(self.saved[0], warn_only=self.saved[1])
        torch.set_num_threads(self.saved[2])


def _numpy_state() -> list[object]:
    """numpy's global RNG state as plain lists (checkpoints load with weights_only=True)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return [name, keys.tolist(), int(pos), int(has_gauss), float(gauss)]


def _set_numpy_state(state: list[object]) -> None:
    name, keys, pos, has_gauss, gauss = state
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))

