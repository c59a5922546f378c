"""What `dhwt corpus-dh` computes: the distributional hypothesis estimated from counts, without a
model, as a typed result of numbers (dhwt.report.corpus_dh_report renders it).

Two sources of counts N(context, next token) (dhwt.analysis.corpus_dh):
- a grammar (built-in name or TOML, `--set` overrides): the exact expected counts of the causal
  reading (every symbol string weighted by its probability, every position, the end as [EOS]),
  or, with `samples`, the counts of that many strings drawn from it;
- a corpus (`wikitext-2`, a folder or archive dhwt.text.corpus finds, or one text file)
  and a tokenizer: the train split read as one token stream.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dhwt.analysis import corpus_dh as cdh
from dhwt.analysis.frequency import frequency_buckets
from dhwt.checks import Choice, Integer, Real, Text, Texts, check_fields
from dhwt.defaults import BUCKETS, DIM, NULL_BINS, PERMUTATIONS, TOP
from dhwt.errors import DhwtError

#: Default tolerance on the relation distances with exact counts (float error only).
EXACT_TOLERANCE = 1e-9
#: Default tolerance with sampled counts: distances of equivalent pairs shrink like 1/sqrt(N).
SAMPLED_TOLERANCE = 0.05
#: Default least count of the tokens of the listed DH-violating pairs of a corpus: rarer
#: tokens have profiles of a few contexts, whose cosines are near 0 or 1 by accident.
MIN_COUNT = 100


def _check_tokenizer(text: str) -> None:
    """dhwt.text.tokenizers.check_tokenizer, imported when a tokenizer is given."""
    from dhwt.text.tokenizers import check_tokenizer

    check_tokenizer(text)


@dataclass(frozen=True)
class CorpusDhOptions:
    """Everything `dhwt corpus-dh` can be asked (see its --help). order: an integer or "full"
    (grammars: the longest string, where the relations are exact); tolerance None: the default
    of the source (exact or sampled counts); k None: choose_k's default; min_count None:
    MIN_COUNT for a corpus, 0 for a grammar (its exact counts are probabilities)."""

    grammar: str | None = None
    assignments: tuple[str, ...] = ()
    samples: int | None = None
    corpus: str | None = None
    tokenizer: str | None = None
    order: str | int = 1
    dim: int = DIM
    k: int | None = None
    tolerance: float | None = None
    buckets: int = BUCKETS
    top: int = TOP
    min_count: float | None = None
    seed: int = 0
    null_bins: int = NULL_BINS
    permutations: int = PERMUTATIONS

    CONSTRAINTS = {
        "grammar": [Text("a grammar name or path"), None], "assignments": [Texts()],
        "samples": [Integer(1), None], "corpus": [Text("a corpus path"), None],
        "tokenizer": [Text("a tokenizer", _check_tokenizer), None],
        "order": [Integer(1), Choice(("full",))], "dim": [Integer(1)], "k": [Integer(1), None],
        "tolerance": [Real(0.0), None], "buckets": [Integer(1)], "top": [Integer(1)],
        "min_count": [Real(0.0), None], "seed": [Integer(0)], "null_bins": [Integer(1)],
        "permutations": [Integer(1)]}

    def __post_init__(self) -> None:
        """Every option checked when made, before anything is loaded or counted: each field
        against its constraints, then the source (a grammar or a corpus with its tokenizer)."""
        check_fields(self, self.CONSTRAINTS)
        if (self.grammar is None) == (self.corpus is None):
            raise DhwtError("give one source of counts: --grammar NAME|PATH or --corpus PATH "
                            "with --tokenizer")
        if self.grammar is None:
            for flag, value in (("--set", self.assignments), ("--samples", self.samples)):
                if value:
                    raise DhwtError(f"{flag} belongs to --grammar, not to --corpus")
            if self.tokenizer is None:
                from dhwt.text.tokenizers import LISTED

                raise DhwtError(f"--corpus needs --tokenizer ({LISTED})")
            if self.order == "full":
                raise DhwtError("--order full (the longest string) needs --grammar; give a "
                                "number")
        elif self.tokenizer is not None:
            raise DhwtError("--tokenizer belongs to --corpus; a grammar's tokens are its symbols")


@dataclass(frozen=True)
class Sample:
    """Strings drawn from a grammar with a seed, and the positions (symbols and ends) counted."""

    strings: int
    seed: int
    positions: int


@dataclass(frozen=True)
class GrammarSource:
    """Counts of a grammar: exact expected ones (sample None: over `strings`, every symbol
    string) or of a sample drawn from it."""

    grammar: str
    overrides: dict
    strings: int
    longest_string: int
    sample: Sample | None = None


@dataclass(frozen=True)
class CorpusSource:
    """Counts of a corpus's train split (split None: one text file), as `tokenizer` cuts it."""

    corpus: str
    origin: str
    split: str | None
    tokenizer: str
    positions: int
    tokenizer_note: str | None


