"""The names dhwt gives what it writes, at every depth of a run, study or dataset directory and
of a report folder, and the layouts they make.

One home for them, at the bottom of the package (no dhwt imports): the writers name their files
by them, and dhwt.directories knows by the layouts what --overwrite (or a report written again)
may replace, so the two cannot drift: a file dhwt writes under a name not declared here would be
named as a user's, and a user's file under any other name is never deleted. Code elsewhere
reaches a run's files through dhwt.runs.Run (`dhwt.load_run`), never by these names.

A layout maps a name (a string, or a compiled pattern the whole name must match) to what dhwt
writes under it: FILE, a folder (its own layout), or the kind of a dhwt directory nested there
("run", "dataset": checked by its own layout, LAYOUTS).

Examples:
    >>> CHECKPOINT.format(100), step_names(CHECKPOINT).fullmatch("step_0000100.pt")[1]
    ('step_0000100.pt', '0000100')
    >>> sorted(RUN_LAYOUT[FIGURES])
    ['training.png']
"""

from __future__ import annotations

import re

#: What dhwt writes in a folder: {name or pattern: FILE | Layout | kind} (the module docstring).
Layout = dict[str | re.Pattern[str], object]
#: What a layout says of a name that is a file (not a folder, not a dhwt directory).
FILE = "file"
#: Any name: a study's runs/NAME and analysis/NAME.
ANY = re.compile(r".+")

# -- a run directory (dhwt.runs.layout) ----------------------------------------------------------
#: The resolved config, written first of a run's files.
CONFIG = "config.toml"
#: One JSON line per member, split and evaluated step (dhwt.runs.metrics).
METRICS = "metrics.jsonl"
#: When each training session of the run started and ended, and the code it ran
#: (dhwt.runs.sessions).
SESSIONS = "sessions.json"
#: The checkpoints the run keeps (dhwt.runs.checkpoints), one file a step.
CHECKPOINTS = "checkpoints"
CHECKPOINT = "step_{:07d}.pt"
#: The embedding snapshots (dhwt.runs.snapshots), one file a step.
EMBEDDINGS = "embeddings"
SNAPSHOT = "step_{:07d}.safetensors"
#: The dataset built from a grammar for this run (or a study's, for all its runs).
DATA = "data"
#: Training count per token id (text runs), for analysis over the tokens seen in training.
TOKEN_COUNTS = "token_counts.npy"
#: The planted twins of a text run and their exact relations (dhwt.text.twins).
TWINS = "twins.json"
#: TensorBoard event files (record.tensorboard): metrics.jsonl's numbers, a folder per member
#: (seed), each holding the event files torch's SummaryWriter names.
TENSORBOARD = "tensorboard"
TENSORBOARD_MEMBER = "seed_{}"
EVENTS = re.compile(r"events\.out\.tfevents\..+")
#: A report folder's (a run's, a study's, `dhwt analyze --out`'s) Markdown report, its HTML
#: copy, and the folder of its figures.
REPORT = "report.md"
HTML = "report.html"
FIGURES = "figures"
#: The training curves of the end-of-run report (dhwt.report.run_report).
TRAINING_FIGURE = "training.png"
FIGURE = f"{FIGURES}/{TRAINING_FIGURE}"

# -- a dataset directory (dhwt.languages.dataset) ------------------------------------------------
SPEC = "spec.toml"
VOCAB = "vocab.json"
STRINGS = "strings.npz"
TRUTH = "truth.json"
#: All of them, in the order a dataset's checksum reads them (dhwt.languages.dataset).
DATASET_FILES = (SPEC, VOCAB, STRINGS, TRUTH)

# -- an analyze report (dhwt.commands.analyze; a study's own report is one) ---------------------
#: What was analysed, which only analyze writes: the sign of an earlier analyze report.
ANALYZE_RECORD = "analyze.json"
#: Per run and seed, the step it left the plateau (dhwt.report.escape_report).
ESCAPE_TABLE = "escape.csv"
#: Every similarity curve at every step (dhwt.report.runs_similarity_report).
SIMILARITY_CSV = "similarity.csv"
SIMILARITY_JSON = "similarity.json"
#: The figures: closeness and fit (dhwt.report.runs_closeness_report), the share still on the
#: plateau (escape_report), similarity (runs_similarity_report), loss and accuracy per split of
#: text runs (runs_loss_report; format with the split).
CLOSENESS_FIGURE = "closeness.png"
FIT_FIGURE = "fit.png"
SURVIVAL_FIGURE = "survival.png"
SIMILARITY_KNN_FIGURE = "similarity_knn.png"
SIMILARITY_OTHER_FIGURE = "similarity_other.png"
SIMILARITY_DH_FIGURE = "similarity_dh.png"
LOSS_FIGURE = "loss_{}.png"
ACCURACY_FIGURE = "accuracy_{}.png"
#: The splits of a dataset and a corpus, in their order (a split's id is its index here), whose
#: curves runs_loss_report draws: their one home.
SPLITS = ("train", "valid", "test")

