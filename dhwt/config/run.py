"""TrainConfig: every setting of one training run, as a tree of sections, validated once.

    data        what the run learns: a grammar, a dataset or a text corpus, objective, splits
    model       dhwt.models.ModelConfig itself (its vocab_size and max_len come from the task)
    members     seeds and what members share (vary, init_from, redraw, freeze, symmetric_init)
    tying       the tie schedule, parsed (a TieSchedule, written in its canonical form)
    optim       steps, batch, the optimizer (AdamW, SGD or a population fit) and the lr schedule
    record      how often the run evaluates, snapshots and checkpoints; TensorBoard logging
    placement   where and how it computes: device, CPU threads, precision, compilation

Each section holds its fields' defaults and checks; TrainConfig checks what spans sections.
Settings have one flat name each (the TOML key, the CLI flag, the section's field), so a config
is built from flat values (`TrainConfig(d_model=8, steps=100)`, a flat TOML file, flags) and
written as TOML with one table per section; both forms read back. Defaults are the paper's EXor
setting (Bertolotti & Cazzola 2024): a 1-layer, 1-head transformer with d_model 4, d_ff 4, gelu,
post-LN, no positions, N(0, 1) embeddings; full batch; AdamW with lr 5e-4, betas (0.9, 0.999),
eps 1e-12, weight decay 0.1; the periodic cosine schedule (CosineAnnealingLR, T_max 1e4,
eta_min 1e-5, stepped every step).

A run's config.toml is the resolved config: every field, so the run can be repeated from it.
Optional fields that are unset (None) appear there as comments, since TOML has no null.

Examples:
    >>> from dhwt.config import TrainConfig
    >>> config = TrainConfig(grammar="parity", d_model=8, tie_schedule="Tied, UNTIE@50", steps=100)
    >>> config.model.d_model, config.optim.steps, str(config.tying.tie_schedule)
    (8, 100, 'untie@50')
    >>> config.replace(steps=200).optim.steps
    200
    >>> TrainConfig(grammar="parity", lr=-1)
    Traceback (most recent call last):
      ...
    dhwt.errors.DhwtError: lr must be a finite number > 0, got -1
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from dhwt.checks import (Boolean, Choice, Instance, Integer, Real, Text, check_choice,
                         check_fields, check_float, check_groups, check_int, check_masking,
                         check_twins, format_seeds, parse_seeds, split_init_from)
from dhwt.config.device import DEVICE
from dhwt.config.schedule import TieSchedule
from dhwt.defaults import LR_SCHEDULES, OBJECTIVES, PRECISIONS
from dhwt.errors import DhwtError
from dhwt.languages.spec import parse_assignments
from dhwt.languages.splits import SPLIT_SEED, TEST_FRACTION, VALID_FRACTION
from dhwt.models import ModelConfig
from dhwt.models.config import TASK_FIELDS
from dhwt.text.corpus import WIKITEXT2
from dhwt.text.masking import MASK_RATE, MASK_RULE
from dhwt.text.tokenizers import LISTED, check_tokenizer
from dhwt.text.twins import TWIN_DEFAULTS
from dhwt.tomlwrite import dumps
from dhwt.userfiles import parse_toml

FULL_BATCH = "full"
VARY = ("all", "embeddings")
REDRAW = ("both", "input", "output")
FREEZE = ("none", "non-embedding", "loaded")
OPTIMIZERS = ("adamw", "sgd", "population")
# Fields that say where a run computes or logs, not what: a resume may change them
# (dhwt.config.device; tensorboard only adds a view of metrics.jsonl; compile runs the same
# operations fused). threads, precision and tf32 stay: they change how floats are rounded.
PLACEMENT = ("device", "tensorboard", "compile")
#: The defaults of a grammar's split options (every dataset's).
SPLIT_DEFAULTS = {"valid_fraction": VALID_FRACTION, "test_fraction": TEST_FRACTION,
                  "split_seed": SPLIT_SEED}
#: Settings whose value is a table (in a flat config, not a section).
TABLES = ("set",)
#: Fields a resume may raise (an extension: `--resume --steps M`).
EXTENDABLE = ("steps",)
#: Fields a run records of its data when it is created (DataConfig.data_sha256): a resume keeps
#: the run's own, whatever the config it is given says.
RECORDED = ("data_sha256",)
#: The most CPU threads a run may ask for: a fixed bound, not this machine's core count, since a
#: config is read (and a run resumed, with the same threads) on other machines. Beyond a few
#: thousand, OpenMP fails to start the threads (the system's limit on a user's processes) and
#: kills the process; no CPU dhwt trains on has more than a few hundred cores.
MAX_THREADS = 1024


def _floats(section: object) -> None:
    """Store the float fields of a frozen section as floats (TOML and flags may give 1 for 1.0)."""
    for f in fields(section):
        value = getattr(section, f.name)
        if f.type in ("float", "float | None") and value is not None and not isinstance(
                value, bool) and isinstance(value, int):
            object.__setattr__(section, f.name, float(value))


@dataclass(frozen=True)
class DataConfig:
    """Exactly one of `grammar` (a built-in name or a grammar TOML, with `set`: its spec's keys
    overridden as `dhwt synth --set` does, {dotted key: value}; the dataset is built into
    RUN_DIR/data with valid_fraction, test_fraction and split_seed), `data` alone (a dataset
    directory written by `dhwt synth`) or `corpus` (natural text: `wikitext-2` or a folder with
    train/valid/test.txt, cut into windows of `seq_len` by `tokenizer` = gpt2 | bpe:N | word |
    char, see dhwt.text.text_task; with `corpus = "wikitext-2"`, `data` may say where
    WikiText-2 lies; `eval_windows` caps the evaluation windows of every split; a masked LM
    masks by `mask_rate` and `mask_rule`, dhwt.text.masking; `twins`, `twin_p`,
    `twin_kind`, `twin_seed` plant twin tokens, dhwt.text.twins).

    The split options apply to a grammar's dataset only, where unset ones take every dataset's
    defaults (dhwt.languages.splits). A dataset keeps the split it was built with: unset, they
    stay unset (config.toml says the split is the dataset's); given, they state how it was
    built, which the trainer checks (dhwt.training.runner). A text corpus has its own files: they
    stay unset (the defaults, which configs of older versions recorded, are dropped).

    `data_sha256`: the checksum of the data (dhwt.checksums: the dataset's files or the corpus'
    texts), which a run records in its config.toml when it is created; every later read of the
    data (a resume, `dhwt analyze`, `Run.task`, a study continued) refuses data that no longer
    has it (dhwt.runs.run.check_data). Given in a new run's config, it names the data the run
    must train on. Unset: not checked (runs made before dhwt recorded it)."""

    grammar: str | None = field(default=None, metadata={"of": "source"})
    set: dict[str, object] | None = field(default=None, metadata={"of": "grammar"})
    data: str | None = field(default=None, metadata={"of": "source"})
    corpus: str | None = field(default=None, metadata={"of": "source"})
    tokenizer: str | None = field(default=None, metadata={"of": "text"})
    seq_len: int | None = field(default=None, metadata={"of": "text"})
    eval_windows: int | None = field(default=None, metadata={"of": "text"})
    objective: str = "mlm"
    mask_rate: float | None = field(default=None, metadata={"of": "text"})
    mask_rule: str | None = field(default=None, metadata={"of": "text"})
    twins: int | list[str] | None = field(default=None, metadata={"of": "text"})
    twin_p: float | None = field(default=None, metadata={"of": "text"})
    twin_kind: str | None = field(default=None, metadata={"of": "text"})
    twin_seed: int | None = field(default=None, metadata={"of": "text"})
    valid_fraction: float | None = field(default=None, metadata={"of": "split"})
    test_fraction: float | None = field(default=None, metadata={"of": "split"})
    split_seed: int | None = field(default=None, metadata={"of": "split"})
    data_sha256: str | None = None

    def __post_init__(self) -> None:
        check_choice("objective", self.objective, OBJECTIVES)
        self._checksum()
        if self.set is not None:
            if self.grammar is None:
                raise DhwtError("set (overrides of a grammar's spec, --set) needs grammar; a "
                                "dataset or corpus is used as it is")
            object.__setattr__(self, "set", overrides(self.set))
        self._splits()
        if self.grammar is not None and self.data is not None:
            raise DhwtError("give either grammar or data, not both "
                            f"(got grammar {self.grammar!r} and data {self.data!r})")
        if self.corpus is None:
            given = [k for k in TEXT_OPTIONS if getattr(self, k) is not None]
            if given:
                raise DhwtError(f"{given[0]} is an option of text corpora; give corpus too "
                                "(e.g. corpus = \"wikitext-2\")")
            return
        if self.grammar is not None:
            raise DhwtError(f"give either grammar or corpus, not both (got grammar "
                            f"{self.grammar!r} and corpus {self.corpus!r})")
        if self.data is not None and self.corpus != WIKITEXT2:
            raise DhwtError(f"data (where WikiText-2 lies) goes with corpus = \"{WIKITEXT2}\" "
                            f"only; corpus {self.corpus!r} is itself a path")
        if self.tokenizer is None or self.seq_len is None:
            raise DhwtError(f"a text corpus needs tokenizer ({LISTED}) and seq_len")
        check_tokenizer(self.tokenizer)
        check_int("seq_len", self.seq_len, low=1)
        if self.eval_windows is not None:
            check_int("eval_windows", self.eval_windows, low=1)
        self._masking()
        self._twins()

    def _checksum(self) -> None:
        """data_sha256 is a SHA-256 in hex, of a data source the config names."""
        value = self.data_sha256
        if value is None:
            return
        if not isinstance(value, str) or len(value) != 64 or \
                not set(value) <= set("0123456789abcdef"):
            raise DhwtError(f"data_sha256 must be a SHA-256 (64 hex digits, lower case), got "
                            f"{value!r}")
        if self.grammar is None and self.data is None and self.corpus is None:
            raise DhwtError("data_sha256 is the checksum of the data; give grammar, data or "
                            "corpus too")

    def _masking(self) -> None:
        """A masked LM on text takes the masking defaults (dhwt.text.masking); a causal one
        masks nothing."""
        if self.objective == "clm":
            given = "mask_rate" if self.mask_rate is not None else (
                "mask_rule" if self.mask_rule is not None else None)
            if given:
                raise DhwtError(f"{given} is an option of masked LM (objective = \"mlm\"); a "
                                "causal LM masks nothing")
            return
        if self.mask_rate is None:
            object.__setattr__(self, "mask_rate", MASK_RATE)
        if self.mask_rule is None:
            object.__setattr__(self, "mask_rule", MASK_RULE)
        check_masking(self.mask_rate, self.mask_rule)
        _floats(self)

    def _twins(self) -> None:
        """Twin planting (dhwt.text.twins): twin_p, twin_kind and twin_seed need twins and
        take their defaults with it."""
        if self.twins is None:
            given = [k for k in TWIN_DEFAULTS if getattr(self, k) is not None]
            if given:
                raise DhwtError(f"{given[0]} is an option of twin planting; give twins too (the "
                                "number of most frequent tokens, or a list of tokens)")
            return
        for name, value in TWIN_DEFAULTS.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        object.__setattr__(self, "twins", check_twins(self.twins, self.twin_p, self.twin_kind,
                                                      self.twin_seed))
        _floats(self)

    def _splits(self) -> None:
        """Check the split options and settle them as the class docstring says."""
        given = {name: getattr(self, name) for name in SPLIT_OPTIONS
                 if getattr(self, name) is not None}
        if self.corpus is not None:
            extra = [k for k, v in given.items() if v != SPLIT_DEFAULTS[k]]
            if extra:
                raise DhwtError(f"{extra[0]} splits a grammar's strings; a text corpus has its "
                                "own train, valid and test files")
            for name in given:
                object.__setattr__(self, name, None)
            return
        if self.grammar is not None or given:
            for name in SPLIT_OPTIONS:
                if getattr(self, name) is None:
                    object.__setattr__(self, name, SPLIT_DEFAULTS[name])
            check_int("split_seed", self.split_seed, low=0)
            check_float("valid_fraction", self.valid_fraction, low=0.0, high=1.0,
                        high_open=True)
            check_float("test_fraction", self.test_fraction, low=0.0, high=1.0, high_open=True)
            _floats(self)
            if self.valid_fraction + self.test_fraction >= 1.0:
                raise DhwtError(f"valid_fraction + test_fraction must leave training strings, "
                                f"got {self.valid_fraction} + {self.test_fraction}")


def data_keys(*kinds: str) -> tuple[str, ...]:
    """DataConfig's settings of the given kinds, in field order: each field says in its
    metadata which source it belongs to ("source": it names one; "grammar" and "split": a
    grammar's options; "text": a text corpus'), so a new setting is declared once, there.

    Examples:
        >>> data_keys("source")
        ('grammar', 'data', 'corpus')
        >>> data_keys("split")
        ('valid_fraction', 'test_fraction', 'split_seed')
    """
    return tuple(f.name for f in fields(DataConfig) if f.metadata.get("of") in kinds)


#: The settings that name a data source (dhwt.config.sources resolves their values).
SOURCES = data_keys("source")
#: The options of a grammar's split (a dataset's too: they state how it was built).
SPLIT_OPTIONS = data_keys("split")
#: The options of a text corpus.
TEXT_OPTIONS = data_keys("text")
#: The settings that say what the data is, beside the split: a flag naming another source
#: replaces them all (dhwt.commands.train).
SOURCE_SETTINGS = data_keys("source", "grammar", "text")
#: The keys of a study's [data] table for a grammar, and for a text corpus (with `data`:
#: where WikiText-2 lies).
GRAMMAR_KEYS = frozenset({"grammar", *data_keys("grammar", "split")})
TEXT_KEYS = frozenset({"corpus", "data", *TEXT_OPTIONS})


def overrides(value: object) -> dict[str, object] | None:
    """A grammar's `set`, as {dotted key: value}: from a table (nested or with dotted keys, as
    a TOML file gives it) or from `KEY=VALUE` strings (as `--set` gives them); None if empty.

    Examples:
        >>> overrides({"classes": {"1": {"skew": 0.8}}, "n_bits": 5})
        {'classes.1.skew': 0.8, 'n_bits': 5}
        >>> overrides(["n_bits=5", "classes.0.p=[0.2, 0.8]"])
        {'n_bits': 5, 'classes.0.p': [0.2, 0.8]}
    """
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        flat = parse_assignments(value)
    elif isinstance(value, dict):
        flat = {}

        def add(table: dict, prefix: str) -> None:
            for key, item in table.items():
                if isinstance(item, dict):
                    add(item, f"{prefix}{key}.")
                else:
                    flat[f"{prefix}{key}"] = item
        add(value, "")
    else:
        raise DhwtError(f"set must be a table of spec keys (e.g. {{ n_bits = 5 }}) or KEY=VALUE "
                        f"strings, got {value!r}")
    return flat or None


@dataclass(frozen=True)
class MembersConfig:
    """The ensemble (dhwt.training.members): `vary = "all"` draws every weight of member i from
    seeds[i]; `vary = "embeddings"` gives every member the non-embedding weights, the data order
    and the dropout masks of seeds[0], and only its input and output embeddings from its own
    seed. `init_from = "RUN_DIR[@STEP]"` starts from member `init_member` of that run's
    checkpoint (newest, or the one of STEP) and re-draws `redraw` ("input", "output" or "both"
    embedding matrices) from each member's own seed; the rest is the checkpoint's. `freeze`:
    "none", "non-embedding" (only the embedding matrices train) or "loaded" (only the re-drawn
    matrices train; needs init_from). Frozen weights get no gradient and no optimizer state.
    `symmetric_init`: groups of symbols (e.g. [["0a", "0b"]]) whose input rows start equal in
    every member: each symbol of a group starts with its group's first symbol's row (proofs/T3
    (a), (b) start from e1 = e2); a tied member's matrix is its output matrix too."""

    seeds: list[int] = field(default_factory=lambda: [42])
    vary: str = "all"
    init_from: str | None = None
    init_member: int = 0
    redraw: str = "both"
    freeze: str = "none"
    symmetric_init: list[list[str]] = field(default_factory=list)

    CONSTRAINTS = {"seeds": [Instance(list)], "vary": [Choice(VARY)],
                   "init_from": [Text('"RUN_DIR" or "RUN_DIR@STEP"', split_init_from), None],
                   "init_member": [Integer(0)], "redraw": [Choice(REDRAW)],
                   "freeze": [Choice(FREEZE)], "symmetric_init": [Instance(list)]}

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", parse_seeds(self.seeds))
        object.__setattr__(self, "symmetric_init", check_groups("symmetric_init",
                                                               self.symmetric_init))
        check_fields(self, self.CONSTRAINTS)
        if self.init_from is None and (self.freeze == "loaded" or self.redraw != "both"
                                       or self.init_member):
            what = ("freeze = 'loaded'" if self.freeze == "loaded" else
                    f"redraw = {self.redraw!r}" if self.redraw != "both" else "init_member")
            raise DhwtError(f"{what} needs init_from = \"RUN_DIR[@STEP]\" (the run to start "
                            "from)")


