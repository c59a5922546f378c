"""TrainConfig: every setting of one training run, validated, readable from and writable to TOML.

Defaults are the paper's EXor setting (Bertolotti & Cazzola 2024): a 1-layer, 1-head transformer
with d_model 4, d_ff 4, gelu, post-LN, no positions, N(0, 1) embeddings; full batch; AdamW with
lr 5e-4, betas (0.9, 0.999), eps 1e-12, weight decay 0.1; the periodic cosine schedule
(CosineAnnealingLR, T_max 1e4, eta_min 1e-5, stepped every step).

A run's config.toml is the resolved config: every field, so the run can be repeated from it.
Optional fields that are unset (None) appear there as comments, since TOML has no null.
"""

from __future__ import annotations

import math
import tomllib
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from dhwt.errors import DhwtError, brief
from dhwt.languages.corpus import WIKITEXT2
from dhwt.languages.tokenizers import check_tokenizer
from dhwt.languages.tomlwrite import dumps
from dhwt.models import ModelConfig
from dhwt.config.device import check_device
from dhwt.config.schedule import TieSchedule

OBJECTIVES = ("mlm", "clm")
MODEL_FIELDS = ("architecture", "d_model", "n_layers", "n_heads", "d_ff", "dropout", "ff_dropout",
                "activation", "norm", "final_norm", "positions", "output_bias", "emb_init",
                "emb_std", "emb_scale", "init", "lstm_layers", "lstm_hidden", "mixer_layers",
                "token_mixing", "channel_mixing")
LR_SCHEDULES = ("constant", "cosine", "periodic-cosine")
FULL_BATCH = "full"
# Fields that say where a run computes, not what: a resume may change them (dhwt.config.device)
PLACEMENT = ("device",)
#: Fields a resume may raise (an extension: `--resume --steps M`).
EXTENDABLE = ("steps",)
VARY = ("all", "embeddings")
REDRAW = ("both", "input", "output")
FREEZE = ("none", "non-embedding", "loaded")


def split_init_from(text: str) -> tuple[str, int | None]:
    """`"RUN_DIR"` or `"RUN_DIR@STEP"` -> (RUN_DIR, STEP or None)."""
    if not isinstance(text, str) or not text:
        raise DhwtError(f"init_from must be \"RUN_DIR\" or \"RUN_DIR@STEP\", got {text!r}")
    run, at, step = text.rpartition("@")
    if not at:
        return text, None
    if not run or not step.isdigit():
        raise DhwtError(f"init_from must be \"RUN_DIR\" or \"RUN_DIR@STEP\" (STEP a whole "
                        f"number), got {text!r}")
    return run, int(step)


def parse_seeds(text: str | int | list[int] | tuple[int, ...]) -> list[int]:
    """Seeds from `"42-46"` (inclusive range), `"1,2,5"`, a mix such as `"1-3,7"`, an int or a list.

    Seeds must be distinct non-negative integers: two equal seeds would train identical members.
    """
    if isinstance(text, bool):
        raise DhwtError(f"seeds must be integers or a string like '42-46' or '1,2,5', got {text!r}")
    if isinstance(text, int):
        items: list[int] = [text]
    elif isinstance(text, (list, tuple)):
        if not all(isinstance(s, int) and not isinstance(s, bool) for s in text):
            raise DhwtError(f"seeds must be a list of integers, got [{brief(text)}]")
        items = list(text)
    elif isinstance(text, str):
        items = []
        for part in text.replace(" ", "").split(","):
            lo, dash, hi = part.partition("-")
            if not (lo.isdigit() and (not dash or hi.isdigit())):
                raise DhwtError(
                    f"bad seeds {text!r}: {part!r} is not an integer or a range like 42-46"
                )
            if dash and int(hi) < int(lo):
                raise DhwtError(f"bad seeds {text!r}: range {part!r} runs backwards")
            items.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
    else:
        raise DhwtError(f"seeds must be a string like '42-46' or a list of integers, got {text!r}")
    if not items:
        raise DhwtError("seeds must name at least one seed")
    negative = [s for s in items if s < 0]
    if negative:
        raise DhwtError(f"seeds must be non-negative, got {brief(negative, str)}")
    repeated = sorted(s for s, n in Counter(items).items() if n > 1)
    if repeated:
        raise DhwtError(f"seeds must be distinct (equal seeds train identical members), "
                        f"{brief(repeated, str)} repeated")
    return items