@dataclass(frozen=True)
class TokenSummary:
    """Tokens of the vocabulary (BOS left out), occurring ones, and those compared."""

    vocabulary: int
    occurring: int
    never_occur: int
    compared: int
    left_out_occurring: int


@dataclass(frozen=True)
class NullSummary:
    """The frequency-matched null (dhwt.analysis.corpus_dh.frequency_null): its exact mean
    overlap, the central 95% of the drawn permutations, the one-sided p of the observed mean,
    and its bins (their least and largest sizes)."""

    overlap: float
    excess_overlap: float
    interval_95: tuple[float, float]
    p_value: float
    permutations: int
    seed: int
    bins: int
    bin_tokens: tuple[int, int]


@dataclass(frozen=True)
class MatchSummary:
    """The input-vs-output KNN match over the compared tokens, its chance level (one draw of
    random directions, default_rng(seed)) with the expectation k / (tokens - 1), the tokens
    by shared neighbours (histogram[i]: tokens with i shared), and the frequency-matched null."""

    k: int
    tokens: int
    mean_overlap: float
    mean_jaccard: float
    chance_overlap: float
    chance_jaccard: float
    excess_overlap: float
    expected_chance_overlap: float
    seed: int
    intersection_histogram: tuple[int, ...]
    frequency_null: NullSummary


@dataclass(frozen=True)
class Bucket:
    """Compared tokens of one frequency bucket (1 the rarest) and their mean overlaps."""

    bucket: int
    tokens: int
    count_min: float
    count_max: float
    mean_overlap: float
    chance_overlap: float
    frequency_null_overlap: float


@dataclass(frozen=True)
class CosinePair:
    """A pair close in one space and far in the other (a corpus: no relations estimated)."""

    pair: tuple[str, str]
    ids: tuple[int, int]
    cos_in: float
    cos_out: float


@dataclass(frozen=True)
class RelationPair:
    """A pair in one estimated relation (`held`: sem or cnd) and not the other, `departure`
    its distance from the other."""

    pair: tuple[str, str]
    ids: tuple[int, int]
    held: str
    departure: float

    @property
    def not_held(self) -> str:
        return "cnd" if self.held == "sem" else "sem"


@dataclass(frozen=True)
class Relation:
    """One relation found from the counts against the exact one (pairs of symbol names)."""

    predicted: tuple[tuple[str, str], ...]
    true: tuple[tuple[str, str], ...]
    precision: float | None
    recall: float | None


@dataclass(frozen=True)
class DhViolation:
    """The share of pairs in exactly one of sem, cnd among pairs in either, estimated and
    exact, each with its pairs (in one relation, in either)."""

    estimated: float
    exact: float
    estimated_pairs: tuple[int, int]
    exact_pairs: tuple[int, int]


@dataclass(frozen=True)
class PairDistance:
    """A symbol pair's distances from sem and cnd, and whether each truly holds."""

    pair: tuple[str, str]
    sem_distance: float
    cnd_distance: float
    sem_true: bool
    cnd_true: bool


@dataclass(frozen=True)
class SampleSize:
    """How well sampled counts see their contexts: the mean occurrences of a counted context
    (positions / distinct contexts), and the most a relation's tolerance T asks, 1 / T^2 (a
    context seen n times has its next-token distribution off by about 1 / sqrt(n), the
    tolerance at n = 1 / T^2); too_small when the mean is below it."""

    per_context: float
    needed: float

    @property
    def too_small(self) -> bool:
        return self.per_context < self.needed


@dataclass(frozen=True, eq=False)
class Relations:
    """The relations estimated from a grammar's counts at `tolerance` against the exact ones;
    distance: the (m, m) distances over the symbols (sem, sem_last_position, cnd); sample: how
    well sampled counts see their contexts (None: exact expected counts, exact relations where
    the order covers every string)."""

    tolerance: float
    order_covers_strings: bool
    sem: Relation
    sem_last_position: Relation
    cnd: Relation
    dh_violation: DhViolation
    pairs: tuple[PairDistance, ...]
    distance: dict[str, np.ndarray]
    sample: SampleSize | None = None


@dataclass(frozen=True)
class TokenRow:
    """One compared token's numbers (per_token.csv)."""

    id: int
    token: str
    count: float
    intersection: int
    overlap: float
    jaccard: float
    chance_intersection: int
    frequency_bin: int
    frequency_null_overlap: float


