"""Training recipes: `train`, the one entry that trains a run (or several as one ensemble),
fresh or resumed, and writes each run's figure and report; `train_command`, `dhwt train`'s flags
and files resolved into it.

`dhwt train`: precedence TrainConfig defaults < `--config FILE.toml` < flags. A `--grammar`,
`--data` or `--corpus` flag replaces the file's data source (so the file may name one and the
flag another; `--corpus wikitext-2 --data PATH` keeps both flags). WikiText-2 found through the
environment is recorded as the run's `data` (where it lies; dhwt.text.corpus). Text corpora
(`--corpus`, `--tokenizer`, `--seq-len`) are tokenized through the token-id cache
(dhwt.text.text_task).
Data sources (in flags or the file: grammar, corpus, data) resolve by dhwt.config.sources (a
built-in name stays one; a path is taken from the working directory and made absolute), as does
init_from's run. With `--grammar` the dataset is
built into RUN_DIR/data in the same all-or-nothing step that creates the run directory, so a bad
grammar, dataset or option leaves nothing behind.

`--resume` continues RUN_DIR as its config.toml says; flags may repeat its values but not change
them, except `--device` (a run may continue on another device; dhwt.training.trainer says what
carries over), `--tensorboard` (where it also logs) and `--steps` upwards (an extension), and
`--config` is refused (the run's own config.toml is the config).

Under torchrun every process runs this; rank 0 creates RUN_DIR (the others wait for it) and is
the only one to write (dhwt.training.distributed).

Examples:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from dhwt.commands import train
    >>> from dhwt.config import TrainConfig
    >>> out = Path(tempfile.mkdtemp()) / "run"
    >>> config = TrainConfig(grammar="parity", seeds=[1, 2], steps=3, eval_every=3)
    >>> result = train(config, None, out)      # builds out/data from the grammar, then trains
    >>> result.step, sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    (3, ['checkpoints', 'config.toml', 'data', 'embeddings', 'figures', 'metrics.jsonl',
         'report.html', 'report.md', 'sessions.json'])
    >>> train(config, None, out, resume=True).touched     # finished: left as it was
    False
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import overload

import numpy as np

from dhwt.checks import split_init_from
from dhwt.config.device import resolve_device
from dhwt.config.run import SOURCE_SETTINGS, SOURCES, TrainConfig, data_keys
from dhwt.config.sources import resolve_source
from dhwt.directories import atomic_write_bytes, held, lock
from dhwt.errors import DhwtError, Interrupted
from dhwt.languages import Task, load_language, load_task, write_dataset
from dhwt.languages.dataset import read_dataset
from dhwt.languages.splits import SPLITS, split_of
from dhwt.report.run_report import FEW, split_line, write_run_report
from dhwt.runs import layout
from dhwt.runs.checkpoints import latest_checkpoint
from dhwt.runs.history import check_history
from dhwt.runs.layout import run_paths
from dhwt.runs.metrics import read_metrics
from dhwt.runs.result import RunResult
from dhwt.runs.run import check_data, check_task, is_finished, run_task
from dhwt.text.corpus import WIKITEXT2, wikitext2_location
from dhwt.training.distributed import Parallel, launch
from dhwt.training.group import PER_RUN, group_key
from dhwt.training.trainer import Trainer

PathLike = str | Path


@overload
def train(config: TrainConfig, task: Task | None, run_dir: PathLike, *, resume: bool = False,
          overwrite: bool = False, inputs: Sequence[object] = (),
          parallel: Parallel | None = None) -> RunResult: ...
@overload
def train(config: Sequence[tuple[TrainConfig, PathLike]], task: Task | None, *,
          resume: bool = False, overwrite: bool = False, inputs: Sequence[object] = (),
          parallel: Parallel | None = None) -> list[RunResult]: ...
def train(config, task, run_dir=None, *, resume=False, overwrite=False, inputs=(),
          parallel=None):
    """Train `config.members.seeds` on `task` into `run_dir` until `config.optim.steps`, then write the run's
    figure and report.md; or, given (config, run_dir) pairs instead, train those runs as one
    ensemble (their configs may differ only in tie_schedule and seeds; dhwt.training.group),
    each run directory written as if it had trained alone, and return one result per run.

    `task` None: the runs' own data (RUN_DIR/data, built now from `config.data.grammar` for a fresh
    run; else the dataset or corpus the config names). Fresh: each run directory must not exist
    (or, with `overwrite`, be a dhwt run that holds none of `inputs`, the paths the caller
    reads); it is created with config.toml before any training, and a bad config leaves nothing
    behind. `resume`: continue from the newest checkpoint (a group's: the newest step every run
    holds); the config must equal config.toml but may raise `steps` (an extension; see
    dhwt.training.lr for what each lr schedule does then), a group's every run to the same
    steps, extended as one ensemble; a finished run is left untouched. An extension, once the
    checkpoints are restored (before that nothing is changed), rewrites each run's config.toml
    to the new steps and removes its report (all of the group's runs), so a run stopped at any
    point after that is unfinished (dhwt.runs.run.is_finished).
    A group stopped before every config.toml was rewritten holds runs at the new steps and runs
    at the old: the same call extends it again (a run at the new steps that has not finished
    them counts as one being extended) from the newest step every run holds. A group whose runs
    stand at different steps (one extended on its own: finished at the new steps, or configured
    for more than the others) is refused: extend each run on its own. A run directory is locked
    while this writes (dhwt.directories). `parallel`: this process's place in a torchrun launch
    and its device (dhwt.training.distributed.launch); only rank 0 writes. None: one process,
    on the device the config asks for. A new run records the checksum of its data in its
    config.toml (data_sha256); a resume first refuses data that no longer has the checksum each
    run recorded (dhwt.runs.run.check_data). A task given must be the data the config names, if it
    names any: the data is given once (dhwt.runs.run.check_task).
    """
    if isinstance(config, TrainConfig):
        if run_dir is None:
            raise TypeError("train(config, task, run_dir): give the run directory")
        return _train([(config, Path(run_dir))], task, resume, overwrite, inputs, parallel)[0]
    if run_dir is not None:
        raise TypeError("train(runs, task): each run's directory comes with its config")
    return _train([(c, Path(d)) for c, d in config], task, resume, overwrite, inputs, parallel)


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
                _check_group_extension(runs, saved)
            done = [] if any(extended) else [_finished(d, s) for (_, d), s in zip(runs, saved)]
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
        finals = _reports(trainer, parallel)
    seconds = time.perf_counter() - started
    return [RunResult(r.run_dir, trainer.step, final, r.last_checkpoint, seconds, start,
                      notes=tuple(r.notes)) for r, final in zip(trainer.runs, finals)]


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
    _note_split(trainer)
    return trainer


def _recorded(runs: list[tuple[TrainConfig, Path]], checksum: str | None
              ) -> list[tuple[TrainConfig, Path]]:
    """`runs` with their configs recording `checksum` as the checksum of their data."""
    return runs if checksum is None else [(c.replace(data_sha256=checksum), d) for c, d in runs]


def _note_split(trainer: Trainer) -> None:
    """Note in each run's result when its training split holds at most half of the language
    (dhwt.report.run_report.split_line), which the report's exact fit covers whole."""
    line = split_line(trainer.task, FEW)
    if line is not None:
        for run in trainer.runs:
            run.notes.append(f"note: {line}")


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


def _reports(trainer: Trainer, parallel: Parallel) -> list[list[dict[str, object]]]:
    """Each run's figure and report.md (rank 0); the metric lines of their last step."""
    def write() -> list[list[dict[str, object]]]:
        return [write_run_report(r.run_dir, r.config, trainer.task) for r in trainer.runs]

    dirs = ", ".join(str(r.run_dir) for r in trainer.runs)
    try:
        finals = parallel.on_writer(write, share=True)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted at step {trainer.step} while writing the report of "
                          f"{dirs}; training is done and --resume writes it") from None
    except OSError as exc:
        raise DhwtError(f"cannot write the report of {dirs}: {exc.strerror or exc}; training is "
                        "done and --resume writes it") from None
    assert finals is not None
    return finals


