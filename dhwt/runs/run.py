"""A run directory read back: its config, metrics, embedding snapshots, and the trained model
rebuilt from a checkpoint alone. Analysis, reports and the theorems' checks read runs through
`load_run`, never through the trainer.

Examples:
    A run directory is what `dhwt train --out RUN` writes. To stay fast, this one is written with
    the writers the trainer uses (a config, two embedding snapshots, a checkpoint), untrained:

    >>> import tempfile
    >>> from pathlib import Path
    >>> from dhwt.config import TrainConfig
    >>> from dhwt.models import ModelConfig, build_model
    >>> from dhwt.runs import layout, load_run
    >>> from dhwt.runs.checkpoints import save_checkpoint
    >>> from dhwt.runs.run import model_args
    >>> from dhwt.runs.snapshots import save_snapshot
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = Path(tmp.name) / "untied"
    >>> config = TrainConfig(grammar="parity", tie_schedule="untied", steps=10000, seeds=[42])
    >>> layout.create_run_dir(path, config.to_toml()).release()
    >>> model = build_model(ModelConfig(vocab_size=7, max_len=8), config.members.seeds, tied=False)
    >>> vocab = ("0a", "0b", "1a", "1b", "EVEN", "ODD", "[MASK]")
    >>> for step in (0, 10000):
    ...     _ = save_snapshot(path / layout.EMBEDDINGS, step, model.embeddings.input_weight,
    ...                       model.embeddings.output_weight, tied=False, seeds=[42], vocab=vocab)
    >>> _ = save_checkpoint(path / layout.CHECKPOINTS, 10000,
    ...                     {"model": model.state_dict(), "model_args": model_args(model.config)})

    Read back:

    >>> run = load_run(path)
    >>> str(run.config.tying.tie_schedule), run.steps
    ('untied', [0, 10000])
    >>> run.embeddings().input.shape  # (members, vocabulary, d_model) at the newest step
    (1, 7, 4)
    >>> run.model().embeddings  # rebuilt from the checkpoint, in its tying state
    TiedEmbeddings(members=1, vocab=7, d=4, tied=False)
    >>> run.vocab == vocab, run.tie_events, run.finished  # no report.md: training went on
    (True, (), False)
    >>> run.figures.relative_to(path), run.token_counts_file.relative_to(path)
    (PosixPath('figures'), PosixPath('token_counts.npy'))
    >>> tmp.cleanup()
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from dhwt.config import TrainConfig
from dhwt.config.schedule import TieEvent
from dhwt.errors import DhwtError, brief
from dhwt.models import EnsembleLM, ModelConfig, build_model
from dhwt.runs import layout
from dhwt.runs.checkpoints import checkpoint_path, checkpoint_step, latest_checkpoint, \
    list_checkpoints, load_checkpoint
from dhwt.runs.metrics import read_metrics
from dhwt.runs.sessions import ended_at, read_sessions
from dhwt.runs.snapshots import Snapshot, check_snapshot, read_snapshot, snapshot_files
from dhwt.text.twins import TWIN_DEFAULTS


def load_run(path: str | Path) -> Run:
    """The run directory at `path`; DhwtError if it is not one (no config.toml). See the module
    docstring for an example.

    Examples:
        >>> load_run("no-such-run")
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: no-such-run is not a dhwt run directory (no config.toml)
    """
    path = Path(path)
    if not is_run(path):
        raise DhwtError(f"{path} is not a dhwt run directory (no {layout.CONFIG})")
    return Run(path, TrainConfig.from_toml(layout.run_paths(path).config))


def is_run(path: str | Path) -> bool:
    """Whether `path` is a run directory: it holds the config.toml a run writes first."""
    return layout.run_paths(path).config.is_file()


@dataclass(frozen=True)
class Run:
    """A run directory on disk, read only."""

    path: Path
    config: TrainConfig

    @property
    def paths(self) -> layout.RunPaths:
        """The places inside the run (dhwt.runs.layout.RunPaths)."""
        return layout.run_paths(self.path)

    @property
    def steps(self) -> list[int]:
        """The steps of the embedding snapshots, oldest first."""
        return list(snapshot_files(self.path))

    @property
    def snapshot_files(self) -> dict[int, Path]:
        """The embedding snapshot files by step, oldest first (dhwt.runs.snapshots)."""
        return snapshot_files(self.path)

    def embeddings(self, step: int | None = None) -> Snapshot:
        """The input and output matrices of every member at `step` (default: the newest)."""
        files = snapshot_files(self.path)
        if step is None:
            return read_snapshot(list(files.values())[-1])
        if step not in files:
            raise DhwtError(f"{self.path} has no snapshot of step {step}; its snapshots are at "
                            f"steps {_ranges(list(files))}")
        return read_snapshot(files[step])

    def snapshots(self) -> list[Snapshot]:
        """Every embedding snapshot, oldest first."""
        return [read_snapshot(path) for path in snapshot_files(self.path).values()]

    @cached_property
    def vocab(self) -> tuple[str, ...]:
        """The vocabulary of the snapshots (index = token id), read from the oldest one's header."""
        return check_snapshot(next(iter(snapshot_files(self.path).values()))).vocab

    def metrics(self) -> list[dict[str, object]]:
        """The lines of metrics.jsonl, parsed."""
        return read_metrics(self.paths.metrics)

    @property
    def tie_events(self) -> tuple[TieEvent, ...]:
        """The switches of the run's tie schedule (dhwt.config.schedule), in step order."""
        return self.config.tying.tie_schedule.events

    @property
    def token_counts_file(self) -> Path:
        """RUN_DIR/token_counts.npy, the training count per token id, which the trainer writes
        for tasks that count their training tokens (text); other runs have none."""
        return self.paths.token_counts

    @property
    def twins_file(self) -> Path:
        """RUN_DIR/twins.json, the planted twins and their relations (dhwt.text.twins),
        which the trainer writes for a corpus with twins planted; other runs have none."""
        return self.paths.twins

    @property
    def figures(self) -> Path:
        """The folder of the run's figures (the end-of-run report's, and an analysis's)."""
        return self.paths.figures

    @property
    def training_figure(self) -> Path:
        """figures/training.png: the training curves the run's report shows."""
        return self.paths.figure

    @property
    def report(self) -> Path:
        """The run's report.md, written when training ends."""
        return self.paths.report

    @property
    def finished(self) -> bool:
        """Whether training finished (see `is_finished`)."""
        return is_finished(self.path)

    @property
    def checkpoint_steps(self) -> list[int]:
        """The steps of the checkpoints kept, oldest first."""
        return [checkpoint_step(p) for p in list_checkpoints(self.paths.checkpoints)]

    def model(self, step: int | None = None) -> EnsembleLM:
        """The trained ensemble at the checkpoint of `step` (default: the newest), on the CPU,
        with its tying state and in its saved precision (float64 after a population fit),
        rebuilt from the checkpoint alone (its `model_args`; a checkpoint
        written before they were saved is rebuilt from the run's config and data)."""
        directory = self.paths.checkpoints
        if step is None:
            _, state = latest_checkpoint(directory)
        elif step in self.checkpoint_steps:
            state = load_checkpoint(checkpoint_path(directory, step))
        else:
            raise DhwtError(f"{self.path} keeps no checkpoint of step {step}; it keeps steps "
                            f"{_ranges(self.checkpoint_steps)}")
        args = state.get("model_args")
        config = ModelConfig(**args) if args is not None else self.model_config()
        model = build_model(config, self.config.members.seeds, tied=True)
        model.to(next(v.dtype for v in state["model"].values() if v.is_floating_point()))
        model.load_state_dict(state["model"])  # adopts the saved tying state
        return model

    def model_config(self) -> ModelConfig:
        """The ModelConfig the run trains: its config's architecture for its task's vocabulary
        and length (what a checkpoint saves as `model_args`)."""
        return self.config.model_for(len(self.task.vocab), self.task.seq_len)

    @cached_property
    def task(self):  # noqa: ANN201 (a dhwt.languages Task; imported lazily: text needs tokenizers)
        """The data the run trained on: RUN/data for a grammar-built run, the dataset
        `config.data.data`, or the text corpus `config.data.corpus`; DhwtError if it changed
        since (the checksum config.toml records, check_data)."""
        return run_task(self.config, self.path)

    @property
    def dataset(self) -> Path | None:
        """The synthetic language's dataset directory the run trained on: RUN_DIR/data for a
        grammar-built run, else the dataset `config.data.data` when it holds a language's
        truth.json; None for other data (a text corpus, whose `data` is where it lies)."""
        if self.config.data.grammar is not None:
            data = self.paths.data
        elif self.config.data.data is not None and \
                (Path(str(self.config.data.data)) / "truth.json").exists():
            data = Path(str(self.config.data.data))
        else:
            return None
        if not data.is_dir():
            raise DhwtError(f"the dataset of {self.path} ({data}) is missing")
        return data


