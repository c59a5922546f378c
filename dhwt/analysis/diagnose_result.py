"""What `dhwt diagnose PATH` computes: the DH diagnostic of a dhwt run directory or a pretrained
checkpoint, as a typed result (DiagnoseResult; dhwt.report.diagnose_report renders it,
dhwt.commands.diagnose is the recipe).

A run directory gives one subject per ensemble member at the chosen snapshot, each with its tie
history (dhwt.analysis.diagnosis.member_subjects); a checkpoint folder in the Hugging Face layout
(dhwt.pretrained) gives one, and so does a Hugging Face Hub id ORG/NAME[@REVISION] that is no
path here (dhwt.pretrained.hub.hub_id_of: a path that exists, or whose first part is a folder
here, means the path). A tied subject is said to be tied and not measured: its input and output
are one matrix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dhwt.analysis.diagnosis import Subject, checkpoint_subject, member_subjects
from dhwt.analysis.frequency import check_counts
from dhwt.analysis.knn import check_k
from dhwt.analysis.matrices import read_weights
from dhwt.checks import Choice, Integer, Text, check_fields
from dhwt.config.device import DEVICE, resolve_device
from dhwt.defaults import CHANCE_QUERIES, METRICS, TOP
from dhwt.errors import DhwtError

if TYPE_CHECKING:
    from dhwt.pretrained.hub import HubId

#: Vocabularies up to this size are searched whole by default; larger ones by sampled queries.
EXACT_UP_TO = 65_536
#: Sampled queries by default above EXACT_UP_TO.
QUERIES = 4_096
#: Fewest tokens a k-NN diagnostic can tell spaces apart with: k = 1 of 2 others.
MIN_TOKENS = 3


@dataclass(frozen=True)
class DiagnoseResult:
    """Everything the report shows: where the matrices came from, the subjects, how tokens
    print (token(i)), and notes on how the source was read."""

    source: str
    kind: str
    description: str
    shape: tuple[int, int, int]
    subjects: tuple[Subject, ...]
    token: Callable[[int], str] = field(repr=False)
    notes: tuple[str, ...] = ()
    counts_source: str | None = None


@dataclass(frozen=True)
class DiagnoseOptions:
    """What `dhwt diagnose` can be asked (see its --help). queries: "auto", "all" or a count;
    step: a snapshot step or "last" (run directories); counts: a file of one count per token;
    corpus: a text file to count tokens in with the checkpoint's tokenizer; chance_queries 0:
    no chance level."""

    k: int | None = None
    metric: str = "ip"
    queries: int | str = "auto"
    chance_queries: int = CHANCE_QUERIES
    seed: int = 0
    step: int | str = "last"
    counts: str | None = None
    corpus: str | None = None
    top: int = TOP
    device: str = "cpu"

    CONSTRAINTS = {"k": [Integer(1), None], "metric": [Choice(METRICS)],
                   "queries": [Integer(1), Choice(("auto", "all"))],
                   "chance_queries": [Integer(0)], "seed": [Integer(0)],
                   "step": [Integer(0), Choice(("last",))], "counts": [Text("a file path"), None],
                   "corpus": [Text("a file path"), None], "top": [Integer(1)],
                   "device": [DEVICE]}

    def __post_init__(self) -> None:
        check_fields(self, self.CONSTRAINTS)


def diagnose_path(path: str, options: DiagnoseOptions) -> DiagnoseResult:
    """Diagnose the run directory or checkpoint folder at `path`, or the Hub id `path`."""
    from dhwt.filenames import CONFIG
    from dhwt.pretrained import is_checkpoint
    from dhwt.pretrained.hub import hub_id_of
    from dhwt.runs.run import is_run

    where = Path(path)
    if not where.exists():
        hub_id = hub_id_of(path)
        if hub_id is None:
            raise DhwtError(f"{path} does not exist")
        return _hub(hub_id, options)
    if is_run(where):
        return _run(where, options)
    if is_checkpoint(where):
        return _checkpoint(where, options)
    if not where.is_dir():
        raise DhwtError(f"{path} is a file; give a run directory or a checkpoint folder")
    raise DhwtError(f"{path} is neither a dhwt run directory (no {CONFIG}) nor a checkpoint "
                    "folder (no config.json or .safetensors)")


def _settings(options: DiagnoseOptions, n: int) -> dict[str, object]:
    """The keyword arguments of dhwt.analysis.diagnosis.diagnose for n tokens."""
    if options.queries == "auto":
        queries = None if n <= EXACT_UP_TO else QUERIES
    else:
        queries = None if options.queries == "all" else options.queries
    if n < MIN_TOKENS:
        raise DhwtError(f"{n} token{'s' if n > 1 else ''}: too few for a k-NN diagnostic, which "
                        f"needs at least {MIN_TOKENS} (with 2, each token's one neighbour is the "
                        "other in any two spaces)")
    if options.k is not None:
        check_k(options.k, n)
        if options.k > n - 2:
            raise DhwtError(f"k {options.k} of {n} tokens makes every token's neighbours all "
                            "the others in any two spaces (overlap 1); a k-NN diagnostic needs "
                            f"k <= {n - 2}")
    device = str(resolve_device(options.device))
    return dict(k=options.k, metric=options.metric, queries=queries,
                chance_queries=options.chance_queries, seed=options.seed, progress=None,
                device=device)


def _run(path: Path, options: DiagnoseOptions) -> DiagnoseResult:
    from dhwt.runs.run import load_run

    if options.corpus:
        raise DhwtError("--corpus counts tokens with a checkpoint's tokenizer.json; it does not "
                        f"apply to a run directory ({path}): give --counts FILE")
    run = load_run(path)
    step = None if options.step == "last" else options.step
    snap = run.embeddings(step)
    members, n, d = snap.input.shape
    counts, counts_source = None, None
    if options.counts or run.token_counts_file.is_file():
        counts_source = options.counts or str(run.token_counts_file)
        counts = _counts(read_weights(counts_source, "token counts"), n, counts_source)
    subjects = member_subjects(snap, run.config.tying.tie_schedule, counts=counts,
                               **_settings(options, n))
    vocab = snap.vocab
    return DiagnoseResult(
        source=str(path), kind="run",
        description=f"dhwt run {path}, step {snap.step}, tie schedule "
                    f"{str(run.config.tying.tie_schedule)!r}",
        shape=(members, n, d), subjects=subjects,
        token=lambda i: vocab[i] if i < len(vocab) else f"#{i}", counts_source=counts_source)


def _hub(hub_id: HubId, options: DiagnoseOptions) -> DiagnoseResult:
    """The checkpoint of a Hub id, fetched as little as it takes into the Hugging Face cache or
    dhwt's store (DHWT_CACHE/hub)."""
    from dhwt.pretrained.hub import fetch
    from dhwt.text.token_cache import cache_root

    if options.step != "last":
        raise DhwtError(f"--step picks a snapshot of a run directory; {hub_id} is a checkpoint "
                        "(one pair of matrices): give a revision as ORG/NAME@REVISION")
    fetched = fetch(hub_id, cache_root() / "hub")
    return _checkpoint(fetched.folder, options, hub_id, fetched.notes)