def check_resumable(run_dir: Path, config: TrainConfig) -> TrainConfig:
    """The run's saved config; DhwtError unless `run_dir` is a run whose config.toml equals
    `config` in every field but where it runs (TrainConfig.identity) and steps, which may only
    grow (an extension)."""
    saved_path = run_paths(run_dir).config
    if not saved_path.is_file():
        raise DhwtError(f"cannot resume {run_dir}: it has no {layout.CONFIG} (not a run directory)")
    saved = TrainConfig.from_toml(saved_path)
    _check_extension(run_dir, config.optim.steps, saved)
    wanted, have = config.resume_key(), saved.resume_key()
    for key, value in wanted.items():
        if have[key] != value:
            raise DhwtError(f"cannot resume {run_dir} with {key} = {value!r}: the run was "
                            f"configured with {have[key]!r} (see {saved_path})")
    return saved


def _check_extension(run_dir: Path, steps: object, saved: TrainConfig) -> None:
    """DhwtError if `steps` (an int: a resume's steps) would shorten the run `saved` configures."""
    if isinstance(steps, int) and not isinstance(steps, bool) and steps < saved.optim.steps:
        raise DhwtError(f"cannot resume {run_dir} with steps = {steps}: the run is configured "
                        f"for {saved.optim.steps} steps, and --steps may extend it, not shorten "
                        "it")