def is_finished(path: str | Path) -> bool:
    """Whether `path` holds a run whose training finished (a study, an experiment or `dhwt train
    --resume` leaves it as it is): its record says so (sessions.json: its newest session ended
    at the last step its config.toml trains to, `steps`; dhwt.runs.sessions) and its newest
    checkpoint is of that step. A run made before that record (no session in it) finished when
    its report.md, written last, exists. A run stopped while `dhwt train --resume --steps M`
    extended it has not finished: the extension raises config.toml's steps to M before it
    trains (and removes the report of the steps before)."""
    paths = layout.run_paths(path)
    if not paths.config.is_file():
        return False
    steps = TrainConfig.from_toml(paths.config).optim.steps
    if read_sessions(paths.sessions):
        if ended_at(paths.sessions) != steps:
            return False
    elif not paths.report.is_file():
        return False
    checkpoints = list_checkpoints(paths.checkpoints)
    return bool(checkpoints) and checkpoint_step(checkpoints[-1]) == steps


def run_task(config: TrainConfig, run_dir: Path, *, fresh: bool = False):  # noqa: ANN201
    """The Task of a run's config (see Run.task): RUN_DIR/data for a grammar-built run, the text
    corpus `config.data.corpus`, else the dataset `config.data.data`; DhwtError if it is not the
    data the config's data_sha256 names (check_data; `fresh`: a run not yet created)."""
    from dhwt.languages import load_task
    from dhwt.languages.dataset import dataset_checksum

    if config.data.corpus is not None:
        task = load_config_text(config)
        check_data(config, run_dir, task.checksum, fresh=fresh)
        return task
    data = _dataset_dir(config, run_dir)
    check_data(config, run_dir, dataset_checksum(data), fresh=fresh)  # before it is read
    return load_task(data, config.data.objective)


