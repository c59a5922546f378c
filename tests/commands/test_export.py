"""`dhwt export RUN --to hf`: a GPT-2-convention run loaded by transformers'
AutoModelForCausalLM gives dhwt's logits, tied and untied; `dhwt diagnose` of the export equals
`dhwt diagnose` of the run; the other architectures are refused with their reasons in one line.

The runs are written with the writers the trainer uses (as dhwt.runs.run's example does), from
models whose every weight is drawn at random (biases, gains and all), so no weight that happens
to be 0 or 1 can hide a misplaced one."""

from __future__ import annotations

import json

import pytest
import torch

from dhwt.config import TrainConfig
from dhwt.models import ModelConfig, build_model
from dhwt.pretrained.reader import count_tokens
from dhwt.runs import layout
from dhwt.runs.checkpoints import save_checkpoint
from dhwt.runs.run import model_args
from dhwt.runs.snapshots import save_snapshot

VOCAB = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "[BOS]", "[EOS]")
GPT2 = dict(d_model=8, n_layers=2, n_heads=2, d_ff=16, norm="pre", final_norm=True,
            positions="learned")
SEEDS = [42, 43]
STEP = 30


def one_error(code, out, err):
    return code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1


def write_run(path, schedule, objective="clm", **model):
    """A run directory with one checkpoint and one snapshot of a randomly weighted model."""
    fields = {**GPT2, **model}
    config = TrainConfig(grammar="parity", objective=objective, tie_schedule=schedule,
                         steps=STEP, seeds=SEEDS, **fields)
    layout.create_run_dir(path, config.to_toml()).release()
    model_config = ModelConfig(vocab_size=len(VOCAB), max_len=9, causal=objective == "clm",
                               **fields)
    model = build_model(model_config, SEEDS, tied=schedule == "tied")
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator))
    save_snapshot(path / layout.EMBEDDINGS, STEP, model.embeddings.input_weight,
                  model.embeddings.output_weight, tied=schedule == "tied", seeds=SEEDS,
                  vocab=VOCAB)
    save_checkpoint(path / layout.CHECKPOINTS, STEP,
                    {"model": model.state_dict(), "model_args": model_args(model.config)})
    return model


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return {schedule: (root / schedule, write_run(root / schedule, schedule))
            for schedule in ("tied", "untied")}


@pytest.mark.slow  # importing transformers takes seconds
@pytest.mark.parametrize("schedule", ["tied", "untied"])
def test_transformers_gives_dhwt_logits(runs, schedule, tmp_path, cli):
    transformers = pytest.importorskip("transformers")
    run, model = runs[schedule]
    code, out, err = cli(["export", run, "--to", "hf", "--member", 1, "--out", tmp_path / "hf"])
    assert code == 0, err
    assert (f"exported member 1 (seed 43) of {run} at step {STEP}, {schedule}, as "
            f"GPT2LMHeadModel to {tmp_path / 'hf'}") in out
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "hf", output_loading_info=True)
    assert type(loaded).__name__ == "GPT2LMHeadModel"
    assert not any(info.values()), info  # no weight missing, unexpected or mismatched
    assert (loaded.lm_head.weight.data_ptr() == loaded.transformer.wte.weight.data_ptr()) \
        == (schedule == "tied")
    inputs = torch.randint(0, len(VOCAB), (2, 5, 9), generator=torch.Generator().manual_seed(1))
    model.eval()
    loaded.eval()
    with torch.no_grad():
        ours = model(inputs)[1]
        theirs = loaded(inputs[1]).logits
    assert ours.abs().max() > 1  # logits of some size: the tolerance below is no tautology
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-5)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tokenizer.convert_ids_to_tokens(list(range(len(VOCAB)))) == list(VOCAB)
    assert tokenizer("a j [EOS]")["input_ids"] == [0, 9, 11]
    assert tokenizer.unk_token is None  # it names no unknown-word token it does not hold
    with pytest.raises(Exception, match="(?i)unk"):  # so an unknown word is refused, not guessed
        tokenizer("a zz")
    assert (loaded.config.bos_token_id, loaded.config.eos_token_id) == (10, 11)


def diagnosis(cli, source):
    code, out, err = cli(["diagnose", source, "--json"])
    assert code == 0, err
    return json.loads(out)


def measured(subject):
    """A subject's diagnosis without what names it or tells its (unknowable) history."""
    return {k: v for k, v in subject.items() if k not in ("name", "history", "reading",
                                                          "tied_because")}


@pytest.mark.parametrize("schedule", ["tied", "untied"])
def test_diagnose_of_the_export_equals_diagnose_of_the_run(runs, schedule, tmp_path, cli):
    run, _ = runs[schedule]
    of_run = diagnosis(cli, run)["subjects"]
    for member in range(len(SEEDS)):
        out = tmp_path / f"m{member}"
        assert cli(["export", run, "--to", "hf", "--member", member, "--out", out])[0] == 0
        (subject,) = diagnosis(cli, out)["subjects"]
        assert measured(subject) == measured(of_run[member])
        assert subject["tied"] == (schedule == "tied")