# -- a study directory (dhwt.training.study, dhwt.training.study_jobs) --------------------------
#: The study file as run.
STUDY_FILE = "study.toml"
#: The run directories, runs/NAME; a text study's report of each run, analysis/NAME.
RUNS = "runs"
ANALYSIS = "analysis"
#: The files of a study's jobs: submitit's (its job id: a local job's PID, a SLURM job's id,
#: ID_INDEX in an array) and the local executor's controllers' log.
JOBS = "jobs"
CONTROLLERS_LOG = "controllers.log"
_JOB = r"\d+(?:_\d+)?"


def step_names(template: str) -> re.Pattern[str]:
    """The names `template` (CHECKPOINT, SNAPSHOT) gives, the step's digits in group 1.

    Examples:
        >>> [bool(step_names(SNAPSHOT).fullmatch(n)) for n in ("step_0000010.safetensors",
        ...                                                    "step_10.safetensors")]
        [True, False]
    """
    head, tail = template.split("{:07d}")
    return re.compile(rf"{re.escape(head)}(\d{{7,}}){re.escape(tail)}")


def member_names(template: str) -> re.Pattern[str]:
    """The names `template` (TENSORBOARD_MEMBER) gives to the folder of each seed."""
    head, tail = template.split("{}")
    return re.compile(rf"{re.escape(head)}\d+{re.escape(tail)}")


RUN_LAYOUT: Layout = {
    CONFIG: FILE, METRICS: FILE, SESSIONS: FILE, TOKEN_COUNTS: FILE, TWINS: FILE, REPORT: FILE, HTML: FILE,
    CHECKPOINTS: {step_names(CHECKPOINT): FILE},
    EMBEDDINGS: {step_names(SNAPSHOT): FILE},
    FIGURES: {TRAINING_FIGURE: FILE},
    TENSORBOARD: {member_names(TENSORBOARD_MEMBER): {EVENTS: FILE}},
    DATA: "dataset",
}
DATASET_LAYOUT: Layout = dict.fromkeys(DATASET_FILES, FILE)
ANALYZE_LAYOUT: Layout = {
    **dict.fromkeys((REPORT, HTML, ANALYZE_RECORD, ESCAPE_TABLE, SIMILARITY_CSV,
                     SIMILARITY_JSON), FILE),
    FIGURES: dict.fromkeys((CLOSENESS_FIGURE, FIT_FIGURE, SURVIVAL_FIGURE, SIMILARITY_KNN_FIGURE,
                            SIMILARITY_OTHER_FIGURE, SIMILARITY_DH_FIGURE,
                            *(name.format(split) for name in (LOSS_FIGURE, ACCURACY_FIGURE)
                              for split in SPLITS)), FILE),
}
JOBS_LAYOUT: Layout = {
    CONTROLLERS_LOG: FILE,
    re.compile(rf"{_JOB}_(?:submitted\.pkl|submission\.sh|\d+_(?:result\.pkl|log\.out|log\.err))"):
        FILE,
    # a pickle not yet renamed to its job's, and the link submitit keeps to a submission file
    re.compile(r"[0-9a-f]{32}\.pkl|\.submission_file_[0-9a-f]{32}\.sh"): FILE,
}
STUDY_LAYOUT: Layout = {
    **ANALYZE_LAYOUT,  # a grammar study's report (runs_closeness_report), a text study's (analyze)
    STUDY_FILE: FILE, DATA: "dataset", RUNS: {ANY: "run"}, ANALYSIS: {ANY: ANALYZE_LAYOUT},
    JOBS: JOBS_LAYOUT,
}
#: The layout of a dhwt directory of each kind (besides its marker and lock, dhwt.directories).
LAYOUTS: dict[str, Layout] = {"run": RUN_LAYOUT, "study": STUDY_LAYOUT, "dataset": DATASET_LAYOUT}
