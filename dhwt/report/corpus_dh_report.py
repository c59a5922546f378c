"""The report of `dhwt corpus-dh` (dhwt.analysis.corpus_dh_result): one JSON-ready document of
the result with what each number means, the terminal text, and the --out folder (report.md and
.html, corpus_dh.json, per_token.csv, figures/overlap_by_frequency.png)."""

from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path

import numpy as np

from dhwt.analysis import corpus_dh as cdh
from dhwt.analysis.corpus_dh_result import (CorpusDhResult, CorpusSource, GrammarSource,
                                            MatchSummary, Relations)
from dhwt.analysis.frequency import count_span
from dhwt.directories import atomic_write_bytes, replace_report
from dhwt.filenames import FIGURES, FILE, HTML, REPORT, Layout
from dhwt.report.document import write_document
from dhwt.report.json_document import write_json

JSON = "corpus_dh.json"
PER_TOKEN = "per_token.csv"
#: The figure, in the report's figures/ folder.
FIGURE_NAME = "overlap_by_frequency.png"
FIGURE = f"{FIGURES}/{FIGURE_NAME}"
#: Everything corpus-dh writes into its --out folder (dhwt.filenames).
LAYOUT: Layout = {**dict.fromkeys((JSON, PER_TOKEN, REPORT, HTML), FILE),
                  FIGURES: {FIGURE_NAME: FILE}}
#: What the listed DH-violating pairs are ranked by, with estimated relations (grammars) and
#: without (a corpus).
RANKED_BY_RELATIONS = ("estimated relations: pairs in one of sem, cnd and not the other, "
                       "largest distance from the other first")
RANKED_BY_COSINE = ("neighbourhood cosines, no relations estimated: neighbours in one space, "
                    "largest |cos_in - cos_out| first; blind to a frequency ratio, which breaks "
                    "cnd")


def document(result: CorpusDhResult) -> dict:
    """The result as JSON-ready data, each number with what it means; the overlap under
    input_output_knn_overlap."""
    doc = {
        "source": _source(result.source),
        "order": result.order,
        "context": f"the previous {result.order} token(s), {cdh.BOS} before the start",
        "contexts": result.contexts,
        "context_next_pairs": result.context_next_pairs,
        "tokens": {**dataclasses.asdict(result.tokens),
                   "left_out_why": "occurs on one side only (e.g. an end token is never a "
                                   "context) or no PPMI feature above chance"},
        "vectors": {"weighting": f"PPMI, context-distribution smoothing alpha {cdh.ALPHA}",
                    "reduction": "truncated SVD, U_d S_d^(1/2)", "dim": result.dim,
                    "dim_asked": result.dim_asked, "metric": "cos"},
        "input_output_knn_overlap": _match(result.match),
        "frequency_buckets": [dataclasses.asdict(b) for b in result.buckets],
        "dh_violating_pairs_min_count": result.min_count,
    }
    if result.relations is None:
        doc["dh_violating_pairs_ranked_by"] = RANKED_BY_COSINE
        doc["dh_violating_pairs"] = [{"pair": list(p.pair), "ids": list(p.ids),
                                      "cos_in": p.cos_in, "cos_out": p.cos_out}
                                     for p in result.violating]
    else:
        doc["dh_violating_pairs_ranked_by"] = RANKED_BY_RELATIONS
        doc["dh_violating_pairs"] = [{"pair": list(p.pair), "ids": list(p.ids), "in": p.held,
                                      "not_in": p.not_held, "departure": p.departure}
                                     for p in result.violating]
        doc["relations"] = _relations(result.relations)
    return doc


