"""Studies: one TOML file chains a dataset, several training runs, the closeness analysis and a
report with figures. `dhwt study FILE.toml --out DIR` runs one.

A study file:

    [study]            name, description (free text for the report), group (default true:
                       runs that differ only in tie_schedule and seeds train as one ensemble,
                       dhwt.training.group; false trains one run after another, for models
                       whose ensemble of all those members would not fit in memory)
    [data]             grammar (built-in name or path), set (table of spec overrides, as
                       `dhwt synth --set`), valid_fraction, test_fraction, split_seed (default
                       0.1, 0.1, 14, as every dataset dhwt builds: dhwt.languages.splits);
                       or, for natural text, corpus (`wikitext-2` or a folder with
                       train/valid/test.txt), tokenizer, seq_len, eval_windows and data (where
                       WikiText-2 lies, else WIKITEXT2_PATH / DHWT_DATA), mask_rate and
                       mask_rule (masked LM), twins, twin_p, twin_kind, twin_seed (planted
                       twins): TrainConfig's keys.
                       Sources resolve by dhwt.config.sources: a built-in name stays one, a
                       relative path that exists beside the study file is taken from there,
                       else from the working directory
    [train]            TrainConfig fields shared by every run (see `dhwt train --help`), e.g.
                       device = "cuda", tensorboard = true (TensorBoard logs in each run's
                       RUN_DIR/tensorboard)
    [[runs]]           name, plus the TrainConfig fields in which this run differs;
                       `init_from = "NAME[@STEP]"` may name an earlier run of the study, or a
                       run directory elsewhere by a path with a `/`: a relative path is taken
                       from DIR (the --out directory), so `../other-study/runs/NAME` is a run
                       of a study written beside this one
    [analysis]         grammar studies only: pairs: list of [a, b] (default: every pair of
                       variants of one class), measure: "normalised" | "raw" | "cosine" for the
                       figures. A text study's analysis has no options (refused if given): run
                       `dhwt analyze` on its runs/NAME for other ones

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
M` does, the runs of a group as one ensemble (dhwt.commands.train extends a group together), and
analyses and reports again. A run extended so, or killed during an extension, is continued to
its own steps by any later study command; `--steps M` of those steps continues it with its
group.

The groups (and runs trained alone) train one after another in this process, or, with `--jobs
N` or `--executor slurm`, as jobs (dhwt.commands.study_jobs): each after the groups of the runs
it starts from, in the run directories it would write here. This process builds the dataset
before them and writes the report after all have finished, holding the study's lock meanwhile;
each job holds its runs' locks, so a run still trained by a job of an earlier command (whose
`dhwt study` was killed) is refused before any job starts.
"""

from __future__ import annotations

import shutil
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from dhwt.directories import Lock, atomic_write_bytes, create, holder, lock, resolve
from dhwt.errors import DhwtError, Interrupted, brief
from dhwt.languages import Language, load_language, load_task, write_dataset
from dhwt.languages.splits import SPLIT_SEED, TEST_FRACTION, VALID_FRACTION
from dhwt.filenames import ANALYSIS, DATA, JOBS, RUNS, STUDY_FILE
from dhwt.runs import layout
from dhwt.runs.layout import run_paths
from dhwt.runs.checkpoints import common_step, list_checkpoints
from dhwt.runs.run import check_data, data_checksum, is_finished, load_config_text
from dhwt.checks import split_init_from
from dhwt.config.run import (GRAMMAR_KEYS, SOURCES, TEXT_KEYS, TrainConfig, known_settings,
                             overrides)
from dhwt.config.sources import resolve_source
from dhwt.config.device import resolve_device
from dhwt.training.distributed import Parallel
from dhwt.training.group import group_key
from dhwt.analysis.runs_closeness import RunsCloseness, runs_closeness
from dhwt.analysis.runs_similarity import SimilarityOptions
from dhwt.analysis.analyze_result import Analysis
from dhwt.commands.analyze import analyze
from dhwt.report.analyze_report import document as analyze_document
from dhwt.commands.study_jobs import Job, JobSettings, check_jobs, run_jobs
from dhwt.commands.train import train
from dhwt.report.json_document import json_text
from dhwt.report.runs_closeness_report import closeness_document, write_runs_report
from dhwt.userfiles import parse_toml

