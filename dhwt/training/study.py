"""A study's lifecycle: its directory claimed (checked whole before anything is written, then
locked), its dataset built once, its runs trained (groups of tie variants as one ensemble, in
this process or as jobs: dhwt.training.study_jobs), and with `steps` every run extended. The
study file is dhwt.config.study.StudyConfig; its directory's places are
dhwt.runs.layout.StudyPaths. `dhwt study` (dhwt.commands.study) then writes the runs' reports,
analyses and reports the study, still holding the claim.

Layout of DIR: study.toml (the file as run), data/ (a grammar's dataset, built once), runs/NAME/
(one run directory each, as `dhwt train` writes it), figures/, report.md. A text study's
report.md is `dhwt analyze` of all runs without similarity (loss, valid and test perplexity),
and analysis/NAME/report.md that of each run: KNN match between its members at every snapshot
with the chance level, over tokens seen in training, and the DH diagnostic of untied members.

Runs trained as a group write their run directories as if trained alone (equal to float
tolerance; tests/training/test_group.py), but a nan in any member stops the whole group.

Nothing is lost when a study is killed: run again with the same file and DIR, and finished runs
are kept, interrupted ones resume from their last checkpoint (bit for bit, see dhwt.training),
missing ones start. A file that only adds runs (or changes [study] or [analysis]) continues
the study with them; one that changes [data], [train] or a run already there is refused unless
`overwrite`. `--steps M` then continues every run to M steps as `dhwt train --resume --steps
M` does, the runs of a group as one ensemble (dhwt.training.runner extends a group together),
and analyses and reports again. A run extended so, or killed during an extension, is continued
to its own steps by any later study command; `--steps M` of those steps continues it with its
group.

The groups (and runs trained alone) train one after another in this process, or, with `--jobs
N` or `--executor slurm`, as jobs (dhwt.training.study_jobs): each after the groups of the runs
it starts from, in the run directories it would write here. This process builds the dataset
before them, and its caller writes the report after all have finished, holding the study's
lock meanwhile; each job holds its runs' locks, so a run still trained by a job of an earlier
command (whose `dhwt study` was killed) is refused before any job starts.
"""

from __future__ import annotations

import shutil
import tomllib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from dhwt.checks import split_init_from
from dhwt.config.device import resolve_device
from dhwt.config.run import TrainConfig, overrides
from dhwt.config.study import StudyConfig
from dhwt.directories import Lock, atomic_write_bytes, create, holder, lock, resolve
from dhwt.errors import DhwtError, Interrupted, brief
from dhwt.languages import Language, load_language, load_task, write_dataset
from dhwt.languages.splits import SPLIT_SEED, TEST_FRACTION, VALID_FRACTION
from dhwt.runs import layout
from dhwt.runs.checkpoints import common_step, list_checkpoints
from dhwt.runs.layout import StudyPaths, run_paths, study_paths
from dhwt.runs.run import check_data, data_checksum, is_finished, load_config_text
from dhwt.training.distributed import Parallel
from dhwt.training.group import group_key
from dhwt.training.runner import train_group
from dhwt.training.study_jobs import Job, JobSettings, check_jobs, run_jobs

#: Where a study's progress lines go (`dhwt study`: stderr).
Say = Callable[[str], None]


def run_study(study: StudyConfig, out: str | Path, *, overwrite: bool = False,
              steps: int | None = None, jobs: JobSettings | None = None,
              say: Say | None = None) -> StudyPaths:
    """Train (or continue) `study` into `out` (claimed_study, then train_study); its places.
    The runs' reports and the study's report are `dhwt study`'s (dhwt.commands.study)."""
    with claimed_study(study, out, overwrite=overwrite, steps=steps, jobs=jobs) as paths:
        train_study(study, paths, steps=steps, jobs=jobs, say=say)
    return paths