def _source(source: GrammarSource | CorpusSource) -> dict:
    if isinstance(source, CorpusSource):
        where = {"corpus": source.corpus, "origin": source.origin}
        if source.split is not None:
            where["split"] = source.split
        return {**where, "tokenizer": source.tokenizer, "positions": source.positions,
                "tokenizer_note": source.tokenizer_note}
    sample = source.sample
    if sample is None:
        how = {"counts": "exact expected counts (every symbol string weighted by its "
                         "probability)", "strings": source.strings}
    else:
        how = {"counts": f"{sample.strings:,} strings drawn with seed {sample.seed}",
               "strings": source.strings, "positions": sample.positions}
    return {"grammar": source.grammar, "overrides": source.overrides, "objective": "clm", **how,
            "longest_string": source.longest_string}


def _match(match: MatchSummary) -> dict:
    null = match.frequency_null
    return {
        "k": match.k, "tokens": match.tokens, "mean_overlap": match.mean_overlap,
        "mean_jaccard": match.mean_jaccard, "chance_overlap": match.chance_overlap,
        "chance_jaccard": match.chance_jaccard, "excess_overlap": match.excess_overlap,
        "expected_chance_overlap": match.expected_chance_overlap,
        "chance": f"one draw of random directions (default_rng({match.seed})); the expectation "
                  "under cosine is k / (tokens - 1)",
        "intersection_histogram": list(match.intersection_histogram),
        "frequency_null": {
            "overlap": null.overlap, "excess_overlap": null.excess_overlap,
            "interval_95": list(null.interval_95), "p_value": null.p_value,
            "permutations": null.permutations, "seed": null.seed, "bins": null.bins,
            "bin_tokens": list(null.bin_tokens),
            "definition": "the output space relabelled by a uniform permutation of the tokens "
                          "within frequency bins (compared tokens sorted by count, ties by id, "
                          "cut into equal-size bins): keeps each space's geometry and the "
                          "frequency make-up of every neighbourhood, loses which token of a "
                          "bin is which",
            "overlap_is": "exact expectation over all within-bin permutations",
            "interval_95_is": "central 95% of the mean overlap over the drawn permutations "
                              f"(default_rng({null.seed}))",
            "p_value_is": "one-sided: (1 + draws with mean overlap >= observed) / "
                          "(1 + draws)"},
    }


def _relations(rel: Relations) -> dict:
    out: dict = {"tolerance": rel.tolerance,
                 "distances": {"sem": "N(c)-weighted mean total variation between p(.|c) and "
                                      "p(.|c with a swapped for b) over every occurrence, "
                                      "a missing swapped context counting 1",
                               "sem_last_position": "the same over the last context "
                                                    "position only (the input profile I_a)",
                               "cnd": "relative L1: sum_c |N(c,a) - N(c,b)| / (N(a) + N(b))"},
                 "order_covers_strings": rel.order_covers_strings,
                 "estimated_from_sample": rel.sample is not None,
                 "truth": "dhwt.languages.truth, causal objective (clm)"}
    if rel.sample is not None:
        out["sample_size"] = {
            "occurrences_per_context": rel.sample.per_context,
            "needed_per_context": rel.sample.needed, "too_small": rel.sample.too_small,
            "rule": "too small when the counted contexts' mean occurrences (positions / "
                    "contexts) are below 1 / tolerance^2: a context seen n times has its "
                    "next-token distribution off by about 1 / sqrt(n)"}
    for name in ("sem", "sem_last_position", "cnd"):
        r = getattr(rel, name)
        out[name] = {"predicted": [list(p) for p in r.predicted],
                     "true": [list(p) for p in r.true], "precision": r.precision,
                     "recall": r.recall}
    dh = rel.dh_violation
    out["dh_violation"] = {"estimated": dh.estimated, "exact": dh.exact,
                           **{f"{name}_pairs": dict(zip(("in_one_relation", "in_either"), pairs))
                              for name, pairs in (("estimated", dh.estimated_pairs),
                                                  ("exact", dh.exact_pairs))},
                           "definition": "pairs in exactly one of sem, cnd among pairs in "
                                         "either (1 - Jaccard; 0 when none is in either)"}
    out["pairs"] = [{**dataclasses.asdict(p), "pair": list(p.pair)} for p in rel.pairs]
    return out


