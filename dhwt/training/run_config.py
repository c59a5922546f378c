"""A run's config from what a user gives (`dhwt train`'s flags, `--config FILE.toml`, and with
`--resume` RUN_DIR's config.toml), and the paths a run reads, which `--overwrite` must never
delete.

Precedence: TrainConfig defaults < `--config FILE.toml` < flags. A `--grammar`, `--data` or
`--corpus` flag replaces the file's data source (so the file may name one and the flag
another; `--corpus wikitext-2 --data PATH` keeps both flags). WikiText-2 found through the
environment is recorded as the run's `data` (where it lies; dhwt.text.corpus). Data sources
(in flags or the file: grammar, corpus, data) resolve by dhwt.config.sources (a built-in name
stays one; a path is taken from the working directory and made absolute), as does init_from's
run. `--resume` continues RUN_DIR as its config.toml says; flags may repeat its values but not
change them, except `--device`, `--tensorboard` and `--steps` upwards (an extension), and
`--config` is refused (the run's own config.toml is the config).
"""

from __future__ import annotations

from pathlib import Path

from dhwt.checks import split_init_from
from dhwt.config.run import SOURCE_SETTINGS, SOURCES, TrainConfig, data_keys
from dhwt.config.sources import resolve_source
from dhwt.errors import DhwtError
from dhwt.runs import layout
from dhwt.runs.layout import run_paths
from dhwt.text.corpus import WIKITEXT2, wikitext2_location
from dhwt.training.resume import check_extension


def resolve_run_config(options: dict[str, object], config_file: str | None, run_dir: Path,
                       overwrite: bool, resume: bool) -> TrainConfig:
    """The run's config from `options` (only the flags the user gave, by TrainConfig field
    name), `config_file` and (with `resume`) RUN_DIR's config.toml, whose device the flags may
    change; this only reads."""
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
        check_extension(run_dir, options.get("steps"), config)  # before its tie switches fail
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


def run_inputs(config: TrainConfig) -> list[object]:
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
