"""Data-parallel training over the processes torchrun starts, with a result equal to one process.

    torchrun --standalone --nproc-per-node 2 -m dhwt train --grammar parity --out runs/p

torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; `launch(device)` reads
them and joins the process group: backend nccl when the run's device is a GPU (device "cuda", or
"auto" where torch sees one; process r of a machine computes on cuda:LOCAL_RANK), gloo on the CPU.
"cuda:N" is refused with several processes: it would put every process on one GPU. Without
torchrun, or with WORLD_SIZE 1, nothing changes: one process, no process group.

What each process computes. Every process holds the whole ensemble and the same generators, and
draws the same global batch (B strings per member, or every training string in full-batch mode).
Rank r of W keeps a contiguous block of rows, [r*B//W, (r+1)*B//W), with the rows' *global* loss
weights (the weights of the whole batch sum to 1). So the W shard losses sum to the one-process
loss, and the shard gradients, summed over processes, to its gradient. DDP sums them (a comm hook
replaces its default mean); weight decay, clipping and the Adam update then run identically on
every process, whose weights stay equal (an all-reduce hands every rank the same sum, bit for
bit). Loss terms that do not depend on the data (the tie penalty) are added on rank 0 only.
Evaluation is sharded the same way and its sums all-reduced.

Why the whole batch is drawn everywhere: the data generators stay in lockstep, so the state is
one state whatever W is. The run equals a one-process run to float tolerance (only the order of
summation differs), rank 0's checkpoint serves every rank, and a run may be resumed with another
number of processes. The cost, drawing B strings per step on every process, is small next to the
forward and backward passes; the model work is what is split.

Why DDP with a rebuild at tie switches rather than a hand-written all-reduce: DDP overlaps the
gradient all-reduce with the backward pass (buckets), checks at construction that every process
holds the same parameters, and is the engine users know. A tie switch adds or removes the output
Parameter, and DDP registers its hooks per Parameter at construction, so the trainer wraps the
model again after every switch and after loading a checkpoint (construction is a collective every
rank reaches at the same step). Evaluation calls the bare model; no gradients flow there.

Only rank 0 writes: config.toml, the dataset built from a grammar, metrics.jsonl, snapshots,
checkpoints, the figure and report. The others read the run directory (the dataset, and the
checkpoint when resuming), so on several nodes RUN_DIR must be on a shared file system.

Not supported with W > 1 (DhwtError): dropout (masks are drawn per member from one generator, so a
shard would not see the masks those rows see in one process, and every rank would draw the same
masks), and a batch with fewer rows than processes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import nn

from dhwt.errors import DhwtError
from dhwt.languages import Batch, Task
from dhwt.config.device import backend_for, resolve_device

T = TypeVar("T")


@dataclass(frozen=True)
class Parallel:
    """This process's place among `world_size` data-parallel processes (rank 0 writes), and
    the device it computes on (resolved once, by `launch` or the caller, from the run's setting)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0  # the process's index on its machine: its GPU under device "cuda"
    device: torch.device = torch.device("cpu")

    @property
    def writes(self) -> bool:
        """True on the one process that writes the run directory."""
        return self.rank == 0

    def check(self, dropout: float, task: Task, batch_size: int | None) -> None:
        """DhwtError if this run cannot be split over the processes (see the module docstring)."""
        if self.world_size == 1:
            return
        if dropout > 0:
            raise DhwtError(f"dropout {dropout} is not supported with {self.world_size} "
                            "processes (masks drawn per shard would differ from one process's); "
                            "train with dropout 0 or in one process")
        rows = {"a training batch": batch_size or task.n_strings("train")}
        rows.update({f"the {split} evaluation batch": len(task.eval_batch(split).inputs)
                     for split in ("train", "valid", "test") if task.n_strings(split) > 0})
        for what, n in rows.items():
            if n < self.world_size:
                raise DhwtError(f"{what} has {n} row{'s' * (n != 1)}, fewer than the "
                                f"{self.world_size} processes; each needs at least one (raise "
                                "--batch-size or use fewer processes)")

    def shard(self, batch: Batch) -> Batch:
        """This process's rows of an ensemble batch (S, B, L), keeping their global weights."""
        if self.world_size == 1:
            return batch
        rows = batch.inputs.shape[1]
        lo, hi = rows * self.rank // self.world_size, rows * (self.rank + 1) // self.world_size

        def cut(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[:, lo:hi]

        return Batch(cut(batch.inputs), cut(batch.targets), cut(batch.weights), cut(batch.padding))

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """`values` summed over processes (a detached copy when there are several), e.g. the
        per-member losses of the shards."""
        if self.world_size == 1:
            return values
        total = values.detach().clone()
        torch.distributed.all_reduce(total)
        return total

    def wrap(self, model: nn.Module) -> nn.Module:
        """What the training forward pass calls: `model` itself, or DDP around it summing
        gradients. Call again whenever the model's set of Parameters changes (a tie switch)."""
        if self.world_size == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        device = next(model.parameters()).device
        ddp = DistributedDataParallel(model, device_ids=None if device.type == "cpu"
                                      else [device.index])
        ddp.register_comm_hook(None, _sum_gradients)
        return ddp

    def barrier(self) -> None:
        """Wait until every process is here."""
        if self.world_size > 1:
            torch.distributed.barrier()

    def on_writer(self, action: Callable[[], T], share: bool = False) -> T | None:
        """Run `action` on rank 0 only, once every process is here; the others wait and share its
        failure as a DhwtError (so no process waits forever for one that stopped). Returns the
        action's result on rank 0, and on the others too if `share` (it must pickle), else None.
        """
        if self.world_size == 1:
            return action()
        self.barrier()
        result: T | None = None
        failure: BaseException | None = None
        if self.writes:
            try:
                result = action()
            except BaseException as exc:  # shared with the others, then raised here
                failure = exc
        message = [None if failure is None else str(failure) or type(failure).__name__,
                   result if share and failure is None else None]
        torch.distributed.broadcast_object_list(message, src=0)
        if failure is not None:
            raise failure
        if message[0] is not None:
            raise DhwtError(f"process 0 stopped: {message[0]}")
        return result if self.writes else message[1]


SINGLE = Parallel()


@contextmanager
def launch(device: str = "cpu") -> Iterator[Parallel]:
    """This process's Parallel, with `device` (a device setting) resolved for it: the processes
    of a torchrun launch joined in a process group (nccl on GPUs, else gloo), or a single process
    when this one was not started by torchrun with WORLD_SIZE > 1. The group is left on exit."""
    world_size = _env_int("WORLD_SIZE", 1)
    if world_size == 1:
        yield Parallel(device=resolve_device(device))
        return
    rank, local_rank = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
    where = resolve_device(device, local_rank, world_size)
    if where.type == "cuda":
        torch.cuda.set_device(where)  # nccl's collectives use the current device
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise DhwtError(f"WORLD_SIZE is {world_size} but {missing[0]} is not set; start several "
                        "processes with torchrun (see docs/how-to/run-a-study.md)")
    try:
        torch.distributed.init_process_group(backend_for(where), rank=rank, world_size=world_size)
    except (RuntimeError, ValueError) as exc:  # torch's rendezvous errors; first line is the gist
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DhwtError(f"process {rank} of {world_size} cannot join the others: "
                        f"{reason}") from None
    try:
        yield Parallel(rank, world_size, local_rank, where)
    finally:
        torch.distributed.destroy_process_group()


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None:
        return default
    if not text.isdigit():
        raise DhwtError(f"environment variable {name} must be a whole number, got {text!r}")
    return int(text)


def _sum_gradients(group, bucket):  # no annotations: DDP checks them against its own types
    """DDP comm hook: all-reduce a gradient bucket (a dist.GradBucket) as a sum, where DDP's
    default divides by W; returns the future of the summed buffer."""
    work = torch.distributed.all_reduce(bucket.buffer(), group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])
