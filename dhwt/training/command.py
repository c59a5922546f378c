"""`dhwt train`: resolve the config from a file and flags, find or build the data, then train.

Precedence: TrainConfig defaults < `--config FILE.toml` < flags. A `--grammar`, `--data` or
`--corpus` flag replaces the file's data source (so the file may name one and the flag another;
`--corpus wikitext-2 --data PATH` keeps both flags). Text corpora (`--corpus`, `--tokenizer`,
`--seq-len`) are tokenized through the token-id cache (dhwt.languages.text_task). Relative paths
(in flags or the file: data, grammar, corpus, init_from) are relative to the working directory
and made absolute in the resolved config. With `--grammar` the dataset is built into RUN_DIR/data in the
same all-or-nothing step that creates the run directory, so a bad grammar, dataset or option
leaves nothing behind.

`--resume` continues RUN_DIR as its config.toml says; flags may repeat its values but not change
them, except `--device` (a run may continue on another device; dhwt.training.trainer says what
carries over), and `--config` is refused (the run's own config.toml is the config).

Under torchrun every process runs this command; rank 0 creates RUN_DIR (the others wait for it)
and is the only one to write (dhwt.training.distributed).
"""

from __future__ import annotations

from pathlib import Path

from dhwt.directories import held
from dhwt.errors import DhwtError
from dhwt.languages import load_language, load_task, write_dataset
from dhwt.runs import layout
from dhwt.runs.run import run_task
from dhwt.config.run import TrainConfig, split_init_from
from dhwt.config.device import resolve_device
from dhwt.training.distributed import Parallel, launch
from dhwt.training.trainer import RunResult, Trainer, train


def train_command(options: dict[str, object], *, config_file: str | None, out: str,
                  overwrite: bool = False, resume: bool = False) -> RunResult | None:
    """Run `dhwt train`. `options` holds only the flags the user gave (TrainConfig field names).
    Returns the result on rank 0 (the only process of a plain launch) and None on the others."""
    run_dir = Path(out)
    config = _resolve_config(options, config_file, run_dir, overwrite, resume)
    with launch(config.device) as parallel:  # its backend follows the device
        result = _train_command(config, run_dir, overwrite, resume, parallel,
                                inputs=(config_file, *_inputs(config)))
    return result if parallel.writes else None


def _resolve_config(options: dict[str, object], config_file: str | None, run_dir: Path,
                    overwrite: bool, resume: bool) -> TrainConfig:
    """The run's config from the flags, `--config` and (with --resume) RUN_DIR's config.toml,
    whose device the flags may change; this only reads."""
    if resume and overwrite:
        raise DhwtError("--resume continues a run and --overwrite replaces it; give only one")
    if resume:
        if config_file is not None:
            raise DhwtError(f"--config is for new runs; --resume uses {run_dir / layout.CONFIG}")
        saved = run_dir / layout.CONFIG
        if not saved.is_file():
            raise DhwtError(f"cannot resume {run_dir}: it has no {layout.CONFIG} (not a run "
                            "directory)")
        return TrainConfig.from_dict({**TrainConfig.from_toml(saved).to_dict(),
                                      **_absolute(options)}, source="the flags")
    values = TrainConfig.toml_values(config_file) if config_file is not None else {}
    if {"grammar", "data", "corpus"} & set(options):
        for key in ("grammar", "data", "corpus", "tokenizer", "seq_len", "eval_windows"):
            if key not in options:
                values.pop(key, None)
    config = TrainConfig.from_dict(_absolute({**values, **options}), source="the flags")
    if config.grammar is None and config.data is None and config.corpus is None:
        raise DhwtError("no data: give --grammar NAME|PATH (built into RUN_DIR/data), --data DIR "
                        "(a dataset from `dhwt synth`) or --corpus wikitext-2|DIR with --tokenizer "
                        "and --seq-len")
    return config


def _train_command(config: TrainConfig, run_dir: Path, overwrite: bool, resume: bool,
                   parallel: Parallel, inputs: tuple[object, ...]) -> RunResult:
    resolve_device(config.device, parallel.local_rank, parallel.world_size)  # before any write
    if resume:
        return train(config, run_task(config, run_dir), run_dir, resume=True, parallel=parallel)
    layout.refuse_existing(run_dir, overwrite, inputs)
    if config.grammar is None:
        return train(config, run_task(config, run_dir), run_dir, overwrite=overwrite,
                     inputs=inputs, parallel=parallel)

    def build(staging: Path) -> None:
        write_dataset(load_language(config.grammar), staging / layout.DATA,
                      valid_fraction=config.valid_fraction, test_fraction=config.test_fraction,
                      seed=config.split_seed)
        Trainer([(config, run_dir)], load_task(staging / layout.DATA, config.objective), parallel)

    with held(parallel.on_writer(lambda: layout.create_run_dir(
            run_dir, config.to_toml(), overwrite=overwrite, inputs=inputs, fill=build))):
        return Trainer([(config, run_dir)], run_task(config, run_dir), parallel).run(
            resume=False)[0]


def _inputs(config: TrainConfig) -> list[object]:
    """The paths a run reads (its data, grammar file, corpus, init_from run), which --overwrite
    must never delete."""
    paths: list[object] = [config.data, config.corpus, config.grammar]
    if config.init_from is not None:
        paths.append(split_init_from(config.init_from)[0])
    return [p for p in paths if p is not None and Path(str(p)).exists()]


def _absolute(options: dict[str, object]) -> dict[str, object]:
    """Flags with `data`, `init_from`'s run and a grammar or corpus given as an existing path made
    absolute paths."""
    options = dict(options)
    if options.get("data") is not None:
        options["data"] = str(Path(str(options["data"])).resolve())
    if options.get("grammar") is not None and Path(str(options["grammar"])).is_file():
        options["grammar"] = str(Path(str(options["grammar"])).resolve())
    if options.get("corpus") is not None and Path(str(options["corpus"])).is_dir():
        options["corpus"] = str(Path(str(options["corpus"])).resolve())
    if isinstance(options.get("init_from"), str):
        run, step = split_init_from(str(options["init_from"]))
        options["init_from"] = str(Path(run).resolve()) + ("" if step is None else f"@{step}")
    return options
