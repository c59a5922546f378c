"""Bad masking and twin-planting keys of a text run (dhwt.text.masking, .twins): one line
`error: ...` naming the key, exit 2, nothing written; a text MLM run with twins records the
planted truth beside it, and resumes bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest

BASE = """corpus = "{corpus}"
tokenizer = "word"
seq_len = 8
batch_size = 4
steps = 2
eval_every = 1
snapshot_every = 1
"""

CASES = [
    ('objective = "mlm"\nmask_rate = 0', "mask_rate must be in (0, 1], got 0"),
    ('objective = "mlm"\nmask_rate = 1.5', "mask_rate must be in (0, 1], got 1.5"),
    ('objective = "mlm"\nmask_rule = "random"',
     "mask_rule must be one of mask, bert, got 'random'"),
    ('objective = "clm"\nmask_rule = "bert"',
     'mask_rule is an option of masked LM (objective = "mlm"); a causal LM masks nothing'),
    ('objective = "mlm"\ntwins = 0', "twins must be >= 1, got 0"),
    ('objective = "mlm"\ntwins = []', "twins must be a positive count or a non-empty list"),
    ('objective = "mlm"\ntwins = ["the", "the"]', "twins lists the token 'the' twice"),
    ('objective = "mlm"\ntwins = 2\ntwin_p = 1.0', "twin_p must be in (0, 1), got 1.0"),
    ('objective = "mlm"\ntwins = 2\ntwin_kind = "both"',
     "twin_kind must be one of sem, cnd, got 'both'"),
    ('objective = "clm"\ntwins = 2\ntwin_kind = "cnd"\ntwin_p = 0.3',
     "twin_p is the ratio of sem twins; cnd twins are a or b at 0.5, got twin_p = 0.3"),
    ('objective = "mlm"\ntwins = 2\ntwin_seed = -1', "twin_seed must be >= 0, got -1"),
    ('objective = "mlm"\ntwin_p = 0.1',
     "twin_p is an option of twin planting; give twins too"),
    ('objective = "mlm"\ntwins = ["zebra"]',
     "twins: the token 'zebra' is not in the vocabulary"),
    ('objective = "mlm"\ntwins = 50', "twins = 50 but the train split has 4 tokens to twin"),
]


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").write_text("the cat sat\nthe dog sat the cat\n" * 20)
    return folder


@pytest.mark.parametrize("extra, fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_text_keys_are_one_error_line_and_nothing_written(
        extra, fragment, corpus, tmp_path, cli, rundirs, monkeypatch):
    monkeypatch.setenv("DHWT_CACHE", str(tmp_path / "cache"))
    config = tmp_path / "run.toml"
    config.write_text(BASE.format(corpus=corpus) + extra + "\n")
    before = rundirs.digest(corpus)
    code, out, err = cli(["train", "--config", config, "--out", tmp_path / "run"])
    assert code == 2 and out == "", err
    assert err.startswith("error: ") and err.count("\n") == 1 and fragment in err, err
    assert not (tmp_path / "run").exists() and rundirs.digest(corpus) == before


def test_text_keys_need_a_corpus(tmp_path, cli):
    config = _write(tmp_path, 'grammar = "parity"\nsteps = 2\ntwins = 3')
    code, _, err = cli(["train", "--config", config, "--out", tmp_path / "run"])
    assert code == 2 and "twins is an option of text corpora; give corpus too" in err, err


@pytest.mark.slow
def test_masked_text_run_with_twins_writes_the_planted_truth_and_resumes(
        corpus, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("DHWT_CACHE", str(tmp_path / "cache"))
    config = _write(tmp_path, BASE.format(corpus=corpus) + 'objective = "mlm"\ntwins = ["cat"]\n'
                    "twin_p = 0.25\ncheckpoint_every = 1")
    run = tmp_path / "run"
    code, _, err = cli(["train", "--config", config, "--out", run])
    assert code == 0, err
    truth = json.loads((run / "twins.json").read_text())
    assert [(q["a"], q["b"]) for q in truth["pairs"]] == [("cat", "cat#twin")]
    assert truth["pairs"][0]["relations"]["mlm"]["sem"] is True
    assert 'mask_rule = "mask"' in (run / "config.toml").read_text()
    code, _, err = cli(["train", "--out", run, "--resume", "--steps", "3"])
    assert code == 0, err


def _write(tmp_path, text: str):
    path = tmp_path / "extra.toml"
    path.write_text(text + "\n")
    return path


@pytest.mark.slow
def test_masked_text_run_resumed_equals_one_run_bit_for_bit(corpus, tmp_path, cli, monkeypatch):
    """The masks are drawn from the members' generators, which checkpoints keep."""
    from dhwt.runs import load_run

    monkeypatch.setenv("DHWT_CACHE", str(tmp_path / "cache"))
    config = _write(tmp_path, BASE.format(corpus=corpus) + 'objective = "mlm"\n'
                    'mask_rule = "bert"\nmask_rate = 0.4\ntwins = 2\ntwin_p = 0.3\n'
                    "checkpoint_every = 1\nseeds = [1, 2]")
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert cli(["train", "--config", config, "--steps", "4", "--out", whole])[0] == 0
    assert cli(["train", "--config", config, "--out", parts])[0] == 0
    code, _, err = cli(["train", "--out", parts, "--resume", "--steps", "4"])
    assert code == 0, err
    one, two = load_run(whole).embeddings(4), load_run(parts).embeddings(4)
    assert np.array_equal(one.input, two.input) and np.array_equal(one.output, two.output)


@pytest.mark.slow
def test_a_study_file_plants_twins_in_every_run(corpus, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("DHWT_CACHE", str(tmp_path / "cache"))
    study = tmp_path / "study.toml"
    study.write_text(f'[data]\ncorpus = "{corpus}"\ntokenizer = "word"\nseq_len = 8\n'
                     'twins = ["cat"]\ntwin_p = 0.2\n[train]\nobjective = "mlm"\nsteps = 2\n'
                     'batch_size = 4\neval_every = 2\nsnapshot_every = 2\n'
                     '[[runs]]\nname = "tied"\n[[runs]]\nname = "untied"\n'
                     'tie_schedule = "untied"\n')
    code, _, err = cli(["study", study, "--out", tmp_path / "s"])
    assert code == 0, err
    for name in ("tied", "untied"):
        truth = json.loads((tmp_path / "s" / "runs" / name / "twins.json").read_text())
        assert truth["p"] == 0.2 and truth["pairs"][0]["b"] == "cat#twin"