@dataclass(frozen=True)
class TyingConfig:
    """`tie_schedule` (dhwt.config.schedule; text is parsed against the run's steps by
    TrainConfig), and `tie_penalty`: lambda * ||E_in - E_out||^2 per member while untied."""

    tie_schedule: TieSchedule | str = "tied"
    tie_penalty: float = 0.0

    CONSTRAINTS = {"tie_schedule": [Instance(TieSchedule), Text("a tie schedule")],
                   "tie_penalty": [Real(0.0)]}

    def __post_init__(self) -> None:
        check_fields(self, self.CONSTRAINTS)
        _floats(self)


@dataclass(frozen=True)
class OptimConfig:
    """`steps` optimizer updates ("step N" means "after N updates"); `batch_size` strings (or
    windows) per member per step, None for the full batch; `optimizer` "adamw" (betas, eps and
    decoupled weight decay) or "sgd" (plain gradient descent: no momentum, betas and eps unused;
    its weight decay, added to the gradient, multiplies every weight by 1 - lr * weight_decay
    per step as AdamW's does); the lr schedule (dhwt.training.lr):
    `warmup_steps` of linear warmup, then "constant", "cosine" (one decay from lr to lr_min over
    the remaining steps) or "periodic-cosine" (torch's CosineAnnealingLR with T_max = lr_period,
    eta_min = lr_min, stepped every step: the paper's schedule). `grad_clip`: each member's
    gradient clipped to this norm on its own (a global norm would couple the members).
    `optimizer` "population" (a synthetic language, full batch, a constant tie schedule and lr):
    every member fitted to the language's exact population objective, CE + weight_decay / 2
    ||θ||² (an L2 term in the objective, not decoupled decay): `steps` Adam updates at `lr`, then
    up to `lbfgs_steps` L-BFGS iterations, then up to `newton_steps` iterations of trust-region
    Newton on the exact Hessian (0: none), with a certificate per member
    (dhwt.training.population; the Hessian's smallest eigenvalue where Newton ran)."""

    steps: int = 10_000
    batch_size: int | None = None
    optimizer: str = "adamw"
    lr: float = 5e-4
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-12
    weight_decay: float = 0.1
    lr_schedule: str = "periodic-cosine"
    lr_min: float = 1e-5
    lr_period: int = 10_000
    warmup_steps: int = 0
    grad_clip: float | None = None
    lbfgs_steps: int = 2000
    newton_steps: int = 0

    CONSTRAINTS = {
        "steps": [Integer(1)], "batch_size": [Integer(1), None],
        "optimizer": [Choice(OPTIMIZERS)], "lr": [Real(0.0, low_open=True)],
        "beta1": [Real(0.0, 1.0, high_open=True)], "beta2": [Real(0.0, 1.0, high_open=True)],
        "eps": [Real(0.0, low_open=True)], "weight_decay": [Real(0.0)],
        "lr_schedule": [Choice(LR_SCHEDULES)], "lr_min": [Real(0.0)], "lr_period": [Integer(1)],
        "warmup_steps": [Integer(0)], "grad_clip": [Real(0.0, low_open=True), None],
        "lbfgs_steps": [Integer(0)], "newton_steps": [Integer(0)]}

    def __post_init__(self) -> None:
        if self.batch_size == FULL_BATCH:  # the TOML and flag spelling of None
            object.__setattr__(self, "batch_size", None)
        check_fields(self, self.CONSTRAINTS)
        if self.optimizer == "population" and (self.lr_schedule, self.warmup_steps,
                                               self.batch_size) != ("constant", 0, None):
            raise DhwtError('optimizer "population" fits the whole language at a constant lr: '
                            'set lr_schedule = "constant", batch_size = "full" and no '
                            "warmup_steps")
        _floats(self)
        if self.lr_min > self.lr:
            raise DhwtError(f"lr_min ({self.lr_min}) must not exceed lr ({self.lr})")
        if self.warmup_steps >= self.steps:
            raise DhwtError(f"warmup_steps ({self.warmup_steps}) must be less than steps "
                            f"({self.steps})")