#: Where a study's progress lines go (`dhwt study`: stderr).
Say = Callable[[str], None]

SECTIONS = {"study", "data", "train", "runs", "analysis"}
ANALYSIS_KEYS = {"pairs", "measure"}
STUDY_KEYS = {"name", "description", "group"}
MEASURES = ("normalised", "raw", "cosine")


@dataclass(frozen=True)
class Study:
    """A validated study file."""

    name: str
    description: str
    data: dict
    runs: tuple[tuple[str, TrainConfig], ...]
    pairs: tuple[tuple[str, str], ...] | None
    measure: str
    text: str
    group: bool = True
    path: Path | None = None


def load_study(path: str | Path) -> Study:
    """Read and validate a study file; DhwtError names the first problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DhwtError(f"study file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DhwtError(f"cannot read study file {path}: {exc}") from None
    raw = parse_toml(text, f"study file {path}")
    unknown = set(raw) - SECTIONS
    if unknown:
        raise DhwtError(f"study file {path}: unknown sections {sorted(unknown)}; "
                        f"allowed: {sorted(SECTIONS)}")
    for section in sorted(set(raw) - {"runs"}):
        if not isinstance(raw[section], dict):
            raise DhwtError(f"study file {path}: {section} must be a table [{section}], got "
                            f"{raw[section]!r}")
    if not all(isinstance(run, dict) for run in raw.get("runs", [])):
        raise DhwtError(f"study file {path}: runs must be tables [[runs]], got {raw['runs']!r}")
    head = raw.get("study", {})
    if set(head) - STUDY_KEYS:
        raise DhwtError(f"study file {path}: unknown [study] keys "
                        f"{sorted(set(head) - STUDY_KEYS)}; allowed: {sorted(STUDY_KEYS)}")
    if not isinstance(head.get("group", True), bool):
        raise DhwtError(f"study file {path}: [study] group must be true or false, got "
                        f"{head['group']!r}")
    data = dict(raw.get("data", {}))
    allowed = TEXT_KEYS if "corpus" in data else GRAMMAR_KEYS
    if set(data) - allowed:
        raise DhwtError(f"study file {path}: unknown [data] keys {sorted(set(data) - allowed)}; "
                        f"allowed: {sorted(allowed)} (grammar keys {sorted(GRAMMAR_KEYS)} or text "
                        f"keys {sorted(TEXT_KEYS)}, not both)")
    if "grammar" not in data and "corpus" not in data:
        raise DhwtError(f"study file {path}: [data] needs a grammar (built-in name or path) or a "
                        "corpus (wikitext-2 or a folder) with tokenizer and seq_len")
    for key in SOURCES:  # a relative path beside the file is taken from there
        if isinstance(data.get(key), str):
            data[key] = resolve_source(key, data[key], base=path.parent)
    shared = known_settings(raw.get("train", {}), f"[train] of study file {path}")
    runs = raw.get("runs", [])
    if not runs:
        raise DhwtError(f"study file {path}: no [[runs]]; give at least one")
    configs, names = [], set()
    for run in runs:
        run = dict(run)
        name = str(run.pop("name", ""))
        if not name or "/" in name or name.startswith(".") or not name.isprintable():
            raise DhwtError(f"study file {path}: every [[runs]] needs a plain name (one line of "
                            f"printable characters, no '/', not starting with '.'), got {name!r}")
        if name in names:
            raise DhwtError(f"study file {path}: run name {name!r} appears twice")
        names.add(name)
        if ({"grammar"} | TEXT_KEYS) & (set(shared) | set(run)):
            raise DhwtError(f"study file {path}: the data source belongs in [data], not in "
                            f"[train] or [[runs]]")
        source = data if "corpus" in data else {"data": "<study data>"}
        fields = {**shared, **run, **source}
        configs.append((name, TrainConfig.from_dict(fields, source=f"run {name!r} of {path}")))
        start = configs[-1][1].members.init_from
        earlier = split_init_from(start)[0] if start is not None else None
        if earlier is not None and "/" not in earlier and earlier not in names - {name}:
            raise DhwtError(f"study file {path}: run {name!r} starts from {earlier!r}, which is "
                            "not an earlier run of the study (or give a path with a /)")
    objectives = {config.data.objective for _, config in configs}
    if len(objectives) > 1:
        raise DhwtError(f"study file {path}: runs mix objectives {sorted(objectives)}; one study "
                        f"compares runs of one objective (its report uses one ground truth)")
    analysis = raw.get("analysis", {})
    if analysis and "corpus" in data:
        raise DhwtError(f"study file {path}: [analysis] {sorted(analysis)} is for grammar "
                        "studies; a text study's analysis has no options (run `dhwt analyze` on "
                        "its runs/NAME for others)")
    unknown = set(analysis) - ANALYSIS_KEYS
    if unknown:
        raise DhwtError(f"study file {path}: unknown [analysis] keys {sorted(unknown)}; "
                        f"allowed: {sorted(ANALYSIS_KEYS)}")
    measure = analysis.get("measure", "normalised")
    if measure not in MEASURES:
        raise DhwtError(f"study file {path}: measure must be one of {list(MEASURES)}, "
                        f"got {measure!r}")
    pairs = analysis.get("pairs")
    if pairs is not None and not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in pairs
    ):
        raise DhwtError(f"study file {path}: [analysis] pairs must be a list of [a, b] symbol "
                        f"pairs, got {pairs!r}")
    return Study(
        name=str(head.get("name", path.stem)),
        description=str(head.get("description", "")),
        data=data,
        runs=tuple(configs),
        pairs=tuple(tuple(p) for p in pairs) if pairs is not None else None,
        measure=measure,
        text=text,
        group=head.get("group", True),
        path=path,
    )


@dataclass(frozen=True, eq=False)
class StudyResult:
    """A study run: its report, and the results it renders (a grammar study: the closeness of
    its runs; a text study: the analysis over all runs and one per run, by name)."""

    report: Path
    closeness: RunsCloseness | None = None
    analysis: Analysis | None = None
    per_run: dict[str, Analysis] | None = None


def study_command(study_file: str, out: str, overwrite: bool = False,
                  as_json: bool = False, *, steps: int | None = None,
                  jobs: JobSettings | None = None, say: Say | None = None) -> str:
    """What `dhwt study` prints: the line naming its report, or (`as_json`) the JSON document
    of its numbers (say: where its progress lines go, study_results)."""
    result = study_results(load_study(study_file), out, overwrite=overwrite, steps=steps,
                           jobs=jobs, say=say)
    if not as_json:
        return f"study report: {result.report}"
    return json_text({
        "report": str(result.report),
        "closeness": None if result.closeness is None else closeness_document(result.closeness),
        "analysis": None if result.analysis is None else analyze_document(result.analysis),
        "runs": None if result.per_run is None else {
            name: analyze_document(found) for name, found in result.per_run.items()}})


def run_study(study: Study, out: str | Path, *, overwrite: bool = False,
              steps: int | None = None, jobs: JobSettings | None = None) -> Path:
    """Run (or continue) `study` into `out`; return the report's path (study_results)."""
    return study_results(study, out, overwrite=overwrite, steps=steps, jobs=jobs).report