@contextmanager
def claimed_study(study: StudyConfig, out: str | Path, *, overwrite: bool = False,
                  steps: int | None = None, jobs: JobSettings | None = None
                  ) -> Iterator[StudyPaths]:
    """`out` checked for `study` and claimed (locked) while the body writes it; its places. The
    whole study is checked before anything is written, and `out` is locked
    (dhwt.directories: a second `dhwt study` on it is refused; `overwrite` replaces only a dhwt
    study directory that holds none of the study's inputs). `steps`: the body will continue
    every run to that many steps (checked here to extend, not shorten). `jobs`: it will train
    the groups as jobs (submitit installed, and SLURM here, if asked for). An interrupt of the
    body is an Interrupted saying that the same command continues the study."""
    out = Path(out)
    resolve(out)  # DhwtError naming --out itself if a symbolic link in it loops
    paths = study_paths(out)
    if jobs is not None:
        check_jobs(jobs)
    if steps is not None:
        _check_steps(study, None if overwrite else paths, steps)
    language = _language(study)
    inputs: list[object] = [study.path, *(study.data.get(k) for k in ("grammar", "corpus", "data"))]
    for name, config in study.runs:  # a missing GPU (of this machine's jobs) or source stops
        if jobs is None or jobs.executor == "local":  # the study before anything is written
            resolve_device(config.placement.device)
        source = _source(config.members.init_from, paths)  # outside out: made by no run of this study
        if source is not None and not source.is_relative_to(resolve(out)):
            if not source.is_dir():
                raise DhwtError(f"run {name!r} starts from {source}, which does not exist "
                                f"(init_from {config.members.init_from!r}; a relative path is taken "
                                f"from --out {out})")
            inputs.append(source)
    if language is not None:
        _check_pairs(study, language.vocab(study.runs[0][1].data.objective))
    inputs = [p for p in inputs if p is not None and Path(str(p)).exists()]
    if not overwrite:
        _check_data(study, paths)
    with _claim(paths, study, overwrite, inputs):
        try:
            yield paths
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted; the same `dhwt study` command continues {out} "
                              "(finished runs are kept, interrupted ones resume from their last "
                              "checkpoint)") from None


def train_study(study: StudyConfig, paths: StudyPaths, *, steps: int | None = None,
                jobs: JobSettings | None = None, say: Say | None = None) -> list[Path]:
    """Train `study` in its claimed directory `paths` (then, with `steps`, extend every run to
    that many steps), in this process or as `jobs`; the directories of the runs trained.
    `say`: given a line before each group trained in this process, so that a log shows
    progress where no bar is drawn."""
    say = say or _quiet
    language = _language(study)
    data_dir = None if language is None else paths.data  # the study's dataset, which its runs name
    if language is not None and not data_dir.is_dir():
        write_dataset(language, data_dir, **_splits(study))
    pending = []
    for name, config in study.runs:
        config = _run_config(config, name, paths, data_dir, _splits(study))
        run_dir = paths.run(name)
        run_dir.parent.mkdir(exist_ok=True)
        configured = _configured_steps(run_dir)  # an extended run continues to its own steps
        if configured is not None and configured > config.optim.steps:
            if configured == steps:  # continued with its group below
                continue
            config = config.replace(steps=configured)
        if is_finished(run_dir):
            continue
        resume = bool(list_checkpoints(run_paths(run_dir).checkpoints))
        if not resume and run_paths(run_dir).report.is_file():
            raise DhwtError(f"run {name!r} of {paths.root} has its report but no checkpoint "
                            "(deleted?), so it can be neither checked to have finished nor "
                            "continued; put its checkpoints back, or pass --overwrite to train "
                            "the study again")
        if run_dir.exists() and not resume:  # created but killed before its first checkpoint
            layout.refuse_existing(run_dir, overwrite=True)  # dhwt's own run, nothing else
            with lock(run_dir, f"run directory {run_dir}"):
                shutil.rmtree(run_dir)
        pending.append(_Pending(config, run_dir, resume))
    groups = _study_groups(study, pending, data_dir)
    _train_all(groups, study, paths, jobs, say)
    if steps is not None:
        extensions = _extensions(study, paths, steps, data_dir)
        _train_all(extensions, study, paths, jobs, say)
        groups += extensions
    return [run_dir for group in groups for _, run_dir in group.runs]


def study_task(study: StudyConfig, paths: StudyPaths):  # noqa: ANN201 (a Task or TextTask)
    """The task every run of `study` trains on: a grammar study's dataset in `paths`, a text
    study's corpus."""
    config = study.runs[0][1]
    if study.is_text:
        return load_config_text(config)
    return load_task(paths.data, config.data.objective)