def data_checksum(config: TrainConfig, run_dir: Path) -> str | None:
    """The checksum (dhwt.checksums) of the data `config` names for the run in `run_dir`: its
    dataset's files or its corpus' texts; None if it names none."""
    from dhwt.languages.dataset import dataset_checksum
    from dhwt.text.corpus import find_corpus

    data = config.data
    if data.corpus is not None:
        return find_corpus(data.corpus, data.data).checksum
    if data.grammar is None and data.data is None:
        return None
    return dataset_checksum(_dataset_dir(config, run_dir))


def check_data(config: TrainConfig, run_dir: Path, checksum: str | None, *, fresh: bool = False,
               remedy: str = "put back the data it was trained on, or train a new run on the "
                             "changed data") -> None:
    """DhwtError unless `checksum`, that of the data `config` names (data_checksum), is the one
    its data_sha256 records (no record, or no checksum: nothing to check). The run in `run_dir`
    recorded it when it was created, so its data changed since (`remedy` says what to do); a
    `fresh` run's config gave it."""
    recorded = config.data.data_sha256
    if recorded is None or checksum is None or checksum == recorded:
        return
    where = _data_name(config, run_dir)
    if fresh:
        raise DhwtError(f"{where} is not the data that data_sha256 in the config names (its "
                        f"sha256 is {checksum[:16]}..., the config's {recorded[:16]}...); give "
                        "that data, or leave data_sha256 out to train on this one")
    raise DhwtError(f"{where} changed since {run_dir} was trained on it (its sha256 is "
                    f"{checksum[:16]}..., the run recorded {recorded[:16]}... in "
                    f"{layout.run_paths(run_dir).config}); {remedy}")


def _data_name(config: TrainConfig, run_dir: Path) -> str:
    """The data `config` names for the run in `run_dir`, for a message: `dataset PATH` or
    `corpus NAME` (WikiText-2 with where it lies)."""
    data = config.data
    if data.corpus is not None:
        return f"corpus {data.corpus}" + (f" ({data.data})" if data.data is not None else "")
    return f"dataset {_dataset_path(config, run_dir)}"


def _dataset_path(config: TrainConfig, run_dir: Path) -> Path:
    """The dataset directory of a run's config: RUN_DIR/data for a grammar, else its data."""
    return (layout.run_paths(run_dir).data if config.data.grammar is not None
            else Path(str(config.data.data)))


def _dataset_dir(config: TrainConfig, run_dir: Path) -> Path:
    """_dataset_path; DhwtError if it is not a directory."""
    data = _dataset_path(config, run_dir)
    if not data.is_dir():
        problem = "is not a directory" if data.exists() else "does not exist"
        raise DhwtError(f"dataset directory {data} {problem}")
    return data