def study_results(study: Study, out: str | Path, *, overwrite: bool = False,
                  steps: int | None = None, jobs: JobSettings | None = None,
                  say: Say | None = None) -> StudyResult:
    """Run (or continue) `study` into `out`; return its report and results. The whole study is
    checked before anything is written, and `out` is locked while the study writes it
    (dhwt.directories: a second `dhwt study` on it is refused; `overwrite` replaces only a dhwt
    study directory that holds none of the study's inputs). `steps`: then continue every run
    to that many steps (an extension, as `dhwt train --resume --steps`; a group's runs as one
    ensemble). `jobs`: train the groups as jobs (dhwt.commands.study_jobs) rather than one
    after another in this process. `say`: given a line before each phase (each group trained
    in this process, the report), so that a log shows progress where no bar is drawn."""
    out = Path(out)
    resolve(out)  # DhwtError naming --out itself if a symbolic link in it loops
    if jobs is not None:
        check_jobs(jobs)  # submitit installed (and SLURM here, if asked for)
    if steps is not None:
        _check_steps(study, None if overwrite else out, steps)
    text = "corpus" in study.data
    language = None if text else load_language(study.data["grammar"],
                                                overrides(study.data.get("set", {})) or {})
    inputs: list[object] = [study.path, *(study.data.get(k) for k in ("grammar", "corpus", "data"))]
    for name, config in study.runs:  # a missing GPU (of this machine's jobs) or source stops
        if jobs is None or jobs.executor == "local":  # the study before anything is written
            resolve_device(config.placement.device)
        source = _source(config.members.init_from, out)  # outside out: made by no run of this study
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
        _check_data(study, out)
    with _claim(out, study, overwrite, inputs):
        try:
            return _run_claimed(study, out, language, steps, jobs, say or _quiet)
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted; the same `dhwt study` command continues {out} "
                              "(finished runs are kept, interrupted ones resume from their last "
                              "checkpoint)") from None


