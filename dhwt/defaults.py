"""The defaults and choices the command line shows, in their one home, importable without torch
or anything heavy (`dhwt --help` reads them). The modules that act on them import them from here.

Examples:
    >>> import subprocess, sys
    >>> code = "import dhwt.defaults, sys; print('torch' in sys.modules)"
    >>> subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    'False\\n'
"""

from __future__ import annotations

# -- languages ---------------------------------------------------------------------------------
#: The language-model objectives: masked and causal.
OBJECTIVES = ("mlm", "clm")
#: How a masked LM on text masks a position: always [MASK], or BERT's 80/10/10
#: (dhwt.text.masking).
MASK_RULES = ("mask", "bert")
#: Planted twins: semantically equivalent by a frequency ratio, or conditionally equivalent with a
#: marker after one of them (dhwt.text.twins).
TWIN_KINDS = ("sem", "cnd")
#: The default split of every dataset dhwt builds (dhwt synth, dhwt train --grammar, studies).
VALID_FRACTION, TEST_FRACTION, SPLIT_SEED = 0.1, 0.1, 14

# -- models and training -----------------------------------------------------------------------
ARCHITECTURES = ("transformer", "lstm", "mixer")
LR_SCHEDULES = ("constant", "cosine", "periodic-cosine")
#: How a run rounds its floats (dhwt.training.precision).
PRECISIONS = ("fp32", "bf16-mixed")
#: Where a study's jobs run (dhwt.training.study_jobs).
EXECUTORS = ("local", "slurm")
#: How many times a study's job is requeued when preempted or out of time (submitit's own
#: max_num_timeout; dhwt.training.study_jobs).
JOB_REQUEUES = 3

#: What `dhwt export` writes: a Hugging Face checkpoint (dhwt.runs.hf_export).
EXPORT_TARGETS = ("hf",)

# -- analysis ----------------------------------------------------------------------------------
#: KNN metrics: raw inner product, cosine, Euclidean distance.
METRICS = ("ip", "cos", "l2")
#: Neighbours per token unless asked otherwise (the reference study's k), see
#: dhwt.analysis.knn.default_k.
DEFAULT_K = 10
#: What `dhwt knn` prints: Jaccard, overlap or both.
KNN_SCORES = ("both", "jaccard", "overlap")
#: The KNN score a similarity figure plots.
CURVE_SCORES = ("overlap", "jaccard")
#: Which tokens a similarity over training compares: all, or those seen in training.
TOKEN_CHOICES = ("all", "seen")
#: What a closeness figure shows (dhwt.report.figures.MEASURE_LABELS names each).
CLOSENESS_MEASURES = ("normalised", "raw", "cosine")
#: Queries of the chance level's estimate of `dhwt diagnose` unless asked otherwise.
CHANCE_QUERIES = 512
#: Tokens in each per-token table of `dhwt diagnose`, and DH-violating pairs `dhwt corpus-dh`
#: lists.
TOP = 10
#: `dhwt corpus-dh`: dimensions kept by the SVD, frequency buckets of the report.
DIM, BUCKETS = 100, 5
#: Frequency bins of the frequency-matched null (equal numbers of compared tokens by count).
NULL_BINS = 20
#: Within-bin permutations drawn for the spread of the frequency-matched null.
PERMUTATIONS = 200