def _language(study: StudyConfig) -> Language | None:
    """A grammar study's language (None: a text study)."""
    if study.is_text:
        return None
    return load_language(study.data["grammar"], overrides(study.data.get("set", {})) or {})


def _check_data(study: StudyConfig, paths: StudyPaths) -> None:
    """DhwtError, before anything is written, if the data of `study`'s runs in `paths` changed
    since they were trained (dhwt.runs.run.check_data): a grammar study's data/ (rebuilt from
    the grammar when missing), a text study's corpus."""
    found: dict[tuple[str | None, str | None], str | None] = {}
    for name, _ in study.runs:
        run_dir = paths.run(name)
        if not run_paths(run_dir).config.is_file():
            continue
        config = TrainConfig.from_toml(run_paths(run_dir).config)
        if config.data.data_sha256 is None or (
                config.data.corpus is None and not Path(str(config.data.data)).is_dir()):
            continue
        where = (config.data.corpus, config.data.data)  # read once for all the runs
        if where not in found:
            found[where] = data_checksum(config, run_dir)
        check_data(config, run_dir, found[where], remedy="put back the data its runs were "
                   "trained on, or pass --overwrite to train the study again on this data")


@dataclass(frozen=True)
class Group:
    """Runs to train as one ensemble (or a run alone), as a job or in this process: each run's
    config as trained and directory, whether they resume, and where a grammar study's dataset
    lies (None: a text study's runs name their corpus)."""

    runs: tuple[tuple[TrainConfig, Path], ...]
    resume: bool
    data: Path | None


def train_study_group(group: Group) -> None:
    """Train `group` on the device its config names (here, or in a job). A job requeued after
    preemption or its time limit (dhwt.training.study_jobs) calls this again: the group then
    resumes from its newest checkpoint, or starts again if it was stopped before every run had
    its first."""
    config = group.runs[0][0]
    task = load_config_text(config) if group.data is None else load_task(
        group.data, config.data.objective)
    resume = group.resume or all(list_checkpoints(run_paths(d).checkpoints) for _, d in group.runs)
    train_group(list(group.runs), task, resume=resume, overwrite=not resume,
                parallel=Parallel(device=resolve_device(config.placement.device)))


def _train_all(groups: list[Group], study: StudyConfig, paths: StudyPaths, jobs: JobSettings | None,
               say: Say) -> None:
    """Train `groups` one after another in this process, or (`jobs`) as jobs in its jobs/, each
    after the groups of the runs it starts from; DhwtError before any job starts if a run is
    being trained by another process (a job of an earlier `dhwt study` still running)."""
    if jobs is None:
        for i, group in enumerate(groups):
            say(f"training {i + 1} of {len(groups)}: {_describe(group)}")
            train_study_group(group)
        return
    names = {run_dir.name for group in groups for _, run_dir in group.runs}
    runs = resolve(paths.runs)
    for group in groups:
        for _, run_dir in group.runs:
            other = holder(run_dir) if run_dir.is_dir() else None
            if other is not None:
                raise DhwtError(f"run {run_dir.name!r} of {paths.root} is being trained by {other} (a "
                                "job of an earlier `dhwt study`?); run the same command again "
                                "when it has ended")
    run_jobs([Job(partial(train_study_group, group), tuple(d.name for _, d in group.runs),
                  frozenset(_starts_from(group, runs)) & names) for group in groups],
             jobs, paths.jobs, f"dhwt-{study.name}")


def _describe(group: Group) -> str:
    """'runs 'a', 'b' (16 members, to step 10,000; resumed)', what a group trains."""
    names = [run_dir.name for _, run_dir in group.runs]
    members = sum(len(config.members.seeds) for config, _ in group.runs)
    return (f"run{'s' if len(names) > 1 else ''} {brief(names)} ({members} member"
            f"{'s' if members > 1 else ''}, to step {group.runs[0][0].optim.steps:,}"
            f"{'; resumed' if group.resume else ''})")


def _quiet(line: str) -> None:
    """A study's progress lines, unsaid (train_study called without `say`)."""