def _check_data(study: Study, out: Path) -> None:
    """DhwtError, before anything is written, if the data of `study`'s runs in `out` changed
    since they were trained (dhwt.runs.run.check_data): a grammar study's data/ (rebuilt from
    the grammar when missing), a text study's corpus."""
    found: dict[tuple[str | None, str | None], str | None] = {}
    for name, _ in study.runs:
        run_dir = out / "runs" / name
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


def _run_claimed(study: Study, out: Path, language: Language | None, steps: int | None,
                 jobs: JobSettings | None, say: Say) -> StudyResult:
    """Run `study` in its claimed (locked) directory `out` (then, with `steps`, extend every
    run to that many steps), in this process or as `jobs`; its report and results."""

    text = language is None
    data_dir = out / DATA  # the study's dataset, which its runs name
    if language is not None and not data_dir.is_dir():
        write_dataset(language, data_dir, **_splits(study))
    pending = []
    for name, config in study.runs:
        config = _run_config(config, name, out, None if text else data_dir, _splits(study))
        run_dir = out / RUNS / name
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
            raise DhwtError(f"run {name!r} of {out} has its report but no checkpoint (deleted?), "
                            "so it can be neither checked to have finished nor continued; put "
                            "its checkpoints back, or pass --overwrite to train the study again")
        if run_dir.exists() and not resume:  # created but killed before its first checkpoint
            layout.refuse_existing(run_dir, overwrite=True)  # dhwt's own run, nothing else
            with lock(run_dir, f"run directory {run_dir}"):
                shutil.rmtree(run_dir)
        pending.append(_Pending(config, run_dir, resume))
    data = None if text else data_dir
    _train_all(_study_groups(study, pending, data), study, out, jobs, say)
    if steps is not None:
        _train_all(_extensions(study, out, steps, data), study, out, jobs, say)
    say(f"writing the report of {len(study.runs)} run{'s' if len(study.runs) > 1 else ''}")
    if text:
        return _text_report(study, out)
    objective = study.runs[0][1].data.objective
    runs = {name: out / RUNS / name for name, _ in study.runs}
    intro = [
        study.description.strip(),
        "",
        f"Grammar `{study.data['grammar']}`, objective `{objective}`; runs: "
        + ", ".join(f"`{d.name}` (`{c.tying.tie_schedule}`, {c.optim.steps} steps, seeds "
                    f"{c.members.seeds})" for c, d in _trained(out, study)) + ".",
    ]
    result = runs_closeness(runs, load_task(data_dir, objective), study.pairs)
    return StudyResult(write_runs_report(result, out, title=f"Study: {study.name}", intro=intro,
                                         measure=study.measure), closeness=result)