def _check_group_extension(runs: list[tuple[TrainConfig, Path]], saved: list[TrainConfig]
                           ) -> None:
    """DhwtError unless extending the group `runs` (their config.toml: `saved`) extends every
    run from one step: the runs extended (whose config.toml has fewer steps than asked) must be
    configured for the same steps, and a run whose config.toml has the new steps already must
    not have finished them (an extension of the group stopped before it rewrote every
    config.toml leaves such a run)."""
    extended = [(d, s.optim.steps) for (c, d), s in zip(runs, saved)
                if s.optim.steps < c.optim.steps]
    short, steps = extended[0]
    for (config, run_dir), s in zip(runs, saved):
        if s.optim.steps == config.optim.steps and is_finished(run_dir):
            raise DhwtError(f"cannot extend {short} as part of a group: {run_dir} has finished "
                            f"its {config.optim.steps} steps already; resume {short} on its own "
                            "with --steps")
    for run_dir, other in extended[1:]:
        if other != steps:
            raise DhwtError(f"cannot extend {short} and {run_dir} as one group: they are "
                            f"configured for {steps} and {other} steps; resume each on its own "
                            "with --steps")


def _extend_all(runs: list[tuple[TrainConfig, Path]], saved: list[TrainConfig],
                parallel: Parallel) -> None:
    """Extend each of `runs` (its config.toml: `saved`) to the steps its config asks (_extend),
    on the writing process."""
    for (c, d), s in zip(runs, saved):
        parallel.on_writer(lambda c=c, d=d, s=s: _extend(d, s.replace(steps=c.optim.steps)))


def _extend(run_dir: Path, config: TrainConfig) -> None:
    """Record that the run in `run_dir` now trains to `config`'s steps (its config.toml), and
    remove the report of the steps before: the run is unfinished until the new report is
    written (dhwt.runs.run.is_finished), even if stopped after its new last checkpoint."""
    atomic_write_bytes(run_paths(run_dir).config, config.to_toml().encode())
    run_paths(run_dir).report.unlink(missing_ok=True)


def _finished(run_dir: Path, saved: TrainConfig) -> RunResult | None:
    """The result of a run that has finished (its report written after the checkpoint of its
    last step), read from disk; None if it has not, or if its record lost the snapshot of
    its last step (the trainer writes it again); DhwtError if it lost more
    (dhwt.runs.history)."""
    if not is_finished(run_dir):
        return None
    path, _ = latest_checkpoint(run_paths(run_dir).checkpoints)  # a damaged one is an error
    if check_history(run_dir, saved, saved.optim.steps) is not None:
        return None
    final = [r for r in read_metrics(run_paths(run_dir).metrics) if r["step"] == saved.optim.steps]
    return RunResult(run_dir, saved.optim.steps, final, path, 0.0, start=saved.optim.steps, touched=False)