@dataclass(frozen=True, eq=False)
class CorpusDhResult:
    """Everything `dhwt corpus-dh` found: what was counted, the KNN match of the input and
    output neighbourhoods, by frequency bucket and token, the most DH-violating pairs (ranked
    by the estimated relations of a grammar, by cosines for a corpus: `relations` None) among
    tokens counted at least `min_count` times."""

    source: GrammarSource | CorpusSource
    order: int
    contexts: int
    context_next_pairs: int
    tokens: TokenSummary
    dim: int
    dim_asked: int
    match: MatchSummary
    buckets: tuple[Bucket, ...]
    min_count: float
    violating: tuple[CosinePair, ...] | tuple[RelationPair, ...]
    relations: Relations | None
    per_token: tuple[TokenRow, ...]


def corpus_dh(options: CorpusDhOptions, *, progress: bool | None = None) -> CorpusDhResult:
    """Count, compare the input and output neighbourhoods, and (grammars) the relations."""
    if options.grammar is not None:
        counts, source, language = _grammar_counts(options)
    else:
        counts, source = _corpus_counts(options, progress)
        language = None
    found = cdh.neighbourhoods(counts, dim=options.dim, k=options.k, seed=options.seed,
                               progress=progress, null_bins=options.null_bins,
                               permutations=options.permutations)
    frequency = counts.token_counts
    min_count = options.min_count if options.min_count is not None else (
        0 if language is not None else MIN_COUNT)
    relations = None if language is None else _relations(counts, language, options)
    if relations is None:
        violating = tuple(
            CosinePair((counts.vocab[a], counts.vocab[b]), (a, b), ci, co)
            for a, b, ci, co in cdh.violating_pairs(found, options.top,
                                                    frequency[found.tokens] >= min_count))
    else:
        symbols = np.arange(len(language.symbols))
        violating = tuple(
            RelationPair((counts.vocab[a], counts.vocab[b]), (a, b), held, departure)
            for a, b, held, departure in cdh.relation_violations(
                relations.distance["sem"], relations.distance["cnd"], relations.tolerance,
                options.top, frequency[symbols] >= min_count))
    per_token = tuple(
        TokenRow(int(t), counts.vocab[t], float(frequency[t]), int(i), float(o), float(j),
                 int(c), int(b) + 1, float(e))
        for t, i, o, j, c, b, e in zip(found.tokens, found.match.intersection,
                                       found.match.overlap, found.match.jaccard,
                                       found.chance.intersection, found.frequency_null.bins,
                                       found.frequency_null.expected))
    return CorpusDhResult(source, counts.order, len(counts.keys), int(counts.joint.nnz),
                          _token_summary(counts, found), found.dim, options.dim,
                          _match_summary(found, options.seed),
                          _buckets(found, frequency, options.buckets), min_count, violating,
                          relations, per_token)


def _grammar_counts(options: CorpusDhOptions):  # noqa: ANN202 (Counts, GrammarSource, Language)
    from dhwt.languages import load_language
    from dhwt.languages.language import EOS, symbol_strings
    from dhwt.languages.spec import parse_assignments

    overrides = parse_assignments(options.assignments)
    language = load_language(options.grammar, overrides)
    rows, probs = symbol_strings(language)
    longest = rows.shape[1]
    order = longest if options.order == "full" else options.order
    names = (*language.symbols, EOS)
    if options.samples is None:
        counts = cdh.count_strings(rows, probs, names, order)
        source = GrammarSource(language.name, overrides, len(probs), longest)
    else:
        weights = cdh.sample_weights(probs, options.samples, options.seed)
        counts = cdh.count_strings(rows, weights, names, order)
        sample = Sample(options.samples, options.seed, int(round(float(counts.joint.sum()))))
        source = GrammarSource(language.name, overrides, options.samples, longest, sample)
    return counts, source, language