def check_task(config: TrainConfig, run_dir: Path, task, *,  # noqa: ANN001, ANN201 (Tasks)
               fresh: bool):
    """The task of the data `config` names (run_task; None if it names none); DhwtError unless
    `task`, given to train a run, is that data: the trainer
    uses the task, while the run's report, `--resume`, `dhwt analyze` and `Run.task` read the
    config's data back (run_task), so the two must be one data set. A config that names no data
    (grammar, data and corpus unset) leaves the task as the run's only data. The contents are
    compared, not paths: objective, vocabulary, sequence length, then the language's spec and
    split (a synthetic dataset) or the training token counts and evaluation windows (a text
    corpus). A grammar is built into RUN_DIR/data only when no task is given, so a `fresh` run
    (not a resume) with a grammar and a task is refused."""
    data = config.data
    if data.grammar is None and data.data is None and data.corpus is None:
        return None
    once = "give the data once: no task (the config's data is read) or a config that names "
    if data.grammar is not None and (fresh or not (run_dir / layout.DATA).is_dir()):
        raise DhwtError(f"the config names grammar {data.grammar!r}, which is built into "
                        f"{run_dir / layout.DATA} only when no task is given; {once}the task's "
                        "dataset directory (data) or no data")
    named = (f"corpus {data.corpus!r} with tokenizer {data.tokenizer}" if data.corpus else
             f"grammar {data.grammar!r} ({run_dir / layout.DATA})" if data.grammar else
             f"data {data.data}")
    if task.objective != data.objective:
        raise DhwtError(f"the task given is not the {named} the config names: its objective is "
                        f"{task.objective!r}, the config's {data.objective!r}; {once}the task's "
                        "data or none")
    found = run_task(config, run_dir, fresh=fresh)
    differs = _difference(task, found)
    if differs is not None:
        raise DhwtError(f"the task given is not the {named} the config names: its {differs}; "
                        f"{once}the task's data or none")
    return found


def _difference(given, named) -> str | None:  # noqa: ANN001 (Tasks or TextTasks)
    """What differs between two tasks of one objective, in words, or None."""
    from dhwt.languages import Task
    from dhwt.languages.splits import SPLITS

    synthetic = isinstance(given, Task)
    if synthetic != isinstance(named, Task):
        kinds = ("a synthetic dataset", "a text corpus")[::1 if synthetic else -1]
        return f"data is {kinds[0]}, the config's {kinds[1]}"
    if given.vocab != named.vocab:
        return (f"vocabulary is {brief(given.vocab)} ({len(given.vocab):,} tokens), the "
                f"config's {brief(named.vocab)} ({len(named.vocab):,})")
    if given.seq_len != named.seq_len:
        return f"sequence length is {given.seq_len}, the config's {named.seq_len}"
    if synthetic and given.language.spec != named.language.spec:
        return (f"language {given.language.name!r} has another spec than the config's "
                f"{named.language.name!r}")
    if synthetic and any(not torch.equal(given.indices(s), named.indices(s)) for s in SPLITS):
        counts = ["/".join(str(t.n_strings(s)) for s in SPLITS) for t in (given, named)]
        if counts[0] == counts[1]:
            return f"split differs (other strings in train/valid/test, {counts[0]} in both)"
        return (f"split differs (train/valid/test strings {counts[0]}, the config's "
                f"{counts[1]})")
    if not synthetic and not np.array_equal(given.token_counts(), named.token_counts()):
        return "training tokens differ (other counts of the same vocabulary)"
    if not synthetic and any(given.n_strings(s) != named.n_strings(s) for s in SPLITS):
        counts = ["/".join(str(t.n_strings(s)) for s in SPLITS) for t in (given, named)]
        return (f"evaluation windows differ (train/valid/test {counts[0]}, the config's "
                f"{counts[1]})")
    return None


def load_config_text(config: TrainConfig):  # noqa: ANN201 (see Run.task)
    """The text Task a config's corpus, tokenizer, seq_len, eval_windows (and data: where
    WikiText-2 lies), objective, masking and twins describe."""
    from dhwt.text.text_task import load_text_task

    data = config.data
    if data.corpus is None or data.tokenizer is None or data.seq_len is None:
        raise DhwtError("the config names no text corpus (corpus, tokenizer and seq_len)")
    masking = {} if data.objective == "clm" else {"mask_rate": data.mask_rate,
                                                  "mask_rule": data.mask_rule}
    planting = {} if data.twins is None else {
        key: getattr(data, key) for key in ("twins", *TWIN_DEFAULTS)}
    return load_text_task(data.corpus, data.tokenizer, data.seq_len, source=data.data,
                          eval_windows=data.eval_windows, objective=data.objective, **masking,
                          **planting)


def model_args(config: ModelConfig) -> dict[str, object]:
    """What a checkpoint saves of the model's configuration (ModelConfig(**args) rebuilds it)."""
    return asdict(config)


def _ranges(steps: list[int]) -> str:
    """A few steps for a message."""
    return ", ".join(map(str, steps[:5])) + (f", ... ({len(steps)} in all)" if len(steps) > 5
                                            else "") if steps else "none"
