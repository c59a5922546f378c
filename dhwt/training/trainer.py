"""The training loop: S seeds as one ensemble-native model (one run, or several as a group), tie
schedules, exact resume.

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
the member's draw stream; "population", where record.population_every asks for it: the exact
fit over every context of the language, dhwt.models.population), loss
(sum of weights * CE), accuracy (sum of weights * [argmax == target]), lr (the lr of the next
update, lr_at(step)), tied, and gap (||E_in - E_out||^2 of the member). With record.tensorboard,
the same writer logs those numbers as TensorBoard scalars in RUN_DIR/tensorboard
(dhwt.runs.metrics.MetricsWriter); a missing tensorboard package stops the run when the Trainer
is built, before anything is trained or written.

Resume. A checkpoint holds the model (with its tying state), the optimizer, the step and every RNG
state (dhwt.training.state). Resuming from step N first checks the run's record up to N
(dhwt.runs.history: every evaluation in metrics.jsonl, every snapshot readable; a lost snapshot
of step N is written again from the checkpoint, anything else lost stops the resume), then cuts
metrics.jsonl back to the lines of steps <= N and deletes
snapshots of later steps (TensorBoard events of later steps are purged: MetricsWriter), then runs
on; the result equals an uninterrupted run bit for bit.

Several processes (torchrun; dhwt.training.distributed): every process draws the same batches,
computes its block of rows with the rows' global loss weights, and DDP sums the gradients, so the
run equals one process to float tolerance; only rank 0 writes, and checkpoints do not depend on
the number of processes.

Devices (the device setting, dhwt.config.device, resolved once into `Parallel.device`). The model and optimizer live on the device;
the task draws every batch on the CPU from the CPU generators above, and the batch is then moved,
so a run draws the same data on every device. Metrics, snapshots and checkpoints are written from
CPU copies, and checkpoints are read onto the CPU (then loaded into the model wherever it is), so
a checkpoint written on a GPU resumes on the CPU and vice versa. Resume on another device
continues from the same weights, optimizer state, step and data generators; only the dropout
generators are per device type (dhwt.models.base), so after a resume on another type of device
they start afresh from the seed and step (a deterministic choice, not the uninterrupted run's
masks). Bit-for-bit equality with an uninterrupted run is a CPU guarantee; on a GPU the run asks
for deterministic algorithms but only warns where torch has none.

Groups (dhwt.training.group). Runs whose configs differ only in tie_schedule and
seeds train as one ensemble: run k's members are a block of rows, each run's schedule switches
its rows only (apply_switch(members=...)), and every run directory gets its own metrics,
snapshots and checkpoints, the same (to float tolerance) as the run trained alone. A
killed group resumes from the newest step whose checkpoint every run holds; a run of the group
also resumes on its own.

NaN guard. A nan or inf member loss (training or evaluation) or weight stops the run with
DhwtError("loss became nan at step N (member seed S); last good checkpoint: PATH"). Weights are
checked before anything of a step is recorded, so no metric line, snapshot or checkpoint holds a
non-finite value and every checkpoint kept is good. On a GPU the training losses are checked at
the next record rather than at once (no update waits for the device); the error still names the
step whose loss went wrong.

Precision (dhwt.training.precision). The forward passes of training and evaluation run under
the run's precision (fp32, or bf16-mixed autocast); tf32 is set for the run and restored
after. AdamW is fused (one kernel for every tensor); `compile` puts the training
forward through torch.compile (on a CPU it paid at the GPT-2-small shape, 1.10x, and cost at the
WikiText one, 0.85x: experiments/benchmarks/LOG.md).
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from dhwt.config.run import TrainConfig
from dhwt.directories import atomic_write_bytes
from dhwt.errors import DhwtError, Interrupted
from dhwt.languages import Batch, Task
from dhwt.languages.population import population_batch
from dhwt.models import ModelConfig, build_model
from dhwt.models.init import member_generator
from dhwt.models.population import population_fit
from dhwt.runs.layout import run_paths
from dhwt.runs.checkpoints import (checkpoint_path, checkpoint_step, common_step,
                                   latest_checkpoint, remove_stray_temporaries, save_checkpoint)
from dhwt.runs.history import check_history
from dhwt.runs.metrics import MetricsWriter, summary_writer, truncate_metrics
from dhwt.runs.sessions import end_session, start_session
from dhwt.runs.snapshots import remove_snapshots_after, save_snapshot
from dhwt.training import state
from dhwt.training.allocator import retained_memory
from dhwt.training.distributed import SINGLE, Parallel
from dhwt.training.ensemble import (EVAL_BYTES, GPU_EVAL_BYTES, chunked_metrics,
                                    clip_member_grads, eval_rows, repeat_batch)
from dhwt.training.group import member_rows
from dhwt.training.lr import LRSchedule
from dhwt.training.members import prepare_members
from dhwt.training.population import Certificate, PopulationOptions, fit_population
from dhwt.training.memory import Need, allocation_failure, available_memory
from dhwt.training.precision import autocast, check_precision, tf32_matmuls
from dhwt.training.tying import apply_switch, tie_penalty

# Generator streams of a seed for the trainer's draws, beside the model's (dhwt.models.init).
DATA_STREAM = int.from_bytes(b"data", "big")
DRAW_STREAM = int.from_bytes(b"draw", "big")


@dataclass
class _Run:
    """One run directory's share of the trained ensemble: its config, its member rows, its
    newest checkpoint written so far, and what a resume repaired in it (notes for the user)."""

    config: TrainConfig
    run_dir: Path
    rows: range
    last_checkpoint: Path | None = None
    notes: list[str] = field(default_factory=list)


def model_config(config: TrainConfig, task: Task) -> ModelConfig:
    """The model `config` asks for, for `task`."""
    if task.objective != config.data.objective:
        raise DhwtError(f"the task's objective is {task.objective!r} but the config asks for "
                        f"{config.data.objective!r}")
    return config.model_for(len(task.vocab), task.seq_len)


class Trainer:
    """The live state of one run, or of several trained as one ensemble (their configs differ
    only in tie_schedule and seeds, dhwt.training.group). Building it validates everything
    (model, schedules, data splits); `run` trains. Directories, locks and reports are the
    caller's (dhwt.training.runner; reports: dhwt.commands.train).

    `self.config` holds what the runs share (the first run's config); `self.seeds` are the
    ensemble's members, every run's seeds in row order.
    """

    def __init__(self, runs: Sequence[tuple[TrainConfig, Path]], task: Task,
                 parallel: Parallel = SINGLE) -> None:
        configs = [config for config, _ in runs]
        if any(c.record.tensorboard for c in configs):
            summary_writer()  # every process, so that none goes on alone if the package is missing
        self.runs = [_Run(c, Path(d), rows)
                     for (c, d), rows in zip(runs, member_rows(configs))]
        config, self.seeds = configs[0], [s for c in configs for s in c.members.seeds]
        self.config, self.task, self.parallel = config, task, parallel
        parallel.check(config.model.dropout, task, config.optim.batch_size)
        self.device = parallel.device
        place = config.placement
        check_precision(place.precision, place.tf32, self.device)
        model = model_config(config, task)
        rows = config.optim.batch_size or task.n_strings("train")
        Need.of(model, len(self.seeds), -(-rows // parallel.world_size), task.seq_len).check(
            available_memory(self.device), f"device {self.device}")
        try:
            self.model = build_model(model, self.seeds, tied=[
                r.config.tying.tie_schedule.initial_tied for r in self.runs for _ in r.rows])
            prepare_members(self.model, config, task.vocab)
            self.model.to(self.device)  # weights drawn on the CPU: the same on every device
        except RuntimeError as exc:
            reason = allocation_failure(exc)
            if reason is None:
                raise
            raise DhwtError(f"cannot allocate the model of {self._dirs()} on device "
                            f"{self.device}: {reason}; train fewer seeds or a smaller "
                            "model") from None
        self.optimizer = self._optimizer([[p for p in self.model.parameters() if p.requires_grad]])
        optim = config.optim
        self.lr = LRSchedule(optim.lr_schedule, optim.lr, optim.lr_min, optim.steps,
                             optim.lr_period, optim.warmup_steps)
        members = len(self.seeds)
        data_seeds = self.seeds[:1] * members if config.members.vary == "embeddings" else self.seeds
        self.streams = {"data": [member_generator(s, DATA_STREAM) for s in data_seeds],
                        "draw": [member_generator(s, DRAW_STREAM) for s in data_seeds]}
        self.eval_batches = {split: parallel.shard(repeat_batch(task.eval_batch(split).to(
                                 self.device), members))
                             for split in ("train", "valid", "test") if task.n_strings(split) > 0}
        self.eval_rows = eval_rows(members, task.seq_len, len(task.vocab), GPU_EVAL_BYTES
                                   if self.device.type == "cuda" else EVAL_BYTES)
        if config.record.population_every and task.truth is None:
            raise DhwtError("population_every needs a synthetic language (exact ground truth); "
                            "this task is natural text")
        if config.optim.optimizer == "population":
            _check_population(configs, task, parallel)
        self.certificate: Certificate | None = None  # optimizer "population", once fitted
        self.net = self.model  # what the training forward calls (DDP around it in parallel)
        self.step = 0
        self._last_eval: list[list[dict[str, object]]] = []  # per run
        self._pending: list[tuple[int, torch.Tensor]] = []  # (step, loss): see _check_loss

    # -- the run ----------------------------------------------------------------------------
    def run(self, resume: bool, restored: Callable[[], object] | None = None) -> int:
        """Train to config.optim.steps (from the newest checkpoint if `resume`); the step it started
        from. `restored` is called once the checkpoints are restored, before the runs' records
        are cut back to their step (so a resume that cannot restore changes nothing). Afterwards `self.step` is the last step and each run's `last_checkpoint` its
        checkpoint. A failed write (full disk, lost permission) or allocation (out of memory)
        stops the run with a DhwtError naming the last good checkpoint; everything written before
        it stays valid for --resume. On the CPU the process keeps the memory it frees until the
        run ends (dhwt.training.allocator: steps reuse mapped pages)."""
        try:
            place = self.config.placement
            with (_torch_settings(place.threads, self.device), tf32_matmuls(place.tf32),
                  retained_memory(self.device.type == "cpu")):
                return self._train(resume, restored)
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted at step {self.step}; {self._go_on()}") from None
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            raise DhwtError(f"cannot write the run directory {self._dirs()} at step {self.step}: "
                            f"{exc.strerror or exc}{where}; last good checkpoint: "
                            f"{self._last_good()}; free space (or fix permissions) "
                            "and continue with --resume") from None
        except RuntimeError as exc:
            reason = allocation_failure(exc)
            if reason is None:
                raise
            raise DhwtError(f"out of memory at step {self.step} on device {self.device}: "
                            f"{reason}; last good checkpoint: {self._last_good()}; train fewer "
                            "seeds, a smaller batch or a smaller model") from None

    def _go_on(self) -> str:
        """How to continue after an interrupt: from the last checkpoint, or afresh if none."""
        if any(r.last_checkpoint is None for r in self.runs):
            return (f"no checkpoint was written yet: start {self._dirs()} again with "
                    "--overwrite")
        command = ("" if len(self.runs) > 1
                   else f": `dhwt train --out {self.runs[0].run_dir} --resume`")
        return f"last checkpoint: {self._last_good()}; resume continues from it{command}"

    def _dirs(self) -> str:
        """The run directory, or the group's, for a message."""
        return ", ".join(str(r.run_dir) for r in self.runs)

    def _last_good(self) -> str:
        """The newest checkpoint step every run holds (a write that failed part way through a
        group's checkpoints leaves some runs a step behind), for a message."""
        written = [r.last_checkpoint for r in self.runs]
        if any(path is None for path in written):
            return _named(None)
        oldest = min(written, key=checkpoint_step)
        return str(oldest) if len(written) == 1 else (
            f"{oldest} (and that step in the group's other runs)")

    def _train(self, resume: bool, restored: Callable[[], object] | None) -> int:
        """Train to config.optim.steps; the step it started from."""
        if resume:
            self._restore()
            if restored is not None:
                restored()
            self.parallel.on_writer(self._continue_history)
        self.net = self._wrap()  # a collective: after every rank has restored
        self.parallel.on_writer(lambda: self._sessions(start=True))
        writers = ([MetricsWriter(run_paths(r.run_dir).metrics, run_paths(r.run_dir).tensorboard
                                  if r.config.record.tensorboard else None, start=self.step)
                    for r in self.runs] if self.parallel.writes else None)
        start = self.step
        try:
            if not resume:
                if self.parallel.writes and hasattr(self.task, "token_counts"):
                    buffer = io.BytesIO()
                    np.save(buffer, self.task.token_counts())
                    for run in self.runs:
                        atomic_write_bytes(run_paths(run.run_dir).token_counts, buffer.getvalue())
                if self.parallel.writes and getattr(self.task, "twins", None) is not None:
                    text = json.dumps(self.task.twins, indent=1).encode()
                    for run in self.runs:
                        atomic_write_bytes(run_paths(run.run_dir).twins, text)
                self._apply_events()
                self._record(writers, force=True)
            if self.config.optim.optimizer != "population":
                self._train_steps(writers)
            elif self.step < self.config.optim.steps:
                self._fit_population()
                self._record(writers, force=True)
        finally:
            for writer in writers or ():
                writer.close()
        self.parallel.on_writer(lambda: self._sessions(start=False))
        return start

    def _sessions(self, start: bool) -> None:
        """Record in each run that a session starts (or ends) at the current step."""
        for run in self.runs:
            if start:
                start_session(run_paths(run.run_dir).sessions, self.step)
            else:
                end_session(run_paths(run.run_dir).sessions, self.step)

    def _train_steps(self, writers: list[MetricsWriter] | None) -> None:
        """Update, apply events and record, step by step, to config.optim.steps."""
        bar = tqdm(total=self.config.optim.steps, initial=self.step, unit="step", desc="train",
                   disable=None if self.parallel.writes else True, dynamic_ncols=True)
        with bar:
            while self.step < self.config.optim.steps:
                self._update()
                self._apply_events()
                if self._record(writers, force=self.step == self.config.optim.steps):
                    bar.set_postfix_str(self._postfix())
                bar.update(1)

    def _fit_population(self) -> None:
        """optimizer "population": fit every member to the language's exact population
        objective (dhwt.training.population) and stand at the last step; the L-BFGS iterations
        after the `steps` Adam updates are not steps. The model ends in float64, the
        certificate's precision."""
        optim = self.config.optim
        options = PopulationOptions(adam_steps=optim.steps, lr=optim.lr,
                                    lbfgs_steps=optim.lbfgs_steps, newton_steps=optim.newton_steps,
                                    l2=optim.weight_decay)
        bar = tqdm(total=optim.steps + len(self.seeds) * optim.lbfgs_steps, unit="it",
                   desc="population fit", disable=None, dynamic_ncols=True)

        def progress(phase: str, step: int) -> None:
            if phase.startswith("newton"):  # called once, when the member's Newton ends
                bar.set_postfix_str(f"seed {self.seeds[int(phase.split()[1])]}: {step} Newton "
                                    "iterations")
                return
            done = step if phase == "adam" else (
                optim.steps + int(phase.split()[1]) * optim.lbfgs_steps + step)
            bar.update(done - bar.n)

        with bar:
            self.certificate = fit_population(
                self.model, population_batch(self.task.language, self.task.objective).to(
                    self.device), options, progress)
        self.step = optim.steps

    def _continue_history(self) -> None:
        """Check each run's record up to the restored step (dhwt.runs.history), write the
        snapshot of that step again where it was lost (noted in the run's `notes`), and cut off
        what was recorded after it."""
        lost = [check_history(run.run_dir, run.config, self.step) for run in self.runs]
        for run, problem in zip(self.runs, lost):
            if problem is not None:
                path = self._snapshot(run)
                run.notes.append(f"wrote {path} again from the checkpoint of step {self.step} "
                                 f"(it was {problem})")
            truncate_metrics(run_paths(run.run_dir).metrics, self.step)
            remove_snapshots_after(run_paths(run.run_dir).embeddings, self.step)

    def _update(self) -> None:
        """One optimizer update: step N -> N + 1."""
        c = self.config
        lr = self.lr.lr_at(self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        batch = self._draw(self.streams["data"])
        with self._autocast():
            loss = self.net(batch.inputs, batch.padding, targets=batch.targets,
                            weights=batch.weights)
        if c.tying.tie_penalty and not self.model.embeddings.tied and self.parallel.writes:
            loss = loss + tie_penalty(self.model, c.tying.tie_penalty)  # once, not once per process
        self._check_loss(self.parallel.sum(loss))
        self.optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()
        if c.optim.grad_clip is not None:
            clip_member_grads(self.model.parameters(), c.optim.grad_clip)
        self.optimizer.step()
        self.step += 1

    def _apply_events(self) -> None:
        """Apply the tie-schedule events of the current step (after self.step updates), each to
        the members of its run."""
        for run in self.runs:
            for event in run.config.tying.tie_schedule.events:
                if event.step == self.step:
                    apply_switch(self.model, self.optimizer, event, members=run.rows)
                    self.net = self._wrap()  # DDP hooks are per Parameter

    def _record(self, writers: list[MetricsWriter] | None, force: bool) -> bool:
        """Evaluate, snapshot and checkpoint the current step as due; True if it evaluated."""
        c, step = self.config, self.step
        evaluate = force or step % c.record.eval_every == 0
        snapshot = force or step % c.record.snapshot_every == 0
        checkpoint = force or step % c.record.checkpoint_every == 0
        if evaluate or snapshot or checkpoint:
            self._check_pending()
            self._guard_weights()
        if evaluate:
            self._last_eval = self.evaluate()
            for writer, lines in zip(writers or (), self._last_eval):
                writer.write(lines)
        if snapshot and self.parallel.writes:
            for run in self.runs:
                self._snapshot(run)
        if checkpoint:
            self._checkpoint()
        return evaluate

    def _snapshot(self, run: _Run) -> Path:
        """Write the embedding snapshot of `run`'s members at the current step."""
        emb, rows = self.model.embeddings, slice(run.rows.start, run.rows.stop)
        return save_snapshot(run_paths(run.run_dir).embeddings, self.step, emb.input_weight[rows],
                             emb.output_weight[rows], tied=emb.tied_members[run.rows.start],
                             seeds=run.config.members.seeds, vocab=self.task.vocab)

    def _postfix(self) -> str:
        """Mean fresh-draw loss and accuracy over members, for the progress bar."""
        fresh = [r for lines in self._last_eval for r in lines if r["split"] == "train_fresh"]
        return (f"loss {sum(r['loss'] for r in fresh) / len(fresh):.4f} "
                f"acc {sum(r['accuracy'] for r in fresh) / len(fresh):.3f}")

    # -- evaluation -------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> list[list[dict[str, object]]]:
        """Metric lines for the current step, per run: per member, the deterministic "train" and
        "valid" evaluation batches ("test" too at the last step) and "train_fresh", a fresh training
        batch from the member's draw stream (new variants and masks; the yardstick against the
        Bayes optimum); "population" where record.population_every asks for it. Each batch is evaluated in chunks of `eval_rows` sequences, so logit
        memory stays bounded (dhwt.training.ensemble.EVAL_BYTES) on whole text splits."""
        self.model.eval()
        try:
            batches = {split: batch for split, batch in self.eval_batches.items()
                       if split != "test" or self.step == self.config.optim.steps}
            batches["train_fresh"] = self._draw(self.streams["draw"])
            emb = self.model.embeddings
            gap, tied, lr = emb.gap().tolist(), emb.tied_members, self.lr.lr_at(self.step)
            lines: list[list[dict[str, object]]] = [[] for _ in self.runs]

            def add(split: str, loss, accuracy, extra: dict[str, list] | None = None) -> None:
                for run, run_lines in zip(self.runs, lines):
                    for member, (i, seed) in enumerate(zip(run.rows, run.config.members.seeds)):
                        run_lines.append({
                            "step": self.step, "member": member, "seed": seed, "split": split,
                            "loss": float(loss[i]), "accuracy": float(accuracy[i]), "lr": lr,
                            "tied": tied[i], "gap": gap[i],
                            **{k: v[i] for k, v in (extra or {}).items()}})

            for split, batch in batches.items():
                with self._autocast():
                    metrics = chunked_metrics(self.model, batch, self.eval_rows)
                loss, accuracy = map(self.parallel.sum, metrics)
                self._guard(loss, f"{split} loss")
                add(split, loss, accuracy)
            every = self.config.record.population_every
            due = every and (self.step % every == 0 or self.step == self.config.optim.steps)
            fitted = self.certificate is not None and self.step == self.config.optim.steps
            if (due or fitted) and self.parallel.writes:  # every process holds every member
                with self._autocast():
                    fit = population_fit(self.model, self.task.truth)
                add("population", *fit, _certificate_lines(self.certificate) if fitted else None)
            return lines
        finally:
            self.model.train()

    def _draw(self, generators: list[torch.Generator]) -> Batch:
        """This process's rows of a batch drawn on the CPU from `generators`, on the device."""
        batch = self.task.train_batches(generators, self.config.optim.batch_size)
        return self.parallel.shard(batch).to(self.device)

    def _autocast(self):
        """The context of the model's forward passes under the run's precision."""
        return autocast(self.config.placement.precision, self.device)

    def _wrap(self) -> torch.nn.Module:
        """What the training forward calls: the model, in DDP when parallel, compiled when the
        config asks."""
        net = self.parallel.wrap(self.model)
        return torch.compile(net) if self.config.placement.compile else net

    def _check_loss(self, loss: torch.Tensor) -> None:
        """The NaN guard of an update's loss: at once on the CPU; on a GPU kept on the device
        until the next record (`_check_pending`), so that no step waits for the device."""
        if self.device.type == "cpu":
            self._guard(loss, "loss")
        else:
            self._pending.append((self.step, loss.detach()))

    def _check_pending(self) -> None:
        """The NaN guard of the losses kept since the last record, oldest first, with a single
        read from the device: an error names the step that went wrong."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        finite = torch.stack([torch.isfinite(loss).all() for _, loss in pending]).tolist()
        if not all(finite):
            step, loss = pending[finite.index(False)]
            self._guard(loss, "loss", step)

    def _guard(self, values: torch.Tensor, what: str, step: int | None = None) -> None:
        """Stop with a clear error if any member's value in `values` (S,) of `step` (the current
        one by default) is nan or inf."""
        values = values.detach()
        if not bool(torch.isfinite(values).all()):
            i = int((~torch.isfinite(values)).nonzero()[0, 0])
            bad = "nan" if math.isnan(float(values[i])) else "inf"
            run = next(r for r in self.runs if i in r.rows)
            where = f" of {run.run_dir}" if len(self.runs) > 1 else ""
            step = self.step if step is None else step
            raise DhwtError(f"{what} became {bad} at step {step} (member seed "
                            f"{self.seeds[i]}{where}); last good checkpoint: "
                            f"{self._last_good()}")

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
        """Each run's checkpoint of this step, as a solo run would write it (dhwt.training.state)."""
        if not self.parallel.writes:  # rank 0 writes the state every rank holds
            for run in self.runs:
                run.last_checkpoint = checkpoint_path(run_paths(run.run_dir).checkpoints, self.step)
            return
        states = state.encode(self.model, self.optimizer, self.streams, self.device, self.step,
                              [(run.config, run.rows) for run in self.runs])
        for run, saved in zip(self.runs, states):
            run.last_checkpoint = save_checkpoint(run_paths(run.run_dir).checkpoints, self.step,
                                                  saved)

    def _restore(self) -> None:
        """Load the runs' checkpoints of the newest step they all hold (a group killed while
        writing one step's checkpoints has that step in some runs only)."""
        states, step = [], self._common_step()
        for run in self.runs:
            directory = run_paths(run.run_dir).checkpoints
            if self.parallel.writes:
                remove_stray_temporaries(directory)
            path, saved = latest_checkpoint(directory, at_most=step)
            state.check(path, saved, run.config)
            run.last_checkpoint = path
            states.append(saved)
        self.optimizer, self.step = state.decode(states, self.model, self._optimizer,
                                                 self.streams, self.device)

    def _common_step(self) -> int | None:
        """The newest step of which every run has a checkpoint (None for one run: its newest);
        DhwtError if there is none."""
        if len(self.runs) == 1:
            return None
        step = common_step([run_paths(r.run_dir).checkpoints for r in self.runs])
        if step is None:
            raise DhwtError(f"cannot resume {self._dirs()} as one group: they hold no "
                            "checkpoint of a common step; resume each on its own")
        return step

    def _optimizer(self, groups: list[list[torch.nn.Parameter]]) -> torch.optim.Optimizer:
        """AdamW or plain SGD (config.optim.optimizer). AdamW fused (one kernel over every
        tensor, no temporaries: torch's default takes one parameter at a time, whose per-op
        overhead is a fifth of an EXor step, and its multi-tensor form allocates fresh
        temporaries the size of the embedding tables every step); SGD multi-tensor (foreach)."""
        c = self.config
        params = [{"params": g} for g in groups]
        if c.optim.optimizer == "sgd":
            return torch.optim.SGD(params, lr=c.optim.lr, weight_decay=c.optim.weight_decay,
                                   foreach=True)
        return torch.optim.AdamW(params, lr=c.optim.lr, fused=True,
                                 betas=(c.optim.beta1, c.optim.beta2), eps=c.optim.eps,
                                 weight_decay=c.optim.weight_decay)


def _check_population(configs: list[TrainConfig], task: Task, parallel: Parallel) -> None:
    """DhwtError unless runs can be fitted by optimizer "population": a synthetic language,
    one process, a constant tie schedule and nothing but the L2 term outside the objective."""
    config = configs[0]
    if task.truth is None:
        raise DhwtError('optimizer "population" needs a synthetic language (its exact '
                        "population objective); this task is natural text")
    if parallel.world_size > 1:
        raise DhwtError('optimizer "population" runs in one process; start it without torchrun')
    if any(c.tying.tie_schedule.events for c in configs):
        raise DhwtError('optimizer "population" fits tied or untied members: give tie_schedule '
                        '"tied" or "untied", not a schedule with switches')
    outside = {"dropout": config.model.dropout, "tie_penalty": config.tying.tie_penalty,
               "grad_clip": config.optim.grad_clip,
               "precision": config.placement.precision != "fp32"}
    given = [name for name, value in outside.items() if value]
    if given:
        raise DhwtError('optimizer "population" fits the population objective itself: leave '
                        f"out {', '.join(given)}")


def _certificate_lines(certificate: Certificate) -> dict[str, list]:
    """The certificate's fields of each member's population line in metrics.jsonl."""
    return {"objective": certificate.objective.tolist(),
            "grad_norm": certificate.grad_norm.tolist(), "drift": certificate.drift.tolist(),
            "lbfgs_iterations": certificate.iterations.tolist(),
            **({"newton_fall": certificate.newton_fall.tolist(),
                "newton_iterations": certificate.newton_iterations.tolist(),
                "min_eigenvalue": certificate.min_eigenvalue.tolist()}
               if np.isfinite(certificate.min_eigenvalue).any() else {})}  # Newton ran


def _named(checkpoint: Path | None) -> str:
    """A checkpoint for a message, or what it means that there is none yet."""
    return str(checkpoint) if checkpoint else "none (the run stopped before its first checkpoint)"


class _torch_settings:
    """Deterministic algorithms and the thread count for the run, restored afterwards.

    On the CPU a nondeterministic op is an error. On a GPU it is a warning (torch lacks
    deterministic kernels for some ops there), and cuBLAS gets the workspace setting its
    deterministic mode needs (CUBLAS_WORKSPACE_CONFIG, unless the user set it).

    Deterministic mode also fills every new uninitialised tensor with nan by default (a guard
    for code that reads memory it never wrote); no op here does, and the fill is one more pass
    over every temporary of every step (perf: ~5% of the time an EXor step at S = 10 spends
    beyond one at S = 1). It is turned off for the run; resumed runs still equal uninterrupted
    ones bit for bit (tests/training/test_trainer.py)."""

    def __init__(self, threads: int, device: torch.device) -> None:
        self.threads, self.device = threads, device

    def __enter__(self) -> None:
        self.saved = (torch.are_deterministic_algorithms_enabled(),
                      torch.is_deterministic_algorithms_warn_only_enabled(),
                      torch.get_num_threads(),
                      torch.utils.deterministic.fill_uninitialized_memory)
        if self.device.type == "cuda":
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=self.device.type != "cpu")
        torch.utils.deterministic.fill_uninitialized_memory = False
        torch.set_num_threads(self.threads)

    def __exit__(self, *exc: object) -> None:
        torch.use_deterministic_algorithms(self.saved[0], warn_only=self.saved[1])
        torch.set_num_threads(self.saved[2])
        torch.utils.deterministic.fill_uninitialized_memory = self.saved[3]