def train_command(options: dict[str, object], *, config_file: str | None, out: str,
                  overwrite: bool = False, resume: bool = False) -> RunResult | None:
    """Run `dhwt train`. `options` holds only the flags the user gave (TrainConfig field names).
    Returns the result on rank 0 (the only process of a plain launch) and None on the others."""
    run_dir = Path(out)
    config = _resolve_config(options, config_file, run_dir, overwrite, resume)
    with launch(config.placement.device) as parallel:  # its backend follows the device
        result = train(config, None, run_dir, resume=resume, overwrite=overwrite,
                       inputs=(config_file, *_inputs(config)), parallel=parallel)
    return result if parallel.writes else None


def _resolve_config(options: dict[str, object], config_file: str | None, run_dir: Path,
                    overwrite: bool, resume: bool) -> TrainConfig:
    """The run's config from the flags, `--config` and (with --resume) RUN_DIR's config.toml,
    whose device the flags may change; this only reads."""
    if resume and overwrite:
        raise DhwtError("--resume continues a run and --overwrite replaces it; give only one")
    if resume:
        if config_file is not None:
            raise DhwtError(f"--config is for new runs; --resume uses {run_paths(run_dir).config}")
        saved = run_paths(run_dir).config
        if not run_dir.exists():
            raise DhwtError(f"cannot resume {run_dir}: no such directory")
        if not saved.is_file():
            raise DhwtError(f"cannot resume {run_dir}: it has no {layout.CONFIG} (not a run "
                            "directory)")
        config = TrainConfig.from_toml(saved)
        _check_extension(run_dir, options.get("steps"), config)  # before its tie switches fail
        return TrainConfig.from_dict({**config.to_dict(), **_absolute(options)},
                                     source="the flags")
    values = TrainConfig.toml_values(config_file) if config_file is not None else {}
    if {*SOURCES, *data_keys("grammar", "split")} & set(options):
        values.pop("data_sha256", None)  # the file's checksum is of the data it names
    if set(SOURCES) & set(options):
        for key in SOURCE_SETTINGS:
            if key not in options:
                values.pop(key, None)
    config = TrainConfig.from_dict(_absolute({**values, **options}), source="the flags")
    if config.data.grammar is None and config.data.data is None and config.data.corpus is None:
        raise DhwtError("no data: give --grammar NAME|PATH (built into RUN_DIR/data), --data DIR "
                        "(a dataset from `dhwt synth`) or --corpus wikitext-2|DIR with --tokenizer "
                        "and --seq-len")
    if config.data.corpus == WIKITEXT2 and config.data.data is None:
        found = wikitext2_location()  # recorded: the run says which copy it read
        if found is not None:
            config = config.replace(data=str(found))
    return config


def _inputs(config: TrainConfig) -> list[object]:
    """The paths a run reads (its data, grammar file, corpus, init_from run), which --overwrite
    must never delete."""
    paths: list[object] = [config.data.data, config.data.corpus, config.data.grammar]
    if config.members.init_from is not None:
        paths.append(split_init_from(config.members.init_from)[0])
    return [p for p in paths if p is not None and Path(str(p)).exists()]


def _absolute(options: dict[str, object]) -> dict[str, object]:
    """Settings with their data sources resolved (dhwt.config.sources) and `init_from`'s run
    made an absolute path."""
    options = dict(options)
    for key in SOURCES:
        if isinstance(options.get(key), str):
            options[key] = resolve_source(key, options[key])
    if isinstance(options.get("init_from"), str):
        run, step = split_init_from(str(options["init_from"]))
        options["init_from"] = str(Path(run).resolve()) + ("" if step is None else f"@{step}")
    return options