@dataclass(frozen=True)
class Group:
    """Runs to train as one ensemble (or a run alone), as a job or in this process: each run's
    config as trained and directory, whether they resume, and where a grammar study's dataset
    lies (None: a text study's runs name their corpus)."""

    runs: tuple[tuple[TrainConfig, Path], ...]
    resume: bool
    data: Path | None


def train_group(group: Group) -> None:
    """Train `group` on the device its config names (here, or in a job). A job requeued after
    preemption or its time limit (dhwt.commands.study_jobs) calls this again: the group then
    resumes from its newest checkpoint, or starts again if it was stopped before every run had
    its first."""
    config = group.runs[0][0]
    task = load_config_text(config) if group.data is None else load_task(
        group.data, config.data.objective)
    resume = group.resume or all(list_checkpoints(run_paths(d).checkpoints) for _, d in group.runs)
    train(list(group.runs), task, resume=resume, overwrite=not resume,
          parallel=Parallel(device=resolve_device(config.placement.device)))


def _train_all(groups: list[Group], study: Study, out: Path, jobs: JobSettings | None,
               say: Say) -> None:
    """Train `groups` one after another in this process, or (`jobs`) as jobs in out/jobs, each
    after the groups of the runs it starts from; DhwtError before any job starts if a run is
    being trained by another process (a job of an earlier `dhwt study` still running)."""
    if jobs is None:
        for i, group in enumerate(groups):
            say(f"training {i + 1} of {len(groups)}: {_describe(group)}")
            train_group(group)
        return
    names = {run_dir.name for group in groups for _, run_dir in group.runs}
    runs = resolve(out / RUNS)
    for group in groups:
        for _, run_dir in group.runs:
            other = holder(run_dir) if run_dir.is_dir() else None
            if other is not None:
                raise DhwtError(f"run {run_dir.name!r} of {out} is being trained by {other} (a "
                                "job of an earlier `dhwt study`?); run the same command again "
                                "when it has ended")
    run_jobs([Job(partial(train_group, group), tuple(d.name for _, d in group.runs),
                  frozenset(_starts_from(group, runs)) & names) for group in groups],
             jobs, out / JOBS, f"dhwt-{study.name}")


def _describe(group: Group) -> str:
    """'runs 'a', 'b' (16 members, to step 10,000; resumed)', what a group trains."""
    names = [run_dir.name for _, run_dir in group.runs]
    members = sum(len(config.members.seeds) for config, _ in group.runs)
    return (f"run{'s' if len(names) > 1 else ''} {brief(names)} ({members} member"
            f"{'s' if members > 1 else ''}, to step {group.runs[0][0].optim.steps:,}"
            f"{'; resumed' if group.resume else ''})")


def _quiet(line: str) -> None:
    """A study's progress lines, unsaid (study_results called without `say`)."""


def _starts_from(group: Group, runs: Path) -> set[str]:
    """The names of the runs of the study (directories in `runs`) that `group`'s runs start
    from."""
    sources = {Path(split_init_from(c.members.init_from)[0])
               for c, _ in group.runs if c.members.init_from is not None}
    return {source.name for source in sources if source.parent == runs}


def _trained(out: Path, study: Study) -> list[tuple[TrainConfig, Path]]:
    """Each run of `study` in `out` with its config.toml (the config it trained to)."""
    return [(TrainConfig.from_toml(run_paths(out / RUNS / name).config), out / RUNS / name)
            for name, _ in study.runs]


def _configured_steps(run_dir: Path) -> int | None:
    """The steps of the run in `run_dir`'s config.toml (None: no run there yet)."""
    path = run_paths(run_dir).config
    return TrainConfig.from_toml(path).optim.steps if path.is_file() else None


def _check_steps(study: Study, out: Path | None, steps: int) -> None:
    """DhwtError if `steps` (--steps) is fewer than a run of `study` is configured for by the
    study file, or in `out` (None: a study to replace) by an earlier extension."""
    for name, config in study.runs:
        extended = None if out is None else _configured_steps(out / RUNS / name)
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


