"""`dhwt corpus-dh`: the distributional hypothesis estimated from counts, without a model.

Two sources of counts N(context, next token) (dhwt.analysis.corpus_dh):
- a grammar (built-in name or TOML, `--set` overrides): the exact expected counts of the causal
  reading (every symbol string weighted by its probability, every position, the end as [EOS]),
  or, with `samples`, the counts of that many strings drawn from it;
- a corpus (`wikitext-2`, a folder or archive dhwt.languages.corpus finds, or one text file)
  and a tokenizer: the train split read as one token stream.
The result is one JSON-ready document (`corpus_dh`), printed as text (`format_report`) and
optionally written to a folder (`write_out`): report.md, corpus_dh.json, per_token.csv and
figures/overlap_by_frequency.png.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dhwt.analysis import corpus_dh as cdh
from dhwt.analysis.frequency import count_span, frequency_buckets
from dhwt.directories import atomic_write_bytes, check_report_dir, replace_report
from dhwt.report.document import write_report
from dhwt.errors import DhwtError
from dhwt.filenames import FIGURES, HTML, REPORT

#: Default tolerance on the relation distances with exact counts (float error only).
EXACT_TOLERANCE = 1e-9
#: Default tolerance with sampled counts: distances of equivalent pairs shrink like 1/sqrt(N).
SAMPLED_TOLERANCE = 0.05
#: Default least count of the tokens of the listed DH-violating pairs of a corpus: rarer
#: tokens have profiles of a few contexts, whose cosines are near 0 or 1 by accident.
MIN_COUNT = 100
FIGURE = f"{FIGURES}/overlap_by_frequency.png"
#: What the listed DH-violating pairs are ranked by, with estimated relations (grammars) and
#: without (a corpus).
RANKED_BY_RELATIONS = ("estimated relations: pairs in one of sem, cnd and not the other, "
                       "largest distance from the other first")
RANKED_BY_COSINE = ("neighbourhood cosines, no relations estimated: neighbours in one space, "
                    "largest |cos_in - cos_out| first; blind to a frequency ratio, which breaks "
                    "cnd")


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
    dim: int = 100
    k: int | None = None
    tolerance: float | None = None
    buckets: int = 5
    top: int = 10
    min_count: float | None = None
    seed: int = 0
    null_bins: int = cdh.NULL_BINS
    permutations: int = cdh.PERMUTATIONS


@dataclass(frozen=True, eq=False)
class Result:
    """The document and what write_out needs beyond it (per-token rows)."""

    document: dict
    per_token: list[dict]


def corpus_dh(options: CorpusDhOptions, *, progress: bool | None = None) -> Result:
    """Count, compare the input and output neighbourhoods, and (grammars) the relations."""
    _check(options)
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
    symbols = None if language is None else np.arange(len(language.symbols))
    relations = None if language is None else _relations(counts, language, options)
    document = {
        "source": source,
        "order": counts.order,
        "context": f"the previous {counts.order} token(s), {cdh.BOS} before the start",
        "contexts": len(counts.keys),
        "context_next_pairs": int(counts.joint.nnz),
        "tokens": _token_summary(counts, found),
        "vectors": {"weighting": f"PPMI, context-distribution smoothing alpha {cdh.ALPHA}",
                    "reduction": "truncated SVD, U_d S_d^(1/2)", "dim": found.dim,
                    "dim_asked": options.dim, "metric": "cos"},
        "input_output_knn_overlap": _match_summary(found, options.seed),
        "frequency_buckets": _buckets(found, frequency, options.buckets),
        "dh_violating_pairs_min_count": min_count,
    }
    if relations is None:
        document["dh_violating_pairs_ranked_by"] = RANKED_BY_COSINE
        document["dh_violating_pairs"] = [
            {"pair": [counts.vocab[a], counts.vocab[b]], "ids": [a, b], "cos_in": ci,
             "cos_out": co}
            for a, b, ci, co in cdh.violating_pairs(found, options.top,
                                                    frequency[found.tokens] >= min_count)]
    else:
        document["dh_violating_pairs_ranked_by"] = RANKED_BY_RELATIONS
        document["dh_violating_pairs"] = [
            {"pair": [counts.vocab[a], counts.vocab[b]], "ids": [a, b], "in": held,
             "not_in": "cnd" if held == "sem" else "sem", "departure": departure}
            for a, b, held, departure in cdh.relation_violations(
                relations.distance["sem"], relations.distance["cnd"], relations.tolerance,
                options.top, frequency[symbols] >= min_count)]
        document["relations"] = relations.document
    per_token = [{"id": int(t), "token": counts.vocab[t], "count": float(frequency[t]),
                  "intersection": int(i), "overlap": float(o), "jaccard": float(j),
                  "chance_intersection": int(c), "frequency_bin": int(b) + 1,
                  "frequency_null_overlap": float(e)}
                 for t, i, o, j, c, b, e in zip(found.tokens, found.match.intersection,
                                                found.match.overlap, found.match.jaccard,
                                                found.chance.intersection,
                                                found.frequency_null.bins,
                                                found.frequency_null.expected)]
    return Result(document, per_token)


def _check(options: CorpusDhOptions) -> None:
    """Every option checked before anything is loaded or counted."""
    if (options.grammar is None) == (options.corpus is None):
        raise DhwtError("give one source of counts: --grammar NAME|PATH or --corpus PATH "
                        "with --tokenizer")
    if options.grammar is None:
        from dhwt.languages.tokenizers import LISTED, check_tokenizer

        for flag, value in (("--set", options.assignments), ("--samples", options.samples)):
            if value:
                raise DhwtError(f"{flag} belongs to --grammar, not to --corpus")
        if options.tokenizer is None:
            raise DhwtError(f"--corpus needs --tokenizer ({LISTED})")
        check_tokenizer(options.tokenizer)
        if options.order == "full":
            raise DhwtError("--order full (the longest string) needs --grammar; give a number")
    elif options.tokenizer is not None:
        raise DhwtError("--tokenizer belongs to --corpus; a grammar's tokens are its symbols")
    if options.order != "full":
        _integer(options.order, "order", 1)
    _integer(options.dim, "dim", 1)
    _integer(options.buckets, "buckets", 1)
    _integer(options.top, "top", 1)
    _integer(options.seed, "seed", 0)
    _integer(options.null_bins, "null bins", 1)
    _integer(options.permutations, "permutations", 1)
    if options.samples is not None:
        _integer(options.samples, "samples", 1)
    if options.k is not None:
        _integer(options.k, "k", 1)
    for name in ("tolerance", "min_count"):
        value = getattr(options, name)
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value)
                                      and value >= 0):
            raise DhwtError(f"{name} must be a finite number >= 0, got {value!r}")


def _integer(value: object, name: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise DhwtError(f"{name} must be an integer >= {least}, got {value!r}")
    return value


def parse_order(text: str) -> int | str:
    """`--order`: a whole number or `full`, as given on the command line."""
    if text == "full":
        return text
    try:
        return int(text)
    except ValueError:
        raise DhwtError(f"order must be an integer >= 1 or 'full', got {text!r}") from None


def _grammar_counts(options: CorpusDhOptions):  # noqa: ANN202 (Counts, dict, Language)
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
        how = {"counts": "exact expected counts (every symbol string weighted by its "
                         "probability)", "strings": len(probs)}
    else:
        weights = cdh.sample_weights(probs, options.samples, options.seed)
        counts = cdh.count_strings(rows, weights, names, order)
        how = {"counts": f"{options.samples:,} strings drawn with seed {options.seed}",
               "strings": options.samples,
               "positions": int(round(float(counts.joint.sum())))}
    source = {"grammar": language.name, "overrides": overrides, "objective": "clm",
              **how, "longest_string": longest}
    return counts, source, language


def _corpus_counts(options: CorpusDhOptions, progress: bool | None):  # noqa: ANN202
    from dhwt.languages.corpus import load_corpus
    from dhwt.languages.token_cache import cache_root, tokenize_corpus
    from dhwt.languages.tokenizers import make_tokenizer, shortfall

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
        where = {"corpus": str(path), "origin": f"{path} (one text file, sha256 {digest}...)"}
    else:
        corpus = load_corpus(options.corpus)
        tokens = tokenize_corpus(corpus, options.tokenizer)
        ids, vocab = tokens.ids["train"], tokens.vocab
        where = {"corpus": corpus.name, "origin": corpus.origin, "split": "train"}
    counts = cdh.count_stream(ids, vocab, options.order, progress=progress)
    return counts, {**where, "tokenizer": options.tokenizer, "positions": int(len(ids)),
                    "tokenizer_note": shortfall(options.tokenizer, len(vocab))}


def _token_summary(counts: cdh.Counts, found: cdh.Neighbourhoods) -> dict:
    frequency = counts.token_counts[:-1]  # BOS is never predicted
    occur = int((frequency > 0).sum())
    return {"vocabulary": len(counts.vocab) - 1, "occurring": occur,
            "never_occur": len(frequency) - occur, "compared": len(found.tokens),
            "left_out_occurring": occur - len(found.tokens),
            "left_out_why": "occurs on one side only (e.g. an end token is never a context) "
                            "or no PPMI feature above chance"}


def _match_summary(found: cdh.Neighbourhoods, seed: int) -> dict:
    match, chance = found.match, found.chance
    n, k = len(found.tokens), match.k
    histogram = np.bincount(match.intersection, minlength=k + 1)
    return {"k": k, "tokens": n, "mean_overlap": match.mean_overlap,
            "mean_jaccard": match.mean_jaccard, "chance_overlap": chance.mean_overlap,
            "chance_jaccard": chance.mean_jaccard,
            "excess_overlap": match.mean_overlap - chance.mean_overlap,
            "expected_chance_overlap": k / (n - 1),
            "chance": f"one draw of random directions (default_rng({seed})); the expectation "
                      "under cosine is k / (tokens - 1)",
            "intersection_histogram": histogram.tolist(),
            "frequency_null": _null_summary(found)}


def _null_summary(found: cdh.Neighbourhoods) -> dict:
    null, observed = found.frequency_null, found.match.mean_overlap
    sizes = np.bincount(null.bins)
    low, high = null.interval()
    return {"overlap": null.mean_overlap, "excess_overlap": observed - null.mean_overlap,
            "interval_95": [low, high], "p_value": null.p_value(observed),
            "permutations": len(null.permuted), "seed": null.seed, "bins": len(sizes),
            "bin_tokens": [int(sizes.min()), int(sizes.max())],
            "definition": "the output space relabelled by a uniform permutation of the tokens "
                          "within frequency bins (compared tokens sorted by count, ties by id, "
                          "cut into equal-size bins): keeps each space's geometry and the "
                          "frequency make-up of every neighbourhood, loses which token of a "
                          "bin is which",
            "overlap_is": "exact expectation over all within-bin permutations",
            "interval_95_is": "central 95% of the mean overlap over the drawn permutations "
                              f"(default_rng({null.seed}))",
            "p_value_is": "one-sided: (1 + draws with mean overlap >= observed) / "
                          "(1 + draws)"}


def _buckets(found: cdh.Neighbourhoods, frequency: np.ndarray, buckets: int) -> list[dict]:
    rows = frequency_buckets(frequency[found.tokens],
                             [found.match.overlap, found.chance.overlap,
                              found.frequency_null.expected], buckets)
    return [{**{key: r[key] for key in ("bucket", "tokens", "count_min", "count_max")},
             "mean_overlap": r["means"][0], "chance_overlap": r["means"][1],
             "frequency_null_overlap": r["means"][2]} for r in rows]


@dataclass(frozen=True, eq=False)
class Relations:
    """The relations section of the document, with the (m, m) distances over the symbols and
    the tolerance that predicts a relation from them."""

    document: dict
    distance: dict[str, np.ndarray]
    tolerance: float


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
    out: dict = {"tolerance": tolerance,
                 "distances": {"sem": "N(c)-weighted mean total variation between p(.|c) and "
                                      "p(.|c with a swapped for b) over every occurrence, "
                                      "a missing swapped context counting 1",
                               "sem_last_position": "the same over the last context "
                                                    "position only (the input profile I_a)",
                               "cnd": "relative L1: sum_c |N(c,a) - N(c,b)| / (N(a) + N(b))"},
                 "order_covers_strings": counts.order >= language.strings.shape[1],
                 "truth": "dhwt.languages.truth, causal objective (clm)"}
    predicted = {}
    for name, d in distance.items():
        predicted[name] = d <= tolerance
        precision, recall = cdh.precision_recall(predicted[name], true[name])
        out[name] = {"predicted": _pairs(predicted[name], names),
                     "true": _pairs(true[name], names), "precision": precision,
                     "recall": recall}
    estimated, one, either = cdh.dh_violation(predicted["sem"], predicted["cnd"])
    exact, exact_one, exact_either = cdh.dh_violation(truth.sem, truth.cnd)
    out["dh_violation"] = {"estimated": estimated, "exact": exact,
                           "estimated_pairs": {"in_one_relation": one, "in_either": either},
                           "exact_pairs": {"in_one_relation": exact_one,
                                           "in_either": exact_either},
                           "definition": "pairs in exactly one of sem, cnd among pairs in "
                                         "either (1 - Jaccard; 0 when none is in either)"}
    out["pairs"] = [{"pair": [names[i], names[j]], "sem_distance": float(distance["sem"][i, j]),
                     "cnd_distance": float(distance["cnd"][i, j]),
                     "sem_true": bool(truth.sem[i, j]), "cnd_true": bool(truth.cnd[i, j])}
                    for i in range(len(names)) for j in range(i + 1, len(names))]
    return Relations(out, distance, tolerance)


def _pairs(relation: np.ndarray, names: Sequence[str]) -> list[list[str]]:
    i, j = np.nonzero(np.triu(relation, 1))
    return [[names[a], names[b]] for a, b in zip(i, j)]


# --- output --------------------------------------------------------------------------------------

def format_report(document: dict) -> str:
    """The readable text report of a corpus_dh document."""
    source, tokens = document["source"], document["tokens"]
    knn = document["input_output_knn_overlap"]
    null = knn["frequency_null"]
    grammar = "grammar" in source
    show = str if grammar else repr
    if grammar:
        sets = "".join(f" --set {k}={v}" for k, v in source["overrides"].items())
        head = f"grammar {source['grammar']}{sets}: {source['counts']}"
    else:
        head = (f"corpus {source['corpus']} ({source['origin']}), tokenizer "
                f"{source['tokenizer']}, {source['positions']:,} tokens")
    vectors = document["vectors"]
    lines = [f"corpus-dh: {head}"]
    if source.get("tokenizer_note"):
        lines.append(f"note: {source['tokenizer_note']}")
    lines += [
        f"order {document['order']}: context = {document['context']}; "
        f"{document['contexts']:,} contexts, {document['context_next_pairs']:,} (context, next) "
        "pairs",
        f"tokens: {tokens['vocabulary']:,} in the vocabulary, {tokens['compared']:,} compared, "
        f"{tokens['never_occur']:,} never occur, {tokens['left_out_occurring']:,} occurring "
        f"left out ({tokens['left_out_why']})",
        f"vectors: {vectors['weighting']}; {vectors['reduction']}, d = {vectors['dim']} (asked "
        f"{vectors['dim_asked']}); cosine",
        f"KNN match of input vs output neighbourhoods, k = {knn['k']} (self excluded):",
        f"  overlap {knn['mean_overlap']:.4f}  chance {knn['chance_overlap']:.4f} (expected "
        f"{knn['expected_chance_overlap']:.4f})  excess {knn['excess_overlap']:+.4f}",
        f"  frequency-matched null {null['overlap']:.4f} (95% of {null['permutations']:,} "
        f"permutations {null['interval_95'][0]:.4f}-{null['interval_95'][1]:.4f})  excess "
        f"{null['excess_overlap']:+.4f}  p {null['p_value']:.3g}",
        f"    (the output space's tokens permuted within {null['bins']} frequency bins of "
        f"{_span(null['bin_tokens'])}, seed {null['seed']})",
        f"  jaccard {knn['mean_jaccard']:.4f}  chance {knn['chance_jaccard']:.4f}",
        "  tokens by shared neighbours: " + ", ".join(
            f"{i}: {n:,}" for i, n in enumerate(knn["intersection_histogram"])),
        "by frequency (equal-size buckets of tokens sorted by count, rarest first):",
        "  bucket  tokens   count range        overlap  chance   frequency null",
    ]
    for b in document["frequency_buckets"]:
        span = count_span(b["count_min"], b["count_max"], _count)
        lines.append(f"  {b['bucket']:<6d}  {b['tokens']:<7,d}  {span:<17s}  "
                     f"{b['mean_overlap']:.4f}   {b['chance_overlap']:.4f}   "
                     f"{b['frequency_null_overlap']:.4f}")
    least = _count(document["dh_violating_pairs_min_count"])
    if "relations" in document:
        lines.append(f"most DH-violating pairs (by the {document['dh_violating_pairs_ranked_by']}"
                     f"; tolerance {document['relations']['tolerance']:g}; tokens counted at "
                     f"least {least} times):")
        lines += [f"  {show(p['pair'][0])} ~ {show(p['pair'][1])}: {p['in']}, not {p['not_in']} "
                  f"({p['not_in']} distance {p['departure']:.4g})"
                  for p in document["dh_violating_pairs"]]
        if not document["dh_violating_pairs"]:
            lines.append("  none")
    elif document["dh_violating_pairs"]:
        lines.append(f"most DH-violating pairs (by {document['dh_violating_pairs_ranked_by']}; "
                     f"tokens counted at least {least} times):")
        for p in document["dh_violating_pairs"]:
            a, b = (show(t) for t in p["pair"])
            lines.append(f"  {a} ~ {b}: cos_in {_signed(p['cos_in'])}  cos_out "
                         f"{_signed(p['cos_out'])}")
    if "relations" in document:
        lines += _relation_lines(document["relations"])
    return "\n".join(lines)


def _count(x: float) -> str:
    """A count: whole numbers with thousands separators, expected counts (fractions) by :g."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def _span(sizes: list[int]) -> str:
    """'7 tokens' or '7-8 tokens'."""
    low, high = sizes
    return f"{low:,} tokens" if low == high else f"{low:,}-{high:,} tokens"