def _checkpoint(path: Path, options: DiagnoseOptions, hub_id: HubId | None = None,
                fetch_notes: tuple[str, ...] = ()) -> DiagnoseResult:
    """The diagnosis of the checkpoint folder `path`, fetched for `hub_id` if given (a folder
    named by its commit; fetch_notes: how it was fetched)."""
    from dhwt.pretrained import read_checkpoint
    from dhwt.pretrained.reader import count_tokens

    if options.step != "last":
        raise DhwtError(f"--step picks a snapshot of a run directory; {path} is a checkpoint "
                        "folder (one pair of matrices)")
    ckpt = read_checkpoint(path)
    n = ckpt.n_tokens
    counts, counts_source, corpus_notes = None, None, []
    if options.counts and options.corpus:
        raise DhwtError("give token counts (--counts) or a corpus to count them in (--corpus), "
                        "not both")
    if options.counts:
        counts_source = options.counts
        counts = _counts(read_weights(options.counts, "token counts"), n, options.counts)
    elif options.corpus:
        counts_source = f"{options.corpus}, tokenized with {path / 'tokenizer.json'}"
        counted = count_tokens(path, options.corpus)
        counts = counted.counts
        if counted.unknown:
            corpus_notes.append(_unknown_words(counted.unknown, options.corpus))
        if counts[n:].any():
            corpus_notes.append(f"{int(counts[n:].sum()):,} of the {int(counts.sum()):,} tokens "
                                f"of {options.corpus} have ids {n}-{len(counts) - 1}, with no "
                                "row in the matrices, and are not counted")
        counts = counts[:n]
    model = ckpt.model_type or ckpt.layout
    subject = checkpoint_subject(
        str(hub_id) if hub_id else path.name or str(path), ckpt.input[:n],
        None if ckpt.output is None else ckpt.output[:n], tied_because=ckpt.tied_because,
        counts=counts, **_settings(options, n))
    notes = [*fetch_notes, *ckpt.notes, *corpus_notes]
    if ckpt.output is not None and ckpt.input.shape[1] != ckpt.output.shape[1]:
        notes.append(f"the input matrix is {ckpt.input.shape[1]} wide and the output matrix "
                     f"{ckpt.output.shape[1]}: the KNN match and CKA compare them (neither needs "
                     "one width); the Procrustes error and the copy residue need one and are not "
                     "computed")
    outputs = f" / {ckpt.output_name}" if ckpt.output_name else " (no output matrix saved)"
    what = f"Hugging Face Hub model {hub_id} at commit {path.name}" if hub_id else \
        f"checkpoint {path}"
    return DiagnoseResult(
        source=str(hub_id or path), kind="checkpoint",
        description=f"{what} ({model}, {ckpt.layout} layout: {ckpt.input_name}{outputs})",
        shape=(1, *ckpt.input.shape), subjects=(subject,), token=ckpt.token, notes=tuple(notes),
        counts_source=counts_source)


def _unknown_words(unknown: Counter[str], corpus: str) -> str:
    """The note on the words of `corpus` that tokenizer.json could not encode."""
    total, examples = sum(unknown.values()), [w for w, _ in unknown.most_common(3)]
    return (f"{total:,} word{'s' if total > 1 else ''} of {corpus} ({len(unknown):,} distinct: "
            f"{', '.join(map(repr, examples))}{', ...' if len(unknown) > 3 else ''}) "
            f"{'are' if total > 1 else 'is'} not in the vocabulary of tokenizer.json, which "
            "has no unknown-word token, and not counted")


def _counts(counts: np.ndarray, n: int, where: str) -> np.ndarray:
    """The first n of the checked counts (a vocabulary padded past the tokenizer: its rows)."""
    counts = check_counts(counts, where)
    if len(counts) < n:
        raise DhwtError(f"{where} holds {len(counts)} counts; the matrices have {n} tokens")
    return counts[:n]
