"""`dhwt diagnose` on checkpoints the measure cannot read as usual: too few tokens, two widths,
a tokenizer that does not fit the matrices, and options that belong to the other kind of source
(exit 2 and one `error:` line, or a note saying what was done)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.pretrained.test_reader import write_checkpoint

LLAMA = {"model_type": "llama", "tie_word_embeddings": False}


def checkpoint(folder, n, d_in=8, d_out=8, seed=0):
    rng = np.random.default_rng(seed)
    return write_checkpoint(folder, {"model.embed_tokens.weight": rng.standard_normal((n, d_in)),
                                     "lm_head.weight": rng.standard_normal((n, d_out))}, LLAMA)


def word_tokenizer(folder, size):
    """tokenizer.json of the words w0 .. w{size-1} (ids in that order)."""
    tokenizers = pytest.importorskip("tokenizers")
    model = tokenizers.models.WordLevel({f"w{i}": i for i in range(size)}, unk_token="w0")
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))


def one_error(code, out, err):
    return code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1


def test_two_tokens_are_too_few_for_a_knn_diagnostic(tmp_path, cli):
    """With 2 tokens each one's only neighbour is the other in any two spaces: overlap and
    chance are 1 whatever the matrices (it used to say 'no untied snapshot')."""
    folder = checkpoint(tmp_path / "two", 2)
    code, out, err = cli(["diagnose", folder])
    assert one_error(code, out, err), (code, out, err)
    assert "2 tokens: too few for a k-NN diagnostic, which needs at least 3" in err
    assert "no untied snapshot" not in err
    checkpoint(tmp_path / "three", 3)
    code, out, err = cli(["diagnose", tmp_path / "three", "--k", 2])  # k = n - 1: all others
    assert one_error(code, out, err) and "a k-NN diagnostic needs k <= 1" in err, err
    code, out, err = cli(["diagnose", tmp_path / "three"])  # k = 1 of 2 candidates
    assert code == 0 and "no untied snapshot" not in out, err


def test_no_chance_level_is_said_as_such(tmp_path, cli):
    folder = checkpoint(tmp_path / "ck", 30)
    code, out, err = cli(["diagnose", folder, "--chance-queries", 0])
    assert code == 0, err
    assert "no reading (the chance level was not computed: --chance-queries 0)" in out
    assert "no untied snapshot" not in out


def test_two_widths_compare_by_knn_and_cka_and_skip_procrustes(tmp_path, cli):
    """KNN match and CKA need no common width; an orthogonal map (Procrustes) and the copy
    residue do: they are not computed, and a note says so."""
    folder = checkpoint(tmp_path / "wide", 60, d_in=16, d_out=8)
    code, out, err = cli(["diagnose", folder, "--json", "--out", tmp_path / "rep"])
    assert code == 0, err
    doc = json.loads(out)
    assert any("16 wide and the output matrix 8" in n and "Procrustes" in n for n in doc["notes"])
    subject = doc["subjects"][0]
    assert subject["procrustes_error"] is None and subject["copy_residue"] is None
    assert 0 <= subject["cka"] <= 1
    code, out, _ = cli(["diagnose", folder])
    assert code == 0 and "Procrustes error not computed (the widths differ)" in out
    assert "nan" not in out
    assert "| not computed (the widths differ) |" in (tmp_path / "rep" / "report.md").read_text()


def test_a_tokenizer_larger_than_the_matrices_is_noted_and_its_extra_ids_counted(tmp_path, cli):
    folder = checkpoint(tmp_path / "ck", 40)
    word_tokenizer(folder, 50)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("w3 w3 w45\nw49 w7\n")  # w45, w49: ids past the 40 rows
    code, out, err = cli(["diagnose", folder, "--corpus", corpus, "--json"])
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert "tokenizer.json has 50 tokens and the matrices 40 rows: ids 40-49 have no row" \
        in " ".join(notes)
    assert f"2 of the 5 tokens of {corpus} have ids 40-49" in " ".join(notes)


def test_rows_past_a_much_smaller_tokenizer_are_not_called_padding(tmp_path, cli):
    folder = checkpoint(tmp_path / "ck", 120)
    word_tokenizer(folder, 20)
    code, out, err = cli(["diagnose", folder, "--json"])
    assert code == 0, err
    doc = json.loads(out)
    (note,) = [n for n in doc["notes"] if "rows 20-119" in n]
    assert "(padding)" not in note and "83%" in note and "may not be this model's" in note
    assert doc["subjects"][0]["input_output_knn_overlap"]["tokens"] == 20


def test_options_of_the_other_kind_of_source_are_refused(tmp_path, cli):
    from tests.report.text_runs import make_text_run

    folder = checkpoint(tmp_path / "ck", 30)
    code, out, err = cli(["diagnose", folder, "--step", 5])
    assert one_error(code, out, err) and "--step picks a snapshot of a run directory" in err
    run = make_text_run(tmp_path / "run")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("t1 t2\n")
    code, out, err = cli(["diagnose", run, "--corpus", corpus])
    assert one_error(code, out, err), (code, out, err)
    assert "it does not apply to a run directory" in err and "--counts FILE" in err



@pytest.mark.parametrize("how", ["rotated", "independent"])
def test_procrustes_error_matches_scipy(tmp_path, cli, how):
    """The Procrustes error evaluated on the rows, against scipy's orthogonal_procrustes on the
    matrices as stored (float32); a copy at an untie step: tests/analysis/test_diagnose_result.py."""
    from scipy.linalg import orthogonal_procrustes
    from scipy.stats import ortho_group

    rng = np.random.default_rng(3)
    e_in = rng.standard_normal((400, 32)).astype(np.float32)
    e_out = {"rotated": e_in @ ortho_group.rvs(32, random_state=4),
             "independent": rng.standard_normal((400, 32))}[how]
    folder = write_checkpoint(tmp_path / how, {"model.embed_tokens.weight": e_in,
                                               "lm_head.weight": e_out}, LLAMA)
    code, out, err = cli(["diagnose", folder, "--json"])
    assert code == 0, err
    error = json.loads(out)["subjects"][0]["procrustes_error"]
    x, y = e_in.astype(np.float64), np.asarray(e_out, np.float32).astype(np.float64)
    rotation, _ = orthogonal_procrustes(x, y)
    expected = np.linalg.norm(x @ rotation - y) / np.linalg.norm(y)
    assert error == pytest.approx(expected, abs=1e-6)
    assert expected < 1e-6 if how == "rotated" else expected > 1