def _starts_from(group: Group, runs: Path) -> set[str]:
    """The names of the runs of the study (directories in `runs`) that `group`'s runs start
    from."""
    sources = {Path(split_init_from(c.members.init_from)[0])
               for c, _ in group.runs if c.members.init_from is not None}
    return {source.name for source in sources if source.parent == runs}


def trained_configs(study: StudyConfig, paths: StudyPaths) -> list[tuple[TrainConfig, Path]]:
    """Each run of `study` in `paths` with its config.toml (the config it trained to)."""
    return [(TrainConfig.from_toml(run_paths(paths.run(name)).config), paths.run(name))
            for name, _ in study.runs]


def _configured_steps(run_dir: Path) -> int | None:
    """The steps of the run in `run_dir`'s config.toml (None: no run there yet)."""
    path = run_paths(run_dir).config
    return TrainConfig.from_toml(path).optim.steps if path.is_file() else None


def _check_steps(study: StudyConfig, paths: StudyPaths | None, steps: int) -> None:
    """DhwtError if `steps` (--steps) is fewer than a run of `study` is configured for by the
    study file, or in `paths` (None: a study to replace) by an earlier extension."""
    for name, config in study.runs:
        extended = None if paths is None else _configured_steps(paths.run(name))
        configured = max(config.optim.steps, extended or 0)
        if steps < configured:
            raise DhwtError(f"cannot continue the study with steps = {steps}: run {name!r} is "
                            f"configured for {configured} steps, and --steps may extend a "
                            "study's runs, not shorten them")


@dataclass(frozen=True)
class _Pending:
    """A run still to train: its config as trained, its directory, whether it resumes."""

    config: TrainConfig
    run_dir: Path
    resume: bool


def _study_groups(study: StudyConfig, pending: list[_Pending], data: Path | None) -> list[Group]:
    """The groups in which `study` trains its `pending` runs (each run alone with [study]
    group = false), reading a grammar study's dataset from `data`."""
    groups = _groups(pending) if study.group else [[p] for p in pending]
    return [Group(tuple((p.config, p.run_dir) for p in group), group[0].resume, data)
            for group in groups]


def _extensions(study: StudyConfig, paths: StudyPaths, steps: int, data: Path | None
                ) -> list[Group]:
    """The groups that continue the runs of `study` in `paths` to `steps` (all its runs have
    trained, and the only unfinished ones are configured for `steps`: an extension stopped part
    way), each group as one ensemble, but a group whose finished runs stand at different steps
    (one extended on its own, which dhwt.training.runner does not extend with the others): its
    runs alone."""
    trained = [(config, run_dir, is_finished(run_dir)) 
               for config, run_dir in trained_configs(study, paths)]
    standing = {run_dir: config.optim.steps for config, run_dir, finished in trained if finished}
    groups = []
    for group in _study_groups(study, [_Pending(config.replace(steps=steps), run_dir, True)
                                       for config, run_dir, finished in trained
                                       if config.optim.steps < steps or not finished], data):
        if len({standing[d] for _, d in group.runs if d in standing}) > 1:
            groups.extend(Group((run,), True, data) for run in group.runs)
        else:
            groups.append(group)
    return groups


def _groups(pending: list[_Pending]) -> list[list[_Pending]]:
    """The pending runs as groups to train as one ensemble (dhwt.training.group), in the order
    of each group's first run (so a run's init_from source, never grouped with it, trains
    first): runs with one group key that all start afresh, or all resume with a checkpoint step
    in common (a group killed mid-way); any other run trains alone."""
    groups: dict[object, list[_Pending]] = {}
    for i, run in enumerate(pending):
        key = group_key(run.config)
        groups.setdefault(i if key is None else (key, run.resume), []).append(run)
    result = []
    for group in groups.values():
        if group[0].resume and common_step(
                [run_paths(r.run_dir).checkpoints for r in group]) is None:
            result.extend([run] for run in group)
        else:
            result.append(group)
    return result


def _splits(study: StudyConfig) -> dict[str, object]:
    """How a grammar study splits its dataset (the [data] keys, else every dataset's defaults,
    dhwt.languages.splits)."""
    return {"valid_fraction": study.data.get("valid_fraction", VALID_FRACTION),
            "test_fraction": study.data.get("test_fraction", TEST_FRACTION),
            "seed": study.data.get("split_seed", SPLIT_SEED)}