def test_the_tokenizer_names_no_unknown_word_token_and_diagnose_counts_unknown_words(
        runs, tmp_path, cli):
    """The word-level tokenizer.json holds the run's symbols only and names no <unk> it does
    not hold: tokenizers loads it and encodes the symbols, and a word outside them is an error
    there; `dhwt diagnose --corpus` counts such words in one note (it ended in a traceback)."""
    tokenizers = pytest.importorskip("tokenizers")
    run, _ = runs["untied"]
    out = tmp_path / "hf"
    assert cli(["export", run, "--to", "hf", "--out", out])[0] == 0
    tokenizer = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tokenizer.get_vocab() == {token: i for i, token in enumerate(VOCAB)}
    named = json.loads((out / "tokenizer.json").read_text())["model"]["unk_token"]
    assert named in ("", None) or named in VOCAB
    assert tokenizer.encode("a j [EOS]").ids == [0, 9, 11]
    with pytest.raises(Exception, match="(?i)unk"):
        tokenizer.encode("a zz")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b zz a\nc zz q\n")
    code, text, err = cli(["diagnose", out, "--corpus", corpus, "--json"])
    assert code == 0, err
    doc = json.loads(text)
    assert [n for n in doc["notes"] if "zz" in n] == [
        f"3 words of {corpus} (2 distinct: 'zz', 'q') are not in the vocabulary of "
        "tokenizer.json, which has no unknown-word token, and not counted"]
    code, text, err = cli(["diagnose", out, "--corpus", corpus])
    assert code == 0 and "Traceback" not in err and "3 words of" in text
    counted = count_tokens(out, corpus)  # the words it knows, counted all the same
    assert counted.counts.tolist() == [2, 1, 1] + [0] * (len(VOCAB) - 3)


def test_an_earlier_export_is_replaced_and_nothing_else(runs, tmp_path, cli):
    run, _ = runs["untied"]
    out = tmp_path / "hf"
    assert cli(["export", run, "--to", "hf", "--out", out])[0] == 0
    code, out_text, err = cli(["export", run, "--to", "hf", "--member", 1, "--out", out])
    assert code == 0, err
    assert json.loads((out / "dhwt_export.json").read_text())["seed"] == 43
    (out / "notes.txt").write_text("mine")
    code, out_text, err = cli(["export", run, "--to", "hf", "--out", out])
    assert one_error(code, out_text, err) and "holds notes.txt, which export did not" in err, err
    assert (out / "notes.txt").read_text() == "mine"
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text("{}")
    code, out_text, err = cli(["export", run, "--to", "hf", "--out", other])
    assert one_error(code, out_text, err), err
    assert "holds files but no earlier export report (dhwt_export.json)" in err
    assert (other / "config.json").read_text() == "{}"


@pytest.mark.parametrize("objective,model,reasons", [
    ("mlm", dict(norm="post", final_norm=False, positions="none"),
     "a masked LM (causal false), and GPT-2 is causal; positions 'none', and GPT-2 learns a "
     "position table (positions learned); post-LN, and GPT-2 normalises before each sublayer "
     "(norm pre); no final LayerNorm, and GPT-2 has one (final_norm true)"),
    ("clm", dict(output_bias=True), "an output bias, and GPT2LMHeadModel's head has none"),
    ("clm", dict(emb_scale=True, logit_scale="rsqrt_d"),
     "emb_scale multiplies the input embeddings by sqrt(d_model), and GPT-2 does not; "
     "logit_scale 'rsqrt_d', and GPT-2's logits are h @ E_out^T"),
    ("clm", dict(positions="sinusoidal"),
     "positions 'sinusoidal', and GPT-2 learns a position table (positions learned)"),
], ids=["exor-defaults", "output-bias", "scales", "sinusoidal"])
def test_other_architectures_are_refused_with_the_reasons(objective, model, reasons, tmp_path,
                                                          cli):
    run = tmp_path / "run"
    write_run(run, "untied", objective=objective, **model)
    code, out, err = cli(["export", run, "--to", "hf", "--out", tmp_path / "hf"])
    assert one_error(code, out, err), err
    assert err == (f"error: {run} cannot be exported as transformers' GPT2LMHeadModel: "
                   f"{reasons}\n")
    assert not (tmp_path / "hf").exists()


def test_members_and_steps_the_run_lacks_are_refused(runs, tmp_path, cli):
    run, _ = runs["untied"]
    code, out, err = cli(["export", run, "--to", "hf", "--member", 2, "--out", tmp_path / "o"])
    assert one_error(code, out, err), err
    assert f"error: --member 2: {run} has 2 members (0 to 1, seeds 42, 43)" in err
    code, out, err = cli(["export", run, "--to", "hf", "--step", 7, "--out", tmp_path / "o"])
    assert one_error(code, out, err), err
    assert f"{run} keeps no checkpoint of step 7; it keeps steps {STEP}" in err
    assert not (tmp_path / "o").exists()


def test_a_run_without_a_checkpoint_has_nothing_to_export(tmp_path, cli):
    run = tmp_path / "run"
    layout.create_run_dir(run, TrainConfig(grammar="parity", objective="clm").to_toml()).release()
    code, out, err = cli(["export", run, "--to", "hf", "--out", tmp_path / "o"])
    assert one_error(code, out, err), err
    assert err == f"error: {run} keeps no checkpoint yet: nothing to export\n"
    code, out, err = cli(["export", run, "--to", "hf", "--step", "x", "--out", tmp_path / "o"])
    assert one_error(code, out, err) and "step must be a whole number or 'last', got 'x'" in err