@dataclass(frozen=True)
class RecordConfig:
    """Evaluate, snapshot the embeddings and checkpoint every N steps; step 0 and the last step
    always (dhwt.training.trainer). `population_every` N > 0 (a multiple of eval_every; synthetic
    languages only) adds the exact population fit to those evaluations (split "population":
    cross-entropy and expected accuracy over every context of the language, no sampling;
    dhwt.analysis.population); 0 never. `tensorboard`: also write metrics.jsonl's numbers as
    TensorBoard scalars into RUN_DIR/tensorboard (dhwt.runs.metrics.MetricsWriter; needs the
    optional tensorboard package); it says where the run logs, not what it computes, so a resume
    may turn it on or off, as it may change the device (PLACEMENT)."""

    eval_every: int = 100
    snapshot_every: int = 100
    checkpoint_every: int = 1000
    population_every: int = 0
    tensorboard: bool = False

    CONSTRAINTS = {"eval_every": [Integer(1)], "snapshot_every": [Integer(1)],
                   "checkpoint_every": [Integer(1)], "population_every": [Integer(0)],
                   "tensorboard": [Boolean()]}

    def __post_init__(self) -> None:
        check_fields(self, self.CONSTRAINTS)
        if self.population_every % self.eval_every:
            raise DhwtError(f"population_every must be a multiple of eval_every "
                            f"({self.eval_every}), got {self.population_every}")