def _check_pairs(study: StudyConfig, vocab: Sequence[str]) -> None:
    """DhwtError naming an [analysis] pair of one symbol, or one's symbol that the language does
    not have."""
    for pair in study.pairs or ():
        if pair[0] == pair[1]:
            raise DhwtError(f"study file {study.path}: [analysis] pair {list(pair)} is one symbol "
                            "twice; a pair is two symbols")
        unknown = [s for s in pair if s not in vocab]
        if unknown:
            raise DhwtError(f"study file {study.path}: [analysis] pair {list(pair)} names "
                            f"{unknown[0]!r}, which is not a symbol of the language "
                            f"({brief(vocab)})")


def _run_config(config: TrainConfig, name: str, paths: StudyPaths, data_dir: Path | None,
                splits: dict[str, object]) -> TrainConfig:
    """A run's config as trained: the study's dataset directory and its splits (grammar
    studies), and init_from resolved (the name of an earlier run -> its directory under
    runs/; a relative path -> taken from the study directory)."""
    values = config.to_dict()
    if data_dir is not None:
        values["data"] = str(data_dir.resolve())
        values.update(valid_fraction=splits["valid_fraction"],
                      test_fraction=splits["test_fraction"], split_seed=splits["seed"])
    if config.members.init_from is not None:
        step = split_init_from(config.members.init_from)[1]
        values["init_from"] = str(_source(config.members.init_from, paths)) + (
            "" if step is None else f"@{step}")
    return TrainConfig.from_dict(values, source=f"run {name!r}")


def _source(init_from: str | None, paths: StudyPaths) -> Path | None:
    """The run directory `init_from` names, absolute: an earlier run's NAME is runs/NAME, a
    path with a `/` is taken from the study directory (an absolute one stays as it is)."""
    if init_from is None:
        return None
    run = split_init_from(init_from)[0]
    return resolve(paths.root / run if "/" in run else paths.run(run))


def _claim(paths: StudyPaths, study: StudyConfig, overwrite: bool, inputs: Sequence[object]
           ) -> Lock:
    """Make `out` this study's directory and return its lock, held: the same study continued
    (perhaps with runs added), or a new directory (replacing a dhwt study with `overwrite`)."""
    out, marker = paths.root, paths.study_file
    changed = _changes(marker, study.text) if out.is_dir() and marker.is_file() else None
    if not overwrite and changed == []:
        held = lock(out, f"study directory {out}")
        if marker.read_text(encoding="utf-8") != study.text:
            atomic_write_bytes(marker, study.text.encode("utf-8"))
        return held
    differs = f" ({brief(changed, str)} differ{'s' * (len(changed) == 1)})" if changed else ""
    return create(out, "study", lambda staging: study_paths(staging).study_file.write_text(
                      study.text, encoding="utf-8"),
                  overwrite=overwrite, inputs=inputs,
                  exists=f"it does not hold this study{differs}; pass --overwrite to replace it "
                         "(a study continues with runs added, not with its [data], [train] or "
                         "runs changed)")


def _changes(marker: Path, text: str) -> list[str] | None:
    """What study file `text` changes of the study held in `marker`, as dotted keys
    (`train.lr`, `runs.NAME.tie_schedule`, `runs.NAME` for a run gone): in its [data], its
    [train] or a run already there ([] if none: it continues the study; it may add runs and
    change [study] and [analysis]); None if `marker` cannot be read as a study file."""
    try:
        old = tomllib.loads(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    new = tomllib.loads(text)
    runs = {run.get("name"): run for run in new.get("runs", [])}
    changed = [*_differing(old.get("data", {}), new.get("data", {}), "data"),
               *_differing(old.get("train", {}), new.get("train", {}), "train")]
    for run in old.get("runs", []):
        name = f"runs.{run.get('name')}"
        changed += [name] if run.get("name") not in runs else _differing(
            run, runs[run.get("name")], name)
    return changed


def _differing(old: object, new: object, key: str) -> list[str]:
    """The dotted keys, under `key`, whose values differ between the tables `old` and `new`
    (a key in one only differs)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return [] if old == new else [key]
    return [found for name in sorted(old.keys() | new.keys())
            for found in _differing(old.get(name), new.get(name), f"{key}.{name}")]