def _study_groups(study: Study, pending: list[_Pending], data: Path | None) -> list[Group]:
    """The groups in which `study` trains its `pending` runs (each run alone with [study]
    group = false), reading a grammar study's dataset from `data`."""
    groups = _groups(pending) if study.group else [[p] for p in pending]
    return [Group(tuple((p.config, p.run_dir) for p in group), group[0].resume, data)
            for group in groups]


def _extensions(study: Study, out: Path, steps: int, data: Path | None) -> list[Group]:
    """The groups that continue the runs of `study` in `out` to `steps` (all its runs have
    trained, and the only unfinished ones are configured for `steps`: an extension stopped part
    way), each group as one ensemble, but a group whose finished runs stand at different steps
    (one extended on its own, which dhwt.commands.train does not extend with the others): its
    runs alone."""
    trained = [(config, run_dir, is_finished(run_dir)) for config, run_dir in _trained(out, study)]
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


def _splits(study: Study) -> dict[str, object]:
    """How a grammar study splits its dataset (the [data] keys, else every dataset's defaults,
    dhwt.languages.splits)."""
    return {"valid_fraction": study.data.get("valid_fraction", VALID_FRACTION),
            "test_fraction": study.data.get("test_fraction", TEST_FRACTION),
            "seed": study.data.get("split_seed", SPLIT_SEED)}


def _check_pairs(study: Study, vocab: Sequence[str]) -> None:
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


def _run_config(config: TrainConfig, name: str, out: Path, data_dir: Path | None,
                splits: dict[str, object]) -> TrainConfig:
    """A run's config as trained: the study's dataset directory and its splits (grammar
    studies), and init_from resolved (the name of an earlier run -> its directory under
    out/runs; a relative path -> taken from out)."""
    values = config.to_dict()
    if data_dir is not None:
        values["data"] = str(data_dir.resolve())
        values.update(valid_fraction=splits["valid_fraction"],
                      test_fraction=splits["test_fraction"], split_seed=splits["seed"])
    if config.members.init_from is not None:
        step = split_init_from(config.members.init_from)[1]
        values["init_from"] = str(_source(config.members.init_from, out)) + (
            "" if step is None else f"@{step}")
    return TrainConfig.from_dict(values, source=f"run {name!r}")


def _source(init_from: str | None, out: Path) -> Path | None:
    """The run directory `init_from` names, absolute: an earlier run's NAME is out/runs/NAME, a
    path with a `/` is taken from out (an absolute one stays as it is)."""
    if init_from is None:
        return None
    run = split_init_from(init_from)[0]
    return resolve(out / run if "/" in run else out / RUNS / run)


def _text_report(study: Study, out: Path) -> StudyResult:
    """analysis/NAME/report.md per run (KNN match between its members over tokens seen in
    training, DH diagnostic) and report.md over all runs (loss, perplexity)."""
    dirs = [out / RUNS / name for name, _ in study.runs]
    per_run = {run.name: analyze([run], out / ANALYSIS / run.name,
                                 similarity=SimilarityOptions(tokens="seen"), owned=True)
               for run in dirs}
    found = analyze(dirs, out, similarity=SimilarityOptions(measures="none"), owned=True)
    return StudyResult(found.report, analysis=found, per_run=per_run)


def _claim(out: Path, study: Study, overwrite: bool, inputs: Sequence[object]) -> Lock:
    """Make `out` this study's directory and return its lock, held: the same study continued
    (perhaps with runs added), or a new directory (replacing a dhwt study with `overwrite`)."""
    marker = out / STUDY_FILE
    changed = _changes(marker, study.text) if out.is_dir() and marker.is_file() else None
    if not overwrite and changed == []:
        held = lock(out, f"study directory {out}")
        if marker.read_text(encoding="utf-8") != study.text:
            atomic_write_bytes(marker, study.text.encode("utf-8"))
        return held
    differs = f" ({brief(changed, str)} differ{'s' * (len(changed) == 1)})" if changed else ""
    return create(out, "study", lambda staging: (staging / STUDY_FILE).write_text(
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