def _corpus_counts(options: CorpusDhOptions, progress: bool | None):  # noqa: ANN202
    from dhwt.text.corpus import load_corpus
    from dhwt.text.token_cache import cache_root, tokenize_corpus
    from dhwt.text.tokenizers import make_tokenizer, shortfall

    path = Path(options.corpus)
    if path.is_file() and not path.name.endswith(".tar.xz"):
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DhwtError(f"{path}: not UTF-8 text ({exc})") from None
        digest = hashlib.sha256(raw).hexdigest()[:16]
        model_dir = cache_root() / "tokenizers" / f"{path.name}-{digest}"
        tok = make_tokenizer(options.tokenizer, text, model_dir)
        ids, vocab = tok.encode(text), tok.vocab
        name, origin, split = str(path), f"{path} (one text file, sha256 {digest}...)", None
    else:
        corpus = load_corpus(options.corpus)
        tokens = tokenize_corpus(corpus, options.tokenizer)
        ids, vocab = tokens.ids["train"], tokens.vocab
        name, origin, split = corpus.name, corpus.origin, "train"
    counts = cdh.count_stream(ids, vocab, options.order, progress=progress)
    return counts, CorpusSource(name, origin, split, options.tokenizer, int(len(ids)),
                                shortfall(options.tokenizer, len(vocab)))


def _token_summary(counts: cdh.Counts, found: cdh.Neighbourhoods) -> TokenSummary:
    frequency = counts.token_counts[:-1]  # BOS is never predicted
    occur = int((frequency > 0).sum())
    return TokenSummary(len(counts.vocab) - 1, occur, len(frequency) - occur, len(found.tokens),
                        occur - len(found.tokens))


def _match_summary(found: cdh.Neighbourhoods, seed: int) -> MatchSummary:
    match, chance = found.match, found.chance
    n, k = len(found.tokens), match.k
    histogram = np.bincount(match.intersection, minlength=k + 1)
    return MatchSummary(k, n, match.mean_overlap, match.mean_jaccard, chance.mean_overlap,
                        chance.mean_jaccard, match.mean_overlap - chance.mean_overlap,
                        k / (n - 1), seed, tuple(int(h) for h in histogram),
                        _null_summary(found))


def _null_summary(found: cdh.Neighbourhoods) -> NullSummary:
    null, observed = found.frequency_null, found.match.mean_overlap
    sizes = np.bincount(null.bins)
    return NullSummary(null.mean_overlap, observed - null.mean_overlap, null.interval(),
                       null.p_value(observed), len(null.permuted), null.seed, len(sizes),
                       (int(sizes.min()), int(sizes.max())))


def _buckets(found: cdh.Neighbourhoods, frequency: np.ndarray,
             buckets: int) -> tuple[Bucket, ...]:
    rows = frequency_buckets(frequency[found.tokens],
                             [found.match.overlap, found.chance.overlap,
                              found.frequency_null.expected], buckets)
    return tuple(Bucket(r["bucket"], r["tokens"], r["count_min"], r["count_max"], *r["means"])
                 for r in rows)


def _relations(counts: cdh.Counts, language, options: CorpusDhOptions) -> Relations:  # noqa: ANN001
    from dhwt.languages.truth import compute_truth

    truth = compute_truth(language, "clm")
    symbols = np.arange(len(language.symbols))
    tolerance = options.tolerance if options.tolerance is not None else (
        EXACT_TOLERANCE if options.samples is None else SAMPLED_TOLERANCE)
    distance = {"sem": cdh.semantic_distance(counts, symbols),
                "sem_last_position": cdh.semantic_distance(counts, symbols,
                                                           positions=[counts.order - 1]),
                "cnd": cdh.conditional_distance(counts, symbols)}
    true = {"sem": truth.sem, "sem_last_position": truth.sem, "cnd": truth.cnd}
    names = language.symbols
    found = {}
    for name, d in distance.items():
        predicted = d <= tolerance
        found[name] = Relation(_pairs(predicted, names), _pairs(true[name], names),
                               *cdh.precision_recall(predicted, true[name]))
    estimated = cdh.dh_violation(distance["sem"] <= tolerance, distance["cnd"] <= tolerance)
    exact = cdh.dh_violation(truth.sem, truth.cnd)
    violation = DhViolation(estimated[0], exact[0], estimated[1:], exact[1:])
    pairs = tuple(PairDistance((names[i], names[j]), float(distance["sem"][i, j]),
                               float(distance["cnd"][i, j]), bool(truth.sem[i, j]),
                               bool(truth.cnd[i, j]))
                  for i in range(len(names)) for j in range(i + 1, len(names)))
    sample = (None if options.samples is None or tolerance == 0 else
              SampleSize(float(counts.joint.sum()) / len(counts.keys), 1 / tolerance**2))
    return Relations(tolerance, counts.order >= language.strings.shape[1], found["sem"],
                     found["sem_last_position"], found["cnd"], violation, pairs, distance,
                     sample)


def _pairs(relation: np.ndarray, names: Sequence[str]) -> tuple[tuple[str, str], ...]:
    i, j = np.nonzero(np.triu(relation, 1))
    return tuple((names[a], names[b]) for a, b in zip(i, j))