def format_seeds(seeds: list[int]) -> str:
    """The compact text form of `seeds`: consecutive runs as ranges, e.g. [42..46, 50] -> '42-46,50'."""
    parts, start = [], 0
    for i in range(1, len(seeds) + 1):
        if i == len(seeds) or seeds[i] != seeds[i - 1] + 1:
            lo, hi = seeds[start], seeds[i - 1]
            parts.append(str(lo) if lo == hi else f"{lo}-{hi}")
            start = i
    return ",".join(parts)


@dataclass
class TrainConfig:
    """One training run. Validated on construction; every bad value raises a one-line DhwtError.

    Data: exactly one of `grammar` (a built-in name or a grammar TOML; the dataset is built into
    RUN_DIR/data), `data` alone (a dataset directory written by `dhwt synth`) or `corpus` (natural
    text, causal LM only: `wikitext-2` or a folder with train/valid/test.txt, cut into windows of
    `seq_len` by `tokenizer` = gpt2 | bpe:N | word, see dhwt.languages.text_task; with `corpus =
    "wikitext-2"`, `data` may say where WikiText-2 lies; `eval_windows` caps the evaluation windows
    of every split, for smoke tests). `train()` itself takes a loaded Task and only records these.
    `valid_fraction`, `test_fraction` and `split_seed` are used when building the dataset from
    `grammar`.

    Members (dhwt.training.members): `vary = "all"` draws every weight of member i from seeds[i];
    `vary = "embeddings"` gives every member the non-embedding weights, the data order and the
    dropout masks of seeds[0], and only its input and output embeddings from its own seed.
    `init_from = "RUN_DIR[@STEP]"` starts from member `init_member` of that run's checkpoint
    (newest, or the one of STEP) and re-draws `redraw` ("input", "output" or "both" embedding
    matrices) from each member's own seed; the rest is the checkpoint's. `freeze`: "none",
    "non-embedding" (only the embedding matrices train) or "loaded" (only the re-drawn matrices
    train; needs init_from). Frozen weights get no gradient and no optimizer state.

    Steps: `steps` optimizer updates. "Step N" means "after N updates". Tie-schedule events at
    step N take effect after N updates, before update N+1 is computed; evaluations, snapshots and
    checkpoints at step N see the state after those events.

    lr schedule (see dhwt.training.lr): `warmup_steps` of linear warmup, then `lr_schedule`:
    "constant"; "cosine" (one decay from lr to lr_min over the remaining steps); or
    "periodic-cosine" (torch's CosineAnnealingLR with T_max = lr_period, eta_min = lr_min, stepped
    every step, so periodic with period 2 * lr_period: the paper's schedule).

    threads: torch CPU threads during the run. 1 by default: the tiny
    models here spend their time in per-op overhead, which more threads only add to (4x slower
    with 2 threads on a busy 2-core machine); raise it for models of d_model in the hundreds.

    grad_clip: if set, each ensemble member's gradient is clipped to this norm on its own (a
    global norm would couple members, so member i would no longer equal a solo run of its seed).

    device: "cpu" (default), "cuda", "cuda:N" or "auto" (see dhwt.config.device). The run
    directory records the setting as given, not what it resolved to, and a resume may change it
    (a run started on a GPU continues on the CPU and vice versa).
    """

    # data
    grammar: str | None = None
    data: str | None = None
    corpus: str | None = None
    tokenizer: str | None = None
    seq_len: int | None = None
    eval_windows: int | None = None
    objective: str = "mlm"
    valid_fraction: float = 0.1
    test_fraction: float = 0.1
    split_seed: int = 14
    # model: the fields of dhwt.models.ModelConfig that are not set by the task (MODEL_FIELDS);
    # defaults: the paper's EXor models; architecture "transformer", "lstm" or "mixer" (fields of
    # one architecture must keep their defaults under another, see ModelConfig)
    architecture: str = "transformer"
    d_model: int = 4
    n_layers: int = 1
    n_heads: int = 1
    d_ff: int = 4
    dropout: float = 0.0
    ff_dropout: bool = True
    activation: str = "gelu"
    norm: str = "post"
    final_norm: bool = False
    positions: str = "none"
    output_bias: bool = False
    emb_init: str = "normal"
    emb_std: float = 1.0
    emb_scale: bool = False
    init: str = "torch"
    lstm_layers: int = 2
    lstm_hidden: int = 8
    mixer_layers: int = 1
    token_mixing: int = 4
    channel_mixing: int = 8
    # ensemble and tying
    seeds: list[int] = field(default_factory=lambda: [42])
    vary: str = "all"
    init_from: str | None = None
    init_member: int = 0
    redraw: str = "both"
    freeze: str = "none"
    tie_schedule: str = "tied"
    tie_penalty: float = 0.0
    # optimisation
    steps: int = 10_000
    batch_size: int | None = None
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
    # bookkeeping
    eval_every: int = 100
    snapshot_every: int = 100
    checkpoint_every: int = 1000
    threads: int = 1
    device: str = "cpu"

    def __post_init__(self) -> None:
        self.seeds = parse_seeds(self.seeds)
        if self.batch_size == FULL_BATCH:
            self.batch_size = None
        _check_choice("objective", self.objective, OBJECTIVES)
        _check_choice("lr_schedule", self.lr_schedule, LR_SCHEDULES)
        check_device(self.device)
        for name in ("steps", "lr_period", "eval_every", "snapshot_every", "checkpoint_every",
                     "threads"):
            _check_int(name, getattr(self, name), low=1)
        if self.batch_size is not None:
            _check_int("batch_size", self.batch_size, low=1)
        _check_int("warmup_steps", self.warmup_steps, low=0)
        _check_int("split_seed", self.split_seed, low=0)
        _check_float("lr", self.lr, low=0.0, low_open=True)
        _check_float("lr_min", self.lr_min, low=0.0)
        _check_float("eps", self.eps, low=0.0, low_open=True)
        _check_float("weight_decay", self.weight_decay, low=0.0)
        _check_float("tie_penalty", self.tie_penalty, low=0.0)
        _check_float("beta1", self.beta1, low=0.0, high=1.0, high_open=True)
        _check_float("beta2", self.beta2, low=0.0, high=1.0, high_open=True)
        _check_float("valid_fraction", self.valid_fraction, low=0.0, high=1.0, high_open=True)
        _check_float("test_fraction", self.test_fraction, low=0.0, high=1.0, high_open=True)
        if self.grad_clip is not None:
            _check_float("grad_clip", self.grad_clip, low=0.0, low_open=True)
        for f in fields(self):  # TOML and CLI may give 1 for 1.0; store floats as floats
            if f.type in ("float", "float | None") and getattr(self, f.name) is not None:
                setattr(self, f.name, float(getattr(self, f.name)))
        if self.grammar is not None and self.data is not None:
            raise DhwtError("give either grammar or data, not both "
                            f"(got grammar {self.grammar!r} and data {self.data!r})")
        self._check_text()
        schedule = TieSchedule.parse(self.tie_schedule, self.steps)
        self._check_members(schedule)
        if self.tie_penalty and schedule.initial_tied and not schedule.events:
            raise DhwtError(f"tie_penalty {self.tie_penalty} has no effect with tie_schedule "
                            f"{self.tie_schedule!r}: the embeddings are never untied")
        # validates the model fields (and that the architecture suits the objective)
        self.model_config(vocab_size=1, max_len=1, causal=self.objective == "clm")
        if self.lr_min > self.lr:
            raise DhwtError(f"lr_min ({self.lr_min}) must not exceed lr ({self.lr})")
        if self.warmup_steps >= self.steps:
            raise DhwtError(f"warmup_steps ({self.warmup_steps}) must be less than steps "
                            f"({self.steps})")
        if self.valid_fraction + self.test_fraction >= 1.0:
            raise DhwtError(f"valid_fraction + test_fraction must leave training strings, got "
                            f"{self.valid_fraction} + {self.test_fraction}")

    def _check_text(self) -> None:
        """The text-corpus fields: all or none, and only for a causal LM with a batch size."""
        text = {"tokenizer": self.tokenizer, "seq_len": self.seq_len,
                "eval_windows": self.eval_windows}
        if self.corpus is None:
            given = [k for k, v in text.items() if v is not None]
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
            raise DhwtError("a text corpus needs tokenizer (gpt2, bpe:N or word) and seq_len")
        check_tokenizer(self.tokenizer)
        _check_int("seq_len", self.seq_len, low=1)
        if self.eval_windows is not None:
            _check_int("eval_windows", self.eval_windows, low=1)
        if self.objective != "clm":
            raise DhwtError(f"a text corpus is for causal LM: objective must be 'clm', got "
                            f"{self.objective!r}")
        if self.batch_size is None:
            raise DhwtError("a text corpus needs an integer batch_size (windows per member per "
                            "step); a full batch would be the whole corpus")

    def _check_members(self, schedule: TieSchedule) -> None:
        """vary, init_from, init_member, redraw, freeze, and how they go with the tie schedule."""
        _check_choice("vary", self.vary, VARY)
        _check_choice("redraw", self.redraw, REDRAW)
        _check_choice("freeze", self.freeze, FREEZE)
        _check_int("init_member", self.init_member, low=0)
        if self.init_from is None:
            if self.freeze == "loaded" or self.redraw != "both" or self.init_member:
                what = ("freeze = 'loaded'" if self.freeze == "loaded" else
                        f"redraw = {self.redraw!r}" if self.redraw != "both" else "init_member")
                raise DhwtError(f"{what} needs init_from = \"RUN_DIR[@STEP]\" (the run to start "
                                "from)")
        else:
            split_init_from(self.init_from)
            if self.redraw != "both" and schedule.initial_tied:
                raise DhwtError(f"redraw = {self.redraw!r} keeps one embedding matrix of the "
                                f"source, which needs untied embeddings; tie_schedule is "
                                f"{self.tie_schedule!r}")
        if self.freeze != "none" and schedule.events:
            raise DhwtError(f"freeze = {self.freeze!r} needs a fixed tying state: tie_schedule "
                            f"{self.tie_schedule!r} switches it (tied or untied only)")

    def model_config(self, *, vocab_size: int, max_len: int, causal: bool) -> ModelConfig:
        """The ModelConfig of these model fields for a task's vocabulary and length."""
        return ModelConfig(vocab_size=vocab_size, max_len=max_len, causal=causal,
                           **{name: getattr(self, name) for name in MODEL_FIELDS})

    @classmethod
    def from_dict(cls, values: dict[str, object], source: str = "config") -> TrainConfig:
        """A config from a flat mapping (a parsed TOML file, CLI options); unknown keys are errors."""
        _check_keys(values, source)
        return cls(**values)  # type: ignore[arg-type]

    @classmethod
    def from_toml(cls, path: str | Path) -> TrainConfig:
        """Read a config TOML (flat keys, as written by `to_toml`)."""
        return cls.from_dict(cls.toml_values(path), source=str(path))

    @classmethod
    def toml_values(cls, path: str | Path) -> dict[str, object]:
        """The keys of a config TOML, checked to be known but not yet validated as a config, so
        values given elsewhere (flags) can complete them first: a file of LSTM sizes is only
        valid once `--architecture lstm` joins it."""
        path = Path(path)
        try:
            values = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DhwtError(f"config file {path} does not exist") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise DhwtError(f"config file {path} is not valid TOML: {exc}") from None
        nested = sorted(k for k, v in values.items() if isinstance(v, dict))
        if nested:
            raise DhwtError(f"config file {path} has a table [{nested[0]}]; use flat keys "
                            f"(e.g. d_model = 4)")
        _check_keys(values, str(path))
        return values

    def to_dict(self) -> dict[str, object]:
        """All fields as plain values (batch_size None stays None)."""
        return asdict(self)

    def identity(self) -> dict[str, object]:
        """The fields that fix what the run computes: `to_dict()` without PLACEMENT. A resume
        must repeat these; it may change the others."""
        return {k: v for k, v in self.to_dict().items() if k not in PLACEMENT}

    def resume_key(self) -> dict[str, object]:
        """What a resume must repeat: the identity without the fields it may extend."""
        return {k: v for k, v in self.identity().items() if k not in EXTENDABLE}

    def to_toml(self) -> str:
        """The resolved config as flat TOML; unset (None) values follow as comments."""
        values = self.to_dict()
        values["seeds"] = format_seeds(self.seeds)
        if self.batch_size is None:
            values["batch_size"] = FULL_BATCH
        unset = [f"# {name} = (not set)" for name, value in values.items() if value is None]
        return ("# dhwt train: resolved config\n"
                + dumps({k: v for k, v in values.items() if v is not None})
                + "".join(line + "\n" for line in unset))


def _check_keys(values: dict[str, object], source: str) -> None:
    """DhwtError naming the first key of `values` that is not a TrainConfig field."""
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise DhwtError(f"unknown key {unknown[0]!r} in {source}; allowed keys: "
                        f"{', '.join(sorted(known))}")


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise DhwtError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


def _check_int(name: str, value: object, *, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise DhwtError(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise DhwtError(f"{name} must be >= {low}, got {value}")


def _check_float(name: str, value: object, *, low: float, high: float = math.inf,
                 low_open: bool = False, high_open: bool = False) -> None:
    """DhwtError unless `value` is a finite number within the bounds; the message states the
    range as allowed (never an infinite bound, which no value may reach)."""
    finite = (isinstance(value, (int, float)) and not isinstance(value, bool)
              and math.isfinite(value))
    if finite and (low < value or (value == low and not low_open)) and (
            value < high or (value == high and not high_open)):
        return
    if math.isinf(high):
        allowed = f"a finite number {'>' if low_open else '>='} {low:g}"
    else:
        allowed = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    raise DhwtError(f"{name} must be {allowed}, got {value!r}")