def text(result: CorpusDhResult) -> str:
    """The terminal text of the result (what `dhwt corpus-dh` prints)."""
    return _text(document(result))


def _text(document: dict) -> str:
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
        *_sample_warning(document),
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


def _sample_warning(document: dict) -> list[str]:
    """The line warning that a grammar's sample is too small for its relations, if it is."""
    rel = document.get("relations", {})
    size = rel.get("sample_size")
    if not size or not size["too_small"]:
        return []
    return [f"warning: the sample is too small for relations at tolerance {rel['tolerance']:g}: "
            f"its {document['contexts']:,} contexts occur {size['occurrences_per_context']:.1f} "
            "times each on average, and a context's next-token distribution comes within the "
            f"tolerance at about 1 / {rel['tolerance']:g}^2 = {size['needed_per_context']:,.0f} "
            "occurrences: draw more strings (--samples) or count shorter contexts (--order)"]


def _relation_lines(rel: dict) -> list[str]:
    def number(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    def pairs(items: list[list[str]]) -> str:
        return ", ".join(f"{a}~{b}" for a, b in items) or "none"

    sampled = rel["estimated_from_sample"]
    covered = ("the order covers every string: " + (
        "relations estimated from the sampled strings" if sampled else "these are exact relations")
               if rel["order_covers_strings"] else
               "the order is below the longest string: relations of the order-n contexts"
               + (", estimated from the sampled strings" if sampled else ""))
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


def written(out: str | Path) -> str:
    """The line naming the files `write` wrote into `out`."""
    return f"wrote {out}: report.md, report.html, {JSON}, {PER_TOKEN}, {FIGURE}"


def write(result: CorpusDhResult, out: str | Path) -> list[Path]:
    """out/report.md (and report.html), out/corpus_dh.json, out/per_token.csv and the figure,
    an earlier report replaced whole (dhwt.directories.replace_report); the paths written."""
    names = [JSON, PER_TOKEN, FIGURE, REPORT]

    def fill(folder: Path) -> None:
        (folder / FIGURES).mkdir()
        doc = document(result)
        paths = [folder / name for name in names]
        write_json(paths[0], doc)
        atomic_write_bytes(paths[1], _per_token_csv(result).encode("utf-8"))
        _figure(result, paths[2])
        report = ["# dhwt corpus-dh", "", "```", _text(doc), "```", "",
                  f"![mean overlap by frequency bucket]({FIGURE})", "",
                  f"Machine-readable: {JSON}; per token: {PER_TOKEN}.", ""]
        write_document(paths[3], "\n".join(report))

    replace_report(out, "corpus-dh", JSON, LAYOUT, fill)
    return [*(Path(out) / name for name in names), Path(out) / HTML]


def _per_token_csv(result: CorpusDhResult) -> str:
    text = io.StringIO()
    fields = [f.name for f in dataclasses.fields(result.per_token[0])]
    writer = csv.DictWriter(text, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(dataclasses.asdict(row) for row in result.per_token)
    return text.getvalue()


def _figure(result: CorpusDhResult, path: Path) -> None:
    from dhwt.report.figures import new_figure, save

    buckets = result.buckets
    x = np.arange(len(buckets))
    fig = new_figure(6, 3.5)
    ax = fig.subplots()
    ax.bar(x - 0.27, [b.mean_overlap for b in buckets], 0.27, label="input vs output")
    ax.bar(x, [b.frequency_null_overlap for b in buckets], 0.27,
           label="frequency-matched null", color="0.45")
    ax.bar(x + 0.27, [b.chance_overlap for b in buckets], 0.27, label="chance",
           color="0.75")
    ax.set_xticks(x, [count_span(b.count_min, b.count_max, _count) for b in buckets],
                  rotation=30, fontsize=8)
    ax.set_xlabel("token count (equal-size buckets unless one count repeats)")
    ax.set_ylabel(f"mean overlap, k = {result.match.k}")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    save(fig, path)
