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
    >>> tmp.cleanup()
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

from dhwt.config import TrainConfig
from dhwt.errors import DhwtError
from dhwt.models import EnsembleLM, ModelConfig, build_model
from dhwt.runs import layout
from dhwt.runs.checkpoints import checkpoint_path, checkpoint_step, latest_checkpoint, \
    list_checkpoints, load_checkpoint
from dhwt.runs.metrics import read_metrics
from dhwt.runs.snapshots import Snapshot, read_snapshot, snapshot_paths, snapshot_step


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
    if not (path / layout.CONFIG).is_file():
        raise DhwtError(f"{path} is not a dhwt run directory (no {layout.CONFIG})")
    return Run(path, TrainConfig.from_toml(path / layout.CONFIG))


@dataclass(frozen=True)
class Run:
    """A run directory on disk, read only."""

    path: Path
    config: TrainConfig

    @property
    def steps(self) -> list[int]:
        """The steps of the embedding snapshots, oldest first."""
        return [snapshot_step(p) for p in snapshot_paths(self.path)]

    def embeddings(self, step: int | None = None) -> Snapshot:
        """The input and output matrices of every member at `step` (default: the newest)."""
        paths = snapshot_paths(self.path)
        if step is None:
            return read_snapshot(paths[-1])
        found = [p for p in paths if snapshot_step(p) == step]
        if not found:
            raise DhwtError(f"{self.path} has no snapshot of step {step}; its snapshots are at "
                            f"steps {_ranges(self.steps)}")
        return read_snapshot(found[0])

    def metrics(self) -> list[dict[str, object]]:
        """The lines of metrics.jsonl, parsed."""
        return read_metrics(self.path / layout.METRICS)

    @property
    def checkpoint_steps(self) -> list[int]:
        """The steps of the checkpoints kept, oldest first."""
        return [checkpoint_step(p) for p in list_checkpoints(self.path / layout.CHECKPOINTS)]

    def model(self, step: int | None = None) -> EnsembleLM:
        """The trained ensemble at the checkpoint of `step` (default: the newest), on the CPU,
        with its tying state, rebuilt from the checkpoint alone (its `model_args`; a checkpoint
        written before they were saved is rebuilt from the run's config and data)."""
        directory = self.path / layout.CHECKPOINTS
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
        model.load_state_dict(state["model"])  # adopts the saved tying state
        return model

    def model_config(self) -> ModelConfig:
        """The ModelConfig the run trains: its config's architecture for its task's vocabulary
        and length (what a checkpoint saves as `model_args`)."""
        return self.config.model_for(len(self.task.vocab), self.task.seq_len)

    @cached_property
    def task(self):  # noqa: ANN201 (a dhwt.languages Task; imported lazily: text needs tokenizers)
        """The data the run trained on: RUN/data for a grammar-built run, the dataset
        `config.data.data`, or the text corpus `config.data.corpus`."""
        return run_task(self.config, self.path)

    @property
    def dataset(self) -> Path | None:
        """The synthetic dataset directory the run trained on, or None (a text corpus)."""
        if self.config.data.corpus is not None:
            return None
        data = (self.path / layout.DATA if self.config.data.grammar is not None
                else Path(str(self.config.data.data)))
        if not data.is_dir():
            raise DhwtError(f"the dataset of {self.path} ({data}) is missing")
        return data


def run_task(config: TrainConfig, run_dir: Path):  # noqa: ANN201 (see Run.task)
    """The Task of a run's config: RUN_DIR/data for a grammar-built run, the text corpus
    `config.data.corpus`, else the dataset `config.data.data`."""
    from dhwt.languages import load_task

    if config.data.corpus is not None:
        return load_config_text(config)
    data = run_dir / layout.DATA if config.data.grammar is not None else Path(str(config.data.data))
    if not data.is_dir():
        problem = "is not a directory" if data.exists() else "does not exist"
        raise DhwtError(f"dataset directory {data} {problem}")
    return load_task(data, config.data.objective)


def load_config_text(config: TrainConfig):  # noqa: ANN201 (see Run.task)
    """The text Task a config's corpus, tokenizer, seq_len, eval_windows (and data: where
    WikiText-2 lies) describe."""
    from dhwt.languages.text_task import load_text_task

    assert config.data.corpus is not None and config.data.tokenizer is not None and config.data.seq_len
    return load_text_task(config.data.corpus, config.data.tokenizer, config.data.seq_len, source=config.data.data,
                          eval_windows=config.data.eval_windows)


def model_args(config: ModelConfig) -> dict[str, object]:
    """What a checkpoint saves of the model's configuration (ModelConfig(**args) rebuilds it)."""
    return asdict(config)


def _ranges(steps: list[int]) -> str:
    """A few steps for a message."""
    return ", ".join(map(str, steps[:5])) + (f", ... ({len(steps)} in all)" if len(steps) > 5
                                            else "") if steps else "none"