def _signed(x: float) -> str:
    """x to 3 decimals with its sign, -0.000 shown as +0.000."""
    return f"{round(x, 3) + 0.0:+.3f}"


def _relation_lines(rel: dict) -> list[str]:
    def number(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    def pairs(items: list[list[str]]) -> str:
        return ", ".join(f"{a}~{b}" for a, b in items) or "none"

    covered = ("the order covers every string: these are exact relations"
               if rel["order_covers_strings"] else
               "the order is below the longest string: relations of the order-n contexts")
    lines = [f"relations against the exact ones ({rel['truth']}; tolerance "
             f"{rel['tolerance']:g}; {covered}):"]
    labels = {"sem": "sem", "sem_last_position": "sem, last position only", "cnd": "cnd"}
    for name, label in labels.items():
        r = rel[name]
        lines.append(f"  {label}: precision {number(r['precision'])}, recall "
                     f"{number(r['recall'])}; predicted {pairs(r['predicted'])}; true "
                     f"{pairs(r['true'])}")
    dh = rel["dh_violation"]
    lines.append(f"  DH violation (share of pairs in exactly one relation among pairs in "
                 f"either): estimated {dh['estimated']:.3f} "
                 f"({dh['estimated_pairs']['in_one_relation']} of "
                 f"{dh['estimated_pairs']['in_either']}), exact {dh['exact']:.3f} "
                 f"({dh['exact_pairs']['in_one_relation']} of {dh['exact_pairs']['in_either']})")
    return lines


def corpus_dh_command(options: CorpusDhOptions, *, as_json: bool = False,
                      out: str | None = None) -> str:
    """What `dhwt corpus-dh` prints: the JSON document or the text report (and with `out`,
    the files written there; --out is checked before any counting)."""
    if out is not None:
        check_out(out)
    result = corpus_dh(options)
    if out is not None:
        write_out(result, out)
    if as_json:
        return json.dumps(result.document, indent=1)
    text = format_report(result.document)
    if out is not None:
        text += f"\nwrote {out}: report.md, report.html, corpus_dh.json, per_token.csv, {FIGURE}"
    return text


def check_out(out: str | Path) -> None:
    """DhwtError unless `out` may hold the report: new, empty, or an earlier corpus-dh report
    (dhwt.directories.check_report_dir)."""
    check_report_dir(out, "corpus-dh", "corpus_dh.json")


def write_out(result: Result, out: str | Path) -> list[Path]:
    """out/report.md (and report.html), out/corpus_dh.json, out/per_token.csv and the figure,
    an earlier report replaced whole (dhwt.directories.replace_report); the paths written."""
    names = ["corpus_dh.json", "per_token.csv", FIGURE, REPORT]

    def fill(folder: Path) -> None:
        (folder / FIGURES).mkdir()
        document = result.document
        paths = [folder / name for name in names]
        atomic_write_bytes(paths[0], (json.dumps(document, indent=1) + "\n").encode("utf-8"))
        atomic_write_bytes(paths[1], _per_token_csv(result.per_token).encode("utf-8"))
        _figure(document, paths[2])
        report = ["# dhwt corpus-dh", "", "```", format_report(document), "```", "",
                  f"![mean overlap by frequency bucket]({FIGURE})", "",
                  "Machine-readable: corpus_dh.json; per token: per_token.csv.", ""]
        write_report(paths[3], "\n".join(report))

    replace_report(out, "corpus-dh", names[0], [*names[:2], FIGURES, REPORT, HTML], fill)
    return [*(Path(out) / name for name in names), Path(out) / HTML]


def _per_token_csv(rows: list[dict]) -> str:
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


def _figure(document: dict, path: Path) -> None:
    from dhwt.report.figures import new_figure, save

    buckets = document["frequency_buckets"]
    x = np.arange(len(buckets))
    fig = new_figure(6, 3.5)
    ax = fig.subplots()
    ax.bar(x - 0.27, [b["mean_overlap"] for b in buckets], 0.27, label="input vs output")
    ax.bar(x, [b["frequency_null_overlap"] for b in buckets], 0.27,
           label="frequency-matched null", color="0.45")
    ax.bar(x + 0.27, [b["chance_overlap"] for b in buckets], 0.27, label="chance",
           color="0.75")
    ax.set_xticks(x, [count_span(b["count_min"], b["count_max"], _count) for b in buckets],
                  rotation=30, fontsize=8)
    ax.set_xlabel("token count (equal-size buckets unless one count repeats)")
    ax.set_ylabel(f"mean overlap, k = {document['input_output_knn_overlap']['k']}")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    save(fig, path)
