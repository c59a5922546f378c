"""A run's lifecycle: `train_run` trains one run directory, `train_group` several as one
ensemble (dhwt.training.group), fresh or resumed, and record when training finished; the
caller writes the report (`dhwt train`: dhwt.commands.train, after this returns).

A fresh run's directory is created (config.toml first, and with a grammar the dataset in
RUN_DIR/data) in one all-or-nothing step, so a bad grammar, dataset or option leaves nothing
behind. A run has finished when its record says so (dhwt.runs.run.is_finished); a resume of a
finished run leaves it as it was. Under torchrun every process calls this; rank 0 creates the
run directories (the others wait for them) and is the only one to write
(dhwt.training.distributed).

Examples:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from dhwt.config import TrainConfig
    >>> from dhwt.runs.run import is_finished
    >>> out = Path(tempfile.mkdtemp()) / "run"
    >>> config = TrainConfig(grammar="parity", seeds=[1, 2], steps=3, eval_every=3)
    >>> result = train_run(config, None, out)     # builds out/data from the grammar, then trains
    >>> result.step, is_finished(out)
    (3, True)
    >>> sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    ['checkpoints', 'config.toml', 'data', 'embeddings', 'figures', 'metrics.jsonl',
     'sessions.json']
    >>> train_run(config, None, out, resume=True).touched     # finished: left as it was
    False
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import numpy as np

from dhwt.config.device import resolve_device
from dhwt.config.run import TrainConfig
from dhwt.directories import held, lock
from dhwt.errors import DhwtError
from dhwt.languages import Task, load_language, load_task, write_dataset
from dhwt.languages.dataset import read_dataset
from dhwt.languages.splits import SPLITS, split_of
from dhwt.runs import layout
from dhwt.runs.layout import run_paths
from dhwt.runs.metrics import read_metrics
from dhwt.runs.result import RunResult
from dhwt.runs.run import check_data, check_task, run_task
from dhwt.training.distributed import Parallel
from dhwt.training.group import PER_RUN, group_key
from dhwt.training.resume import check_group_extension, check_resumable, extend, finished
from dhwt.training.trainer import Trainer

PathLike = str | Path


def train_run(config: TrainConfig, task: Task | None, run_dir: PathLike, *,
              resume: bool = False, overwrite: bool = False, inputs: Sequence[object] = (),
              parallel: Parallel | None = None) -> RunResult:
    """Train `config.members.seeds` on `task` into `run_dir` until `config.optim.steps`.

    `task` None: the run's own data (RUN_DIR/data, built now from `config.data.grammar` for a
    fresh run; else the dataset or corpus the config names). Fresh: `run_dir` must not exist
    (or, with `overwrite`, be a dhwt run that holds none of `inputs`, the paths the caller
    reads); it is created with config.toml before any training, and a bad config leaves nothing
    behind. `resume`: continue from the newest checkpoint; the config must equal config.toml but
    may raise `steps` (an extension; see dhwt.training.lr for what each lr schedule does then);
    a finished run is left untouched. An extension, once the checkpoint is restored (before that
    nothing is changed), rewrites config.toml to the new steps and removes the report of the
    steps before, so a run stopped at any point after that is unfinished
    (dhwt.runs.run.is_finished). A run directory is locked while this writes
    (dhwt.directories). `parallel`: this process's place in a torchrun launch and its device
    (dhwt.training.distributed.launch); only rank 0 writes. None: one process, on the device the
    config asks for. A new run records the checksum of its data in its config.toml
    (data_sha256); a resume first refuses data that no longer has the checksum the run recorded
    (dhwt.runs.run.check_data). A task given must be the data the config names, if it names any:
    the data is given once (dhwt.runs.run.check_task).
    """
    return _train([(config, Path(run_dir))], task, resume, overwrite, inputs, parallel)[0]


def train_group(runs: Sequence[tuple[TrainConfig, PathLike]], task: Task | None, *,
                resume: bool = False, overwrite: bool = False, inputs: Sequence[object] = (),
                parallel: Parallel | None = None) -> list[RunResult]:
    """Train `runs` ((config, run_dir) pairs) as one ensemble, each run directory written as if
    it had trained alone (train_run says the rest); one result per run. Their configs may
    differ only in tie_schedule and seeds (dhwt.training.group). A resume continues from the
    newest step every run holds; an extension raises every run to the same steps, as one
    ensemble. A group stopped before every config.toml was rewritten holds runs at the new
    steps and runs at the old: the same call extends it again (a run at the new steps that has
    not finished them counts as one being extended). A group whose runs stand at different
    steps (one extended on its own: finished at the new steps, or configured for more than the
    others) is refused: extend each run on its own."""
    return _train([(c, Path(d)) for c, d in runs], task, resume, overwrite, inputs, parallel)


def _train(runs: list[tuple[TrainConfig, Path]], task: Task | None, resume: bool,
           overwrite: bool, inputs: Sequence[object], parallel: Parallel | None
           ) -> list[RunResult]:
    if resume and overwrite:
        raise DhwtError("--resume continues a run and --overwrite replaces it; give only one")
    if len(runs) > 1:
        keys = {group_key(config) for config, _ in runs}
        if None in keys or len(keys) > 1:
            raise DhwtError("runs trained as one ensemble must agree on everything but "
                            f"{' and '.join(PER_RUN)}, start from their own seeds (no "
                            "init_from) and vary all weights")
    config, run_dir = runs[0]
    saved = [check_resumable(d, c) for c, d in runs] if resume else []
    if resume:  # each run's record of its data is its own (config.toml), whatever `runs` say
        runs = [(c.replace(data_sha256=s.data.data_sha256), d) for (c, d), s in zip(runs, saved)]
        config = runs[0][0]
    named = None if task is None else check_task(config, run_dir, task, fresh=not resume)
    if parallel is None:
        parallel = Parallel(device=resolve_device(config.placement.device))  # before any write
    started, restored = time.perf_counter(), None
    with ExitStack() as stack:
        if resume:
            extended = [c.optim.steps != s.optim.steps for (c, _), s in zip(runs, saved)]
            for _, d in runs:
                stack.enter_context(held(parallel.on_writer(
                    lambda d=d: lock(d, f"run directory {d}"))))
            if any(extended):
                check_group_extension(runs, saved)
            done = [] if any(extended) else [finished(d, s) for (_, d), s in zip(runs, saved)]
            if done and all(r is not None for r in done):
                return done
            if task is None:
                task = named = run_task(config, run_dir)
            for c, d in runs[1:]:  # the data read is the one every run recorded
                check_data(c, d, None if named is None else named.checksum)
            trainer = Trainer(runs, task, parallel)
            for run in trainer.runs:
                if named is not None and run.config.data.data_sha256 is None:
                    run.notes.append(f"note: {run.run_dir} records no checksum of its data "
                                     "(made by an older dhwt), so it cannot be checked to be "
                                     "the data the run was trained on")
            if any(extended):  # once the checkpoints are restored: the extension goes ahead
                restored = partial(_extend_all, runs, saved, parallel)
        else:
            for _, d in runs:
                layout.refuse_existing(d, overwrite, inputs)
            trainer = _create(runs, task, named, overwrite, inputs, parallel, stack)
        start = trainer.run(resume, restored)
        finals = parallel.on_writer(lambda: [_final(r.run_dir, trainer.step)
                                             for r in trainer.runs], share=True)
    seconds = time.perf_counter() - started
    return [RunResult(r.run_dir, trainer.step, final, r.last_checkpoint, seconds, start,
                      notes=tuple(r.notes)) for r, final in zip(trainer.runs, finals)]


def _final(run_dir: Path, step: int) -> list[dict[str, object]]:
    """The metric lines of the run in `run_dir` at `step` (its last)."""
    return [r for r in read_metrics(run_paths(run_dir).metrics) if r["step"] == step]


def _create(runs: list[tuple[TrainConfig, Path]], task: Task | None, named: Task | None,
            overwrite: bool, inputs: Sequence[object], parallel: Parallel, stack: ExitStack
            ) -> Trainer:
    """Create the run directories, locked on `stack`, and the Trainer; built first inside the
    first directory's staging, so that a bad config, grammar or dataset leaves nothing. Each
    config.toml records the checksum of the data (data_sha256): `named`'s, the task of the
    data the config names when a task is given (dhwt.runs.run.check_task)."""
    config, run_dir = runs[0]
    build = task is None and config.data.grammar is not None
    if build and len(runs) > 1:
        raise DhwtError("runs trained as one ensemble need a task or a dataset; build the "
                        "grammar's dataset first (dhwt synth)")
    if task is None and not build:
        task = named = run_task(config, run_dir, fresh=True)
        _check_split(config)
    if named is not None:
        runs = _recorded(runs, named.checksum)

    def fill(staging: Path) -> Trainer:
        if not build:
            return Trainer(runs, task, parallel)
        data = run_paths(staging).data
        write_dataset(load_language(config.data.grammar, config.data.set), data,
                      valid_fraction=config.data.valid_fraction,
                      test_fraction=config.data.test_fraction, seed=config.data.split_seed)
        built = load_task(data, config.data.objective)
        check_data(config, run_dir, built.checksum, fresh=True)  # named as it will be
        recorded = _recorded(runs, built.checksum)
        run_paths(staging).config.write_text(recorded[0][0].to_toml(), encoding="utf-8")
        return Trainer(recorded, built, parallel)

    trainer = None
    for i, (c, d) in enumerate(runs):
        created = parallel.on_writer(lambda c=c, d=d, i=i: layout.create_run_dir(
            d, c.to_toml(), overwrite=overwrite, inputs=inputs, fill=fill if i == 0 else None))
        stack.enter_context(held(created))
        if created is not None and i == 0:
            trainer = created.value
    if build:  # the dataset now lies in RUN_DIR/data (other ranks: once rank 0 made it)
        task = run_task(config, run_dir)
        trainer = Trainer(_recorded(runs, task.checksum), task, parallel)
    elif trainer is None:  # other ranks
        trainer = Trainer(runs, task, parallel)
    return trainer


def _recorded(runs: list[tuple[TrainConfig, Path]], checksum: str | None
              ) -> list[tuple[TrainConfig, Path]]:
    """`runs` with their configs recording `checksum` as the checksum of their data."""
    return runs if checksum is None else [(c.replace(data_sha256=checksum), d) for c, d in runs]


def _check_split(config: TrainConfig) -> None:
    """DhwtError unless the split options a config gives with a dataset (they are recorded as
    how it was split, dhwt.config.run.DataConfig) give the dataset's split."""
    data = config.data
    if data.data is None or data.corpus is not None or data.valid_fraction is None:
        return
    language, split = read_dataset(data.data)
    try:
        same = np.array_equal(split_of(language, data.valid_fraction, data.test_fraction,
                                       data.split_seed), split)
    except DhwtError:
        same = False
    if not same:
        sizes = "/".join(str(int((split == i).sum())) for i in range(len(SPLITS)))
        raise DhwtError(f"valid_fraction {data.valid_fraction}, test_fraction "
                        f"{data.test_fraction} and split_seed {data.split_seed} do not give the "
                        f"split of dataset {data.data} (train/valid/test {sizes} strings); leave "
                        "them out: a dataset keeps the split it was built with")


def _extend_all(runs: list[tuple[TrainConfig, Path]], saved: list[TrainConfig],
                parallel: Parallel) -> None:
    """Extend each of `runs` (its config.toml: `saved`) to the steps its config asks
    (dhwt.training.resume.extend), on the writing process."""
    for (c, d), s in zip(runs, saved):
        parallel.on_writer(lambda c=c, d=d, s=s: extend(d, s.replace(steps=c.optim.steps)))
