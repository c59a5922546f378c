"""`dhwt corpus-dh` through the real entry point: a grammar's exact relations, a text file and a
corpus folder, the files of --out, and bad input (exit 2, one `error:` line) (#18)."""

from __future__ import annotations

import csv
import json
from collections import Counter

import numpy as np
import pytest

from dhwt.analysis.corpus_dh_result import CorpusDhOptions, corpus_dh
from dhwt.languages import load_language
from dhwt.languages.spec import builtin_names, parse_assignments
from dhwt.languages.truth import compute_truth

TEXT = "the cat sat on the mat\nthe dog sat on the log\na cat and a dog\n" * 20


def test_four_cases_exact_relations_as_json(cli):
    code, out, err = cli(["corpus-dh", "--grammar", "four-cases", "--order", "full", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    rel = doc["relations"]
    assert rel["order_covers_strings"] and doc["order"] == 4  # c a f g: 4 symbols
    assert rel["sem"]["predicted"] == [["a1", "a2"], ["b1", "b2"]]
    assert rel["cnd"]["predicted"] == [["a1", "a2"], ["c", "d"]]
    for name in ("sem", "cnd"):
        assert rel[name]["precision"] == rel[name]["recall"] == 1.0
    assert rel["dh_violation"]["estimated"] == rel["dh_violation"]["exact"] == pytest.approx(2 / 3)
    knn = doc["input_output_knn_overlap"]
    assert knn["tokens"] == 9 and knn["k"] == 4  # the 9 symbols; [EOS] is never a context
    assert 0 <= knn["mean_overlap"] <= 1
    assert sum(knn["intersection_histogram"]) == 9


def _built_in(name):
    """Each built-in grammar, parity families at 3 bits (the same relations, fewer strings)."""
    return (name, ("n_bits=3",) if name.startswith("parity") else ())


@pytest.mark.parametrize("grammar, sets", [_built_in(n) for n in builtin_names()])
def test_listed_violating_pairs_are_the_exact_ones(grammar, sets):
    """At full order with exact counts the listed pairs are the truth's DH-violating pairs (in
    exactly one of sem, cnd; dhwt.languages.truth derives them without counts), each with the
    relation it is in, and no pair where DH holds is listed."""
    language = load_language(grammar, parse_assignments(sets))
    truth = compute_truth(language, "clm")
    names = language.symbols
    i, j = np.nonzero(np.triu(truth.sem != truth.cnd, 1))
    expected = {(names[a], names[b]): "sem" if truth.sem[a, b] else "cnd" for a, b in zip(i, j)}
    result = corpus_dh(CorpusDhOptions(grammar=grammar, assignments=sets, order="full",
                                       top=1000))
    listed = {p.pair: p.held for p in result.violating}
    assert listed == expected
    departures = [p.departure for p in result.violating]
    assert all(d > 0 for d in departures)
    assert departures == sorted(departures, reverse=True)


def test_parity_lists_the_frequency_ratio_pair_and_says_how_it_ranks(cli):
    """0a and 0b are followed alike (sem) but drawn with probabilities 0.1 and 0.9 wherever a
    0 comes (not cnd, cnd distance |0.1 - 0.9| / (0.1 + 0.9)): the one violation of parity,
    which cosines of PPMI vectors cannot see."""
    code, out, err = cli(["corpus-dh", "--grammar", "parity", "--set", "n_bits=4", "--order",
                          "full"])
    assert code == 0, err
    listed = out[out.index("most DH-violating pairs"):out.index("relations against")]
    assert "by the estimated relations" in listed
    assert listed.splitlines()[1:] == ["  0a ~ 0b: sem, not cnd (cnd distance 0.8)"]


def test_parity_dh_estimate_is_zero_and_text_names_it(cli):
    code, out, err = cli(["corpus-dh", "-g", "parity-dh", "--set", "n_bits=3", "--order",
                          "full"])
    assert code == 0, err
    assert "estimated 0.000 (0 of 1), exact 0.000 (0 of 1)" in out
    assert "sem: precision 1.000, recall 1.000" in out


def test_sampled_counts_say_so(cli):
    code, out, err = cli(["corpus-dh", "-g", "four-cases", "--samples", "5000", "--seed", "3",
                          "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["source"]["strings"] == 5000 and doc["relations"]["tolerance"] == 0.05
    # every string of four-cases has 3 or 4 symbols, and one end: 4 or 5 positions each
    assert 4 * 5000 <= doc["source"]["positions"] <= 5 * 5000


def test_sampled_relations_are_called_estimates_and_a_small_sample_is_warned_of(cli):
    """Only exact counts at full order give exact relations; 50 strings of four-cases see each
    of its contexts about 13 times, under the 1 / 0.05^2 = 400 the tolerance asks: warned."""
    code, out, err = cli(["corpus-dh", "-g", "four-cases", "--order", "full"])
    assert code == 0, err
    assert "these are exact relations" in out and "warning" not in out
    code, out, err = cli(["corpus-dh", "-g", "four-cases", "--order", "full", "--samples", 50])
    assert code == 0, err
    assert "exact relations" not in out
    assert "the order covers every string: relations estimated from the sampled strings" in out
    (warning,) = [line for line in out.splitlines() if line.startswith("warning:")]
    assert ("warning: the sample is too small for relations at tolerance 0.05: its 18 contexts "
            "occur 12.9 times each on average") in warning
    assert "1 / 0.05^2 = 400 occurrences" in warning
    code, out, err = cli(["corpus-dh", "-g", "four-cases", "--order", "full", "--samples", 50,
                          "--json"])
    size = json.loads(out)["relations"]["sample_size"]
    assert size["too_small"] and size["needed_per_context"] == pytest.approx(400)
    assert json.loads(out)["relations"]["estimated_from_sample"]


def test_the_helps_sampled_example_recovers_the_exact_relations_unwarned(cli):
    code, out, _ = cli(["corpus-dh", "--help"])
    example = out[out.index("dhwt corpus-dh --grammar parity"):].split("#")[0]
    args = example.replace("\\\n", " ").split()[2:]
    assert "--samples" in args
    code, out, err = cli(["corpus-dh", *args])
    assert code == 0, err
    assert "warning" not in out and "relations estimated from the sampled strings" in out
    assert "sem: precision 1.000, recall 1.000" in out
    assert "DH violation" in out and "estimated 1.000 (2 of 2), exact 1.000 (2 of 2)" in out


def test_a_text_file_by_characters_with_out(cli, tmp_path):
    text = tmp_path / "tiny.txt"
    text.write_text(TEXT)
    out_dir = tmp_path / "report"
    code, out, err = cli(["corpus-dh", "--corpus", text, "--tokenizer", "char", "--dim", "5",
                          "--out", out_dir])
    assert code == 0, err
    assert f"{len(TEXT):,} tokens" in out
    doc = json.loads((out_dir / "corpus_dh.json").read_text())
    characters = Counter(TEXT)
    assert doc["tokens"]["vocabulary"] == len(characters) + 1  # + <unk>
    assert doc["tokens"]["never_occur"] == 1  # <unk>
    assert doc["vectors"]["dim"] == 5
    with open(out_dir / "per_token.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == doc["input_output_knn_overlap"]["tokens"]
    for row in rows:
        assert float(row["count"]) == characters[row["token"]]
    null = doc["input_output_knn_overlap"]["frequency_null"]
    assert null["overlap"] == pytest.approx(np.mean([float(r["frequency_null_overlap"])
                                                     for r in rows]))
    bins = null["bins"]  # min(20, tokens // 2) equal groups, fewer where a repeated count merges
    assert 1 <= bins <= min(20, len(rows) // 2)
    assert null["permutations"] == 200 and null["seed"] == 0
    assert {int(r["frequency_bin"]) for r in rows} == set(range(1, bins + 1))
    assert all(sum(int(r["frequency_bin"]) == b for r in rows) >= 2 for b in range(1, bins + 1))
    assert f"frequency-matched null {null['overlap']:.4f}" in out
    assert f"permuted within {bins} frequency bins" in out
    assert (out_dir / "figures" / "overlap_by_frequency.png").stat().st_size > 0
    assert "overlap_by_frequency.png" in (out_dir / "report.md").read_text()
    assert (out_dir / "report.html").is_file()
    again = cli(["corpus-dh", "--corpus", text, "--tokenizer", "char", "--dim", "5",
                 "--out", out_dir])  # an earlier report of this command is replaced
    assert again[0] == 0, again[2]


def test_a_bpe_larger_than_the_text_gives_says_what_it_learned(cli, tmp_path, monkeypatch):
    pytest.importorskip("tokenizers")
    monkeypatch.setenv("DHWT_CACHE", str(tmp_path / "cache"))
    text = tmp_path / "tiny.txt"
    text.write_text(TEXT)
    code, out, err = cli(["corpus-dh", "--corpus", text, "--tokenizer", "bpe:10000000", "--dim",
                          "5", "--json"])
    assert code == 0, err
    learned = json.loads(out)["tokens"]["vocabulary"]
    assert 257 <= learned < 10_000_000
    code, out, err = cli(["corpus-dh", "--corpus", text, "--tokenizer", "bpe:10000000", "--dim",
                          "5"])
    assert code == 0, err
    assert out.splitlines()[1] == (f"note: bpe:10000000 asked for 10,000,000 tokens and learned "
                                   f"{learned:,}: the train text has no more pairs to merge")


def test_out_refuses_a_folder_of_the_users_files(cli, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.html").write_text("my page")
    code, _, err = cli(["corpus-dh", "--grammar", "four-cases", "--out", mine])
    assert code == 2 and "no earlier corpus-dh report (corpus_dh.json)" in err, err
    assert [p.name for p in mine.iterdir()] == ["report.html"]
    assert (mine / "report.html").read_text() == "my page"


def test_a_corpus_folder_by_words_uses_the_token_cache(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("DHWT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "corpus"
    folder.mkdir()
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").write_text(TEXT if split == "train" else "the cat\n")
    code, out, err = cli(["corpus-dh", "--corpus", folder, "--tokenizer", "word", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    words = len(TEXT.split()) + TEXT.count("\n")  # one <eos> per line
    assert doc["source"]["positions"] == words and doc["source"]["split"] == "train"
    assert doc["dh_violating_pairs_ranked_by"].startswith("neighbourhood cosines, no relations")
    assert (tmp_path / "cache" / "tokens").is_dir()


def test_help_has_examples(cli):
    code, out, _ = cli(["corpus-dh", "--help"])
    assert code == 0 and "Examples:" in out and "--order" in out and "--samples" in out


@pytest.mark.parametrize("args, fragment", [
    (["--corpus", "{text}", "--tokenizer", "chars"], "unknown tokenizer 'chars'"),
    (["--corpus", "{missing}", "--tokenizer", "char"], "is neither wikitext-2 nor an existing"),
    (["--grammar", "four-cases", "--order", "0"], "order must be >= 1, got 0"),
    (["--grammar", "four-cases", "--order", "two"], "order must be a whole number or 'full'"),
    (["--grammar", "four-cases", "--dim", "0"], "dim must be >= 1, got 0"),
    (["--grammar", "parrot"], "unknown grammar 'parrot'"),
    (["--grammar", "parity", "--set", "n_bits=0"], "'n_bits' must be an integer"),
    ([], "give one source of counts"),
    (["--grammar", "parity", "--corpus", "{text}"], "give one source of counts"),
    (["--corpus", "{text}"], "--corpus needs --tokenizer"),
    (["--corpus", "{text}", "--tokenizer", "char", "--order", "full"], "--order full"),
    (["--corpus", "{text}", "--tokenizer", "char", "--samples", "5"], "--samples belongs to"),
    (["--grammar", "four-cases", "--tokenizer", "char"], "--tokenizer belongs to --corpus"),
    (["--grammar", "four-cases", "--samples", "0"], "samples must be >= 1, got 0"),
    (["--grammar", "four-cases", "--tolerance", "-1"], "tolerance must be a finite number"),
    (["--grammar", "four-cases", "--null-bins", "0"], "null_bins must be >= 1, got 0"),
    (["--grammar", "four-cases", "--permutations", "0"], "permutations must be >= 1, got 0"),
    (["--grammar", "four-cases", "--out", "{text}/r"], "is not a directory"),
])
def test_bad_input_is_one_error_line(cli, tmp_path, args, fragment):
    (tmp_path / "t.txt").write_text(TEXT)
    places = {"{text}": str(tmp_path / "t.txt"), "{missing}": str(tmp_path / "nothere")}
    for key, value in places.items():
        args = [a.replace(key, value) for a in args]
    before = sorted(tmp_path.rglob("*"))
    code, out, err = cli(["corpus-dh", *args])
    assert code == 2 and out == "", (code, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert fragment in err, err
    assert sorted(tmp_path.rglob("*")) == before