@dataclass(frozen=True)
class Placement:
    """`device`: "cpu", "cuda", "cuda:N" or "auto" (dhwt.config.device), recorded as given and
    changeable on resume. `threads`: torch CPU threads, 1 to MAX_THREADS; 1 by default, since the
    tiny models here spend their time in per-op overhead, which more threads only add to.
    `precision` (dhwt.training.precision): "fp32", or "bf16-mixed" (matrix products in bfloat16
    under autocast; weights, optimizer state, LayerNorm, softmax and loss in float32). `tf32`:
    float32 matrix products on a GPU's TF32 units (CUDA only). `compile`: the model's forward
    through torch.compile."""

    device: str = "cpu"
    threads: int = 1
    precision: str = "fp32"
    tf32: bool = False
    compile: bool = False

    CONSTRAINTS = {"device": [DEVICE],
                   "threads": [Integer(1, MAX_THREADS)], "precision": [Choice(PRECISIONS)],
                   "tf32": [Boolean()], "compile": [Boolean()]}

    def __post_init__(self) -> None:
        check_fields(self, self.CONSTRAINTS)
        if self.tf32 and self.device == "cpu":
            raise DhwtError("tf32 = true needs a CUDA device (TF32 is a GPU's float32 mode); "
                            "device is cpu")


