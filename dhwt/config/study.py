"""StudyConfig: a study file (one TOML chaining a dataset, several training runs, the closeness
analysis and a report), read and validated once. `dhwt study FILE.toml --out DIR` runs one
(dhwt.training.study trains it; dhwt.commands.study analyses and reports).

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
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dhwt.checks import Boolean, Choice, Instance, check_fields, split_init_from
from dhwt.config.run import GRAMMAR_KEYS, SOURCES, TEXT_KEYS, TrainConfig, known_settings
from dhwt.config.sources import resolve_source
from dhwt.errors import DhwtError
from dhwt.userfiles import parse_toml

SECTIONS = {"study", "data", "train", "runs", "analysis"}
ANALYSIS_KEYS = {"pairs", "measure"}
STUDY_KEYS = {"name", "description", "group"}
MEASURES = ("normalised", "raw", "cosine")


@dataclass(frozen=True)
class StudyConfig:
    """A validated study file: its name and description, its [data] table (sources resolved),
    each run's name and TrainConfig, the [analysis] pairs (None: the default) and measure, the
    file's text, whether tie variants train as one group, and where the file lies. Every bad
    value raises a one-line DhwtError naming the file.

    Examples:
        >>> study = StudyConfig.from_text('[data]\\ngrammar = "parity"\\n[[runs]]\\nname = "a"\\n')
        >>> study.name, [name for name, _ in study.runs], study.measure
        ('study', ['a'], 'normalised')
        >>> StudyConfig.from_text('[data]\\ngrammar = "parity"\\n')
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: study file study.toml: no [[runs]]; give at least one
    """

    name: str
    description: str
    data: dict
    runs: tuple[tuple[str, TrainConfig], ...]
    pairs: tuple[tuple[str, str], ...] | None
    measure: str
    text: str
    group: bool = True
    path: Path | None = None

    CONSTRAINTS = {"name": [Instance(str)], "description": [Instance(str)],
                   "data": [Instance(dict)], "runs": [Instance(tuple)],
                   "pairs": [Instance(tuple), None], "measure": [Choice(MEASURES)],
                   "text": [Instance(str)], "group": [Boolean()], "path": [Instance(Path), None]}

    def __post_init__(self) -> None:
        where = f"study file {self.path}"
        try:
            check_fields(self, self.CONSTRAINTS)
        except DhwtError as exc:
            raise DhwtError(f"{where}: {exc}") from None
        if not self.runs:
            raise DhwtError(f"{where}: no [[runs]]; give at least one")
        objectives = {config.data.objective for _, config in self.runs}
        if len(objectives) > 1:
            raise DhwtError(f"{where}: runs mix objectives {sorted(objectives)}; one study "
                            "compares runs of one objective (its report uses one ground truth)")

    @property
    def is_text(self) -> bool:
        """Whether the study trains on a text corpus (else on a grammar's dataset)."""
        return "corpus" in self.data

    @classmethod
    def from_toml(cls, path: str | Path) -> StudyConfig:
        """Read and validate a study file; DhwtError names the first problem."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise DhwtError(f"study file {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise DhwtError(f"cannot read study file {path}: {exc}") from None
        return cls.from_text(text, path)

    @classmethod
    def from_text(cls, text: str, path: str | Path = "study.toml") -> StudyConfig:
        """A study from the text of its file, which lies at `path` (relative sources are taken
        from beside it)."""
        path = Path(path)
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
            raise DhwtError(f"study file {path}: runs must be tables [[runs]], got "
                            f"{raw['runs']!r}")
        head = raw.get("study", {})
        if set(head) - STUDY_KEYS:
            raise DhwtError(f"study file {path}: unknown [study] keys "
                            f"{sorted(set(head) - STUDY_KEYS)}; allowed: {sorted(STUDY_KEYS)}")
        data = _data(raw.get("data", {}), path)
        analysis = raw.get("analysis", {})
        runs = _runs(raw, data, path)
        if analysis and "corpus" in data:
            raise DhwtError(f"study file {path}: [analysis] {sorted(analysis)} is for grammar "
                            "studies; a text study's analysis has no options (run `dhwt analyze` "
                            "on its runs/NAME for others)")
        unknown = set(analysis) - ANALYSIS_KEYS
        if unknown:
            raise DhwtError(f"study file {path}: unknown [analysis] keys {sorted(unknown)}; "
                            f"allowed: {sorted(ANALYSIS_KEYS)}")
        pairs = analysis.get("pairs")
        measure = analysis.get("measure", "normalised")
        if measure in MEASURES and pairs is not None and not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p)
            for p in pairs
        ):
            raise DhwtError(f"study file {path}: [analysis] pairs must be a list of [a, b] "
                            f"symbol pairs, got {pairs!r}")
        return cls(name=str(head.get("name", path.stem)),
                   description=str(head.get("description", "")), data=data, runs=runs,
                   pairs=tuple(tuple(p) for p in pairs) if pairs is not None else None,
                   measure=measure, text=text, group=head.get("group", True), path=path)


def _data(table: dict, path: Path) -> dict:
    """The [data] table checked, its sources resolved (a relative path beside the file is taken
    from there)."""
    data = dict(table)
    allowed = TEXT_KEYS if "corpus" in data else GRAMMAR_KEYS
    if set(data) - allowed:
        raise DhwtError(f"study file {path}: unknown [data] keys {sorted(set(data) - allowed)}; "
                        f"allowed: {sorted(allowed)} (grammar keys {sorted(GRAMMAR_KEYS)} or text "
                        f"keys {sorted(TEXT_KEYS)}, not both)")
    if "grammar" not in data and "corpus" not in data:
        raise DhwtError(f"study file {path}: [data] needs a grammar (built-in name or path) or "
                        "a corpus (wikitext-2 or a folder) with tokenizer and seq_len")
    for key in SOURCES:
        if isinstance(data.get(key), str):
            data[key] = resolve_source(key, data[key], base=path.parent)
    return data


def _runs(raw: dict, data: dict, path: Path) -> tuple[tuple[str, TrainConfig], ...]:
    """Each [[runs]] table's name and TrainConfig ([train] under the run's own fields, the
    study's data source over both)."""
    shared = known_settings(raw.get("train", {}), f"[train] of study file {path}")
    configs, names = [], set()
    for run in raw.get("runs", []):
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
    return tuple(configs)
