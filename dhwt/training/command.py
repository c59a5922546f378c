"""`dhwt train`: resolve the config from a file and flags, find or build the data, then train.

Precedence: TrainConfig defaults < `--config FILE.toml` < flags. A `--grammar` or `--data` flag
replaces the file's data source (so the file may name one and the flag the other). Relative paths
(in flags or the file) are relative to the working directory and made absolute in the resolved
config. With `--grammar` the dataset is built into RUN_DIR/data in the
same all-or-nothing step that creates the run directory, so a bad grammar, dataset or option
leaves nothing behind.

`--resume` continues RUN_DIR as its config.toml says; flags may repeat its values but not change
them, and `--config` is refused (the run's own config.toml is the config).

Under torchrun every process runs this command; rank 0 creates RUN_DIR (the others wait for it)
and is the only one to write (dhwt.training.distributed).
"""

from __future__ import annotations

from pathlib import Path

from dhwt.errors import DhwtError
from dhwt.languages import Task, load_language, load_task, write_dataset
from dhwt.training import run_dir as layout
from dhwt.training.config import TrainConfig
from dhwt.training.distributed import Parallel, launch
from dhwt.training.trainer import RunResult, Trainer, train


def train_command(options: dict[str, object], *, config_file: str | None, out: str,
                  overwrite: bool = False, resume: bool = False) -> RunResult | None:
    """Run `dhwt train`. `options` holds only the flags the user gave (TrainConfig field names).
    Returns the result on rank 0 (the only process of a plain launch) and None on the others."""
    with launch() as parallel:
        result = _train_command(options, config_file, Path(out), overwrite, resume, parallel)
    return result if parallel.writes else None


def _train_command(options: dict[str, object], config_file: str | None, run_dir: Path,
                   overwrite: bool, resume: bool, parallel: Parallel) -> RunResult:
    if resume and overwrite:
        raise DhwtError("--resume continues a run and --overwrite replaces it; give only one")
    if resume:
        if config_file is not None:
            raise DhwtError(f"--config is for new runs; --resume uses {run_dir / layout.CONFIG}")
        saved = run_dir / layout.CONFIG
        if not saved.is_file():
            raise DhwtError(f"cannot resume {run_dir}: it has no {layout.CONFIG} (not a run "
                            "directory)")
        config = TrainConfig.from_dict({**TrainConfig.from_toml(saved).to_dict(),
                                        **_absolute(options)}, source="the flags")
        return train(config, _load(config, run_dir), run_dir, resume=True, parallel=parallel)
    values = TrainConfig.toml_values(config_file) if config_file is not None else {}
    if "grammar" in options or "data" in options:
        values.pop("grammar", None)
        values.pop("data", None)
    config = TrainConfig.from_dict(_absolute({**values, **options}), source="the flags")
    if config.grammar is None and config.data is None:
        raise DhwtError("no data: give --grammar NAME|PATH (built into RUN_DIR/data) or --data DIR "
                        "(a dataset from `dhwt synth`)")
    layout.refuse_existing(run_dir, overwrite)
    if config.data is not None:
        return train(config, _load(config, run_dir), run_dir, overwrite=overwrite,
                     parallel=parallel)

    def build(staging: Path) -> None:
        write_dataset(load_language(config.grammar), staging / layout.DATA,
                      valid_fraction=config.valid_fraction, test_fraction=config.test_fraction,
                      seed=config.split_seed)
        Trainer(config, load_task(staging / layout.DATA, config.objective), run_dir, parallel)

    parallel.on_writer(lambda: layout.create_run_dir(run_dir, config.to_toml(),
                                                     overwrite=overwrite, fill=build))
    return Trainer(config, _load(config, run_dir), run_dir, parallel).run(resume=False)


def _load(config: TrainConfig, run_dir: Path) -> Task:
    """The run's Task: RUN_DIR/data for a grammar-built run, else the dataset `config.data`."""
    data = run_dir / layout.DATA if config.grammar is not None else Path(str(config.data))
    if not data.is_dir():
        problem = "is not a directory" if data.exists() else "does not exist"
        raise DhwtError(f"dataset directory {data} {problem}")
    return load_task(data, config.objective)


def _absolute(options: dict[str, object]) -> dict[str, object]:
    """Flags with `data` and a grammar given as an existing file made absolute paths."""
    options = dict(options)
    if options.get("data") is not None:
        options["data"] = str(Path(str(options["data"])).resolve())
    if options.get("grammar") is not None and Path(str(options["grammar"])).is_file():
        options["grammar"] = str(Path(str(options["grammar"])).resolve())
    return options