SECTIONS = {"data": DataConfig, "model": ModelConfig, "members": MembersConfig,
            "tying": TyingConfig, "optim": OptimConfig, "record": RecordConfig,
            "placement": Placement}
#: Each flat setting's section.
SECTION_OF = {f.name: name for name, cls in SECTIONS.items() for f in fields(cls)
              if f.name not in TASK_FIELDS}


@dataclass(frozen=True, init=False)
class TrainConfig:
    """One training run: the sections above, built from flat settings (unknown names are an
    error) and checked together. Every bad value raises a one-line DhwtError."""

    data: DataConfig
    model: ModelConfig
    members: MembersConfig
    tying: TyingConfig
    optim: OptimConfig
    record: RecordConfig
    placement: Placement

    def __init__(self, **values: object) -> None:
        _check_keys(values, "config")
        parts: dict[str, dict[str, object]] = {name: {} for name in SECTIONS}
        for key, value in values.items():
            parts[SECTION_OF[key]][key] = value
        data = DataConfig(**parts["data"])
        optim = OptimConfig(**parts["optim"])
        tying = TyingConfig(**parts["tying"])
        schedule = TieSchedule.parse(str(tying.tie_schedule), optim.steps)
        built = {"data": data, "optim": optim,
                 "tying": TyingConfig(schedule, tying.tie_penalty),
                 "model": ModelConfig(**parts["model"], causal=data.objective == "clm"),
                 **{name: SECTIONS[name](**parts[name])
                    for name in ("members", "record", "placement")}}
        for name, section in built.items():
            object.__setattr__(self, name, section)
        self._check_across()

    def _check_across(self) -> None:
        """What spans sections: text data and the batch, the schedule and the members."""
        schedule, members = self.tying.tie_schedule, self.members
        if self.data.corpus is not None and self.optim.batch_size is None:
            raise DhwtError("a text corpus needs an integer batch_size (windows per member per "
                            "step); a full batch would be the whole corpus")
        if self.tying.tie_penalty and schedule.initial_tied and not schedule.events:
            raise DhwtError(f"tie_penalty {self.tying.tie_penalty} has no effect with "
                            f"tie_schedule {str(schedule)!r}: the embeddings are never untied")
        if members.init_from is not None and members.redraw != "both" and schedule.initial_tied:
            raise DhwtError(f"redraw = {members.redraw!r} keeps one embedding matrix of the "
                            f"source, which needs untied embeddings; tie_schedule is "
                            f"{str(schedule)!r}")
        if members.freeze != "none" and schedule.events:
            raise DhwtError(f"freeze = {members.freeze!r} needs a fixed tying state: "
                            f"tie_schedule {str(schedule)!r} switches it (tied or untied only)")

    def model_for(self, vocab_size: int, max_len: int) -> ModelConfig:
        """The model for a task's vocabulary and sequence length."""
        return self.model.for_task(vocab_size, max_len, self.model.causal)

    def replace(self, **changes: object) -> TrainConfig:
        """This config with some flat settings changed, checked again."""
        return TrainConfig(**{**self.to_dict(), **changes})

    @classmethod
    def from_dict(cls, values: dict[str, object], source: str = "config") -> TrainConfig:
        """A config from flat settings (a parsed TOML file, CLI options), or from one table per
        section; unknown keys are errors naming `source`."""
        return cls(**known_settings(values, source))

    @classmethod
    def from_toml(cls, path: str | Path) -> TrainConfig:
        """Read a config TOML (flat keys, or one table per section as `to_toml` writes)."""
        return cls.from_dict(cls.toml_values(path), source=str(path))

    @classmethod
    def toml_values(cls, path: str | Path) -> dict[str, object]:
        """The settings of a config TOML, flat, checked to be known but not yet validated as a
        config, so values given elsewhere (flags) can complete them first: a file of LSTM sizes
        is only valid once `--architecture lstm` joins it."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise DhwtError(f"config file {path} does not exist") from None
        except UnicodeDecodeError as exc:
            raise DhwtError(f"config file {path} is not valid TOML: {exc}") from None
        return known_settings(parse_toml(text, f"config file {path}"), f"config file {path}")

    def to_dict(self) -> dict[str, object]:
        """Every setting, flat, as plain values (batch_size None stays None; the tie schedule
        in its canonical text)."""
        flat: dict[str, object] = {}
        for name in SECTIONS:
            values = asdict(getattr(self, name))
            flat.update({k: v for k, v in values.items() if k in SECTION_OF})
        flat["tie_schedule"] = str(self.tying.tie_schedule)
        return flat

    def identity(self) -> dict[str, object]:
        """The fields that fix what the run computes: `to_dict()` without PLACEMENT. A resume
        must repeat these; it may change the others."""
        return {k: v for k, v in self.to_dict().items() if k not in PLACEMENT}

    def resume_key(self) -> dict[str, object]:
        """What a resume must repeat: the identity without the fields it may extend and those
        the run records itself (RECORDED)."""
        return {k: v for k, v in self.identity().items() if k not in EXTENDABLE + RECORDED}

    def to_toml(self) -> str:
        """The resolved config as TOML, one table per section; unset (None) values follow
        their table as comments."""
        flat = self.to_dict()
        flat["seeds"] = format_seeds(self.members.seeds)
        if self.optim.batch_size is None:
            flat["batch_size"] = FULL_BATCH
        data = self.data
        own = ("" if data.grammar is not None or data.data is None and data.corpus is None
               else ": the corpus' own files" if data.corpus is not None
               else ": the dataset's own split")
        unset = {k: own if k in SPLIT_OPTIONS else "" for k in flat}
        text = "# dhwt train: resolved config\n"
        for name in SECTIONS:
            values = {k: v for k, v in flat.items() if SECTION_OF[k] == name}
            text += "\n" + dumps({name: {k: v for k, v in values.items()
                                        if v is not None and k not in TABLES}})
            text += "".join(f"# {k} = (not set{unset[k]})\n" for k, v in values.items()
                            if v is None)
            tables = {k: v for k, v in values.items() if v is not None and k in TABLES}
            text += "\n" + dumps({name: tables}) if tables else ""
        return text


def known_settings(values: dict[str, object], source: str) -> dict[str, object]:
    """`values` (flat settings, or one table per section) as flat settings, each checked to be
    a setting but not yet validated as a config (a study's [train] table holds only part of
    one); DhwtError naming `source` and the first unknown key.

    Examples:
        >>> known_settings({"optim": {"lr": 0.01}, "seeds": "1-2"}, "[train]")
        {'seeds': '1-2', 'lr': 0.01}
        >>> known_settings({"lrr": 0.01}, "[train]")
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: unknown key 'lrr' in [train]; allowed keys: ...
    """
    values = _flatten(values, source)
    _check_keys(values, source)
    return values


def _flatten(values: dict[str, object], source: str) -> dict[str, object]:
    """Flat settings from a mapping that may hold one table per section."""
    tables = {k: v for k, v in values.items() if isinstance(v, dict) and k not in TABLES}
    flat = {k: v for k, v in values.items() if k not in tables}
    for name, table in tables.items():
        if name not in SECTIONS:
            raise DhwtError(f"{source} has a table [{name}]; the tables are "
                            f"{', '.join(SECTIONS)} (or give flat keys, e.g. d_model = 4)")
        for key, value in table.items():
            if SECTION_OF.get(key, name) != name:
                raise DhwtError(f"{source}: {key} belongs in [{SECTION_OF[key]}], not [{name}]")
            if key in flat:
                raise DhwtError(f"{source} gives {key} twice")
            flat[key] = value
    return flat


def _check_keys(values: dict[str, object], source: str) -> None:
    """DhwtError naming the first key of `values` that is not a setting."""
    unknown = sorted(set(values) - set(SECTION_OF))
    if unknown:
        raise DhwtError(f"unknown key {unknown[0]!r} in {source}; allowed keys: "
                        f"{', '.join(sorted(SECTION_OF))}")
