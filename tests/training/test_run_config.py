"""Text corpora as a data source of `dhwt train` and `dhwt study`: a corpus folder, the word
tokenizer, full valid/test perplexity, and the errors of mixed or incomplete sources."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from dhwt.errors import DhwtError
from dhwt.config.study import StudyConfig
from dhwt.config import TrainConfig
from dhwt.runs.run import load_run

WORDS = "the cat sat on a mat and the dog ran to the red door".split()


@pytest.fixture()
def corpus(tmp_path, monkeypatch):
    """A folder with train/valid/test.txt of random lines; the token cache in tmp_path."""
    monkeypatch.setenv("DHWT_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    folder = tmp_path / "text"
    folder.mkdir()
    for split, lines in (("train", 60), ("valid", 9), ("test", 7)):
        text = "".join(" ".join(rng.choice(WORDS, 6)) + "\n" for _ in range(lines))
        (folder / f"{split}.txt").write_text(text)
    return folder


MODEL = ["--objective", "clm", "--steps", "2", "--batch-size", "3", "--eval-every", "2",
         "--seeds", "1,2"]


def test_train_on_a_corpus_folder_reports_full_valid_and_test_perplexity(corpus, tmp_path, cli):
    code, out, err = cli(["train", "--corpus", str(corpus), "--tokenizer", "word", "--seq-len", "5",
                         *MODEL, "--out", str(tmp_path / "run")])
    assert code == 0, err
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().split("\n")
             if x]
    assert {(r["step"], r["split"]) for r in lines if r["split"] == "test"} == {(2, "test")}
    counts = np.load(tmp_path / "run" / "token_counts.npy")
    words = (corpus / "train.txt").read_text().split()
    assert counts.sum() == len(words) + 60  # every word and one <eos> per line
    report = (tmp_path / "run" / "report.md").read_text()
    final = [r for r in lines if r["step"] == 2 and r["split"] == "valid" and r["member"] == 0]
    assert f"{math.exp(final[0]['loss']):.2f}" in report
    config = TrainConfig.from_toml(tmp_path / "run" / "config.toml")
    assert (config.data.corpus, config.data.tokenizer, config.data.seq_len) == (str(corpus), "word", 5)


def test_text_reports_say_how_many_windows_each_split_evaluated(corpus, tmp_path, cli):
    """valid and test: every token but the first predicted once, in windows of 5 predictions
    (the last one short); train: as many as valid; train_fresh: one batch of 3. The run's
    report and analyze's loss table both give them."""
    code, _, err = cli(["train", "--corpus", str(corpus), "--tokenizer", "word", "--seq-len",
                        "5", *MODEL, "--out", str(tmp_path / "run")])
    assert code == 0, err
    tokens = {split: len((corpus / f"{split}.txt").read_text().split()) + lines
              for split, lines in (("valid", 9), ("test", 7))}  # a word each, <eos> a line
    windows = {split: math.ceil((n - 1) / 5) for split, n in tokens.items()}
    windows |= {"train": windows["valid"], "train_fresh": 3}
    report = (tmp_path / "run" / "report.md").read_text()
    assert "| seed | split | windows | loss | perplexity | accuracy |" in report
    for split, n in windows.items():
        assert any(line.startswith(f"| 1 | {split} | {n} | ") for line in report.splitlines())
    assert cli(["analyze", tmp_path / "run", "--similarity", "none", "--out",
                tmp_path / "rep"])[0] == 0
    table = (tmp_path / "rep" / "report.md").read_text()
    for split in ("valid", "test", "train"):
        assert f"| run | {split} | 2 | {windows[split]} | " in table


def test_the_report_says_the_vocabulary_a_bpe_learned(corpus, tmp_path, cli):
    """The corpus has 14 words: bpe:100000 stops merging far short of 100,000 tokens."""
    code, out, err = cli(["train", "--corpus", str(corpus), "--tokenizer", "bpe:100000",
                          "--seq-len", "5", *MODEL, "--out", str(tmp_path / "run")])
    assert code == 0, err
    learned = len(load_run(tmp_path / "run").embeddings().vocab)
    assert 257 <= learned < 100_000
    report = (tmp_path / "run" / "report.md").read_text()
    assert (f"tokenizer `bpe:100000` (bpe:100000 asked for 100,000 tokens and learned "
            f"{learned:,}: the train text has no more pairs to merge)") in report


@pytest.mark.parametrize("extra, message", [
    (["--grammar", "parity"], "either grammar or corpus"),
    (["--tokenizer", "bpe:12"], "bpe vocabulary size must be a whole number >= 257"),
    (["--tokenizer", "chars"], "unknown tokenizer 'chars'"),
    (["--data", "somewhere"], "goes with corpus = \"wikitext-2\" only"),
])
def test_bad_text_sources_are_one_line_errors(corpus, tmp_path, cli, extra, message):
    given = dict(zip(["--corpus", "--tokenizer", "--seq-len", *MODEL[::2]],
                     [str(corpus), "word", "5", *MODEL[1::2]]))
    given.update(zip(extra[::2], extra[1::2]))  # an option is given once: the case's value
    args = ["train", *[x for pair in given.items() for x in pair], "--out", str(tmp_path / "run")]
    code, out, err = cli(args)
    assert code == 2 and err.startswith("error: ") and message in err and not out, err
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()


def test_text_options_need_a_corpus():
    with pytest.raises(DhwtError, match="seq_len is an option of text corpora"):
        TrainConfig(grammar="parity", seq_len=8)
    with pytest.raises(DhwtError, match=r"needs tokenizer \(gpt2, bpe:N, word or char\)"):
        TrainConfig(corpus="wikitext-2", objective="clm", batch_size=2, seq_len=8)


STUDY = """
[data]
corpus = "{corpus}"
tokenizer = "word"
seq_len = 5
[train]
objective = "clm"
d_model = 8
n_heads = 2
d_ff = 8
positions = "sinusoidal"
tie_schedule = "untied"
seeds = [1, 2]
steps = 2
batch_size = 3
eval_every = 2
snapshot_every = 1
[[runs]]
name = "body-shared"
vary = "embeddings"
[[runs]]
name = "redrawn"
seeds = [5, 6]
vary = "embeddings"
init_from = "body-shared"
redraw = "input"
freeze = "loaded"
"""


def test_a_text_study_chains_a_run_into_the_next(corpus, tmp_path, cli):
    path = tmp_path / "study.toml"
    path.write_text(STUDY.format(corpus=corpus))
    code, _, err = cli(["study", path, "--out", tmp_path / "s"])
    assert code == 0, err
    config = TrainConfig.from_toml(tmp_path / "s" / "runs" / "redrawn" / "config.toml")
    assert config.members.init_from == str((tmp_path / "s" / "runs" / "body-shared").resolve())
    report = (tmp_path / "s" / "report.md").read_text()
    assert "| body-shared | test | 2 |" in report and "| redrawn | test | 2 |" in report
    assert (tmp_path / "s" / "analysis" / "redrawn" / "report.md").is_file()


@pytest.mark.slow
def test_a_relative_init_from_is_taken_from_the_out_directory(corpus, tmp_path, cli,
                                                              monkeypatch):
    first, second = tmp_path / "first.toml", tmp_path / "second.toml"
    first.write_text(STUDY.format(corpus=corpus).split("[[runs]]\nname = \"redrawn\"")[0])
    second.write_text(STUDY.format(corpus=corpus).replace(
        'init_from = "body-shared"', 'init_from = "../a/runs/body-shared@2"'))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # the working directory plays no part
    code, _, err = cli(["study", second, "--out", tmp_path / "studies" / "b"])
    assert code == 2 and err.count("\n") == 1 and "starts from " in err, err
    assert str(tmp_path / "studies" / "a" / "runs" / "body-shared") in err
    assert not (tmp_path / "studies").exists()
    assert cli(["study", first, "--out", tmp_path / "studies" / "a"])[0] == 0
    code, _, err = cli(["study", second, "--out", tmp_path / "studies" / "b"])
    assert code == 0, err
    config = TrainConfig.from_toml(tmp_path / "studies" / "b" / "runs" / "redrawn" / "config.toml")
    assert config.members.init_from == f"{(tmp_path / 'studies' / 'a' / 'runs' / 'body-shared').resolve()}@2"


def test_a_relative_corpus_path_is_taken_from_the_study_file(corpus, tmp_path, monkeypatch):
    path = tmp_path / "study.toml"
    path.write_text(STUDY.format(corpus=corpus.name))  # "text", beside the file
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert {config.data.corpus for _, config in StudyConfig.from_toml(path).runs} == {str(corpus.resolve())}
    path.write_text(STUDY.format(corpus="wikitext-2"))  # a name, not a path: kept
    assert {config.data.corpus for _, config in StudyConfig.from_toml(path).runs} == {"wikitext-2"}


def test_text_studies_refuse_an_analysis_table(corpus, tmp_path):
    path = tmp_path / "study.toml"
    path.write_text(STUDY.format(corpus=corpus) + '[analysis]\nmeasure = "raw"\n')
    with pytest.raises(DhwtError, match=r"\[analysis\] \['measure'\] is for grammar studies"):
        StudyConfig.from_toml(path)


def test_study_refuses_a_later_or_unknown_source_and_mixed_data(corpus, tmp_path):
    path = tmp_path / "study.toml"
    path.write_text(STUDY.format(corpus=corpus).replace('init_from = "body-shared"',
                                                        'init_from = "nothing@2"'))
    with pytest.raises(DhwtError, match="'nothing', which is not an earlier run"):
        StudyConfig.from_toml(path)
    path.write_text(STUDY.format(corpus=corpus).replace("seq_len = 5", "seq_len = 5\nsplit_seed = 1"))
    with pytest.raises(DhwtError, match=r"unknown \[data\] keys \['split_seed'\]"):
        StudyConfig.from_toml(path)


def test_the_wikitext_experiment_files_load_with_the_reference_settings():
    folder = Path(__file__).resolve().parents[2] / "experiments" / "wikitext"
    gpu = TrainConfig.from_toml(folder / "gpu.toml")
    assert (gpu.model.d_model, gpu.model.n_layers, gpu.model.n_heads, gpu.model.d_ff,
            gpu.data.seq_len, gpu.optim.batch_size, gpu.optim.steps, gpu.optim.lr,
            gpu.data.tokenizer, gpu.members.vary) == (
        512, 6, 8, 2048, 512, 12, 16000, 1e-4, "gpt2", "embeddings")
    assert TrainConfig.from_toml(folder / "cpu.toml").data.corpus == "wikitext-2"
    runs = dict(StudyConfig.from_toml(folder / "butterfly.toml").runs)
    assert runs["exp2"].members.init_from == "exp1" and runs["exp2"].members.freeze == "loaded"
    assert {str(c.tying.tie_schedule) for _, c in StudyConfig.from_toml(folder / "tying.toml").runs} == {
        "tied", "untie@150"}
    assert dict(StudyConfig.from_toml(folder / "exp1_long.toml").runs)["exp1-long"].optim.steps == 2000
    longer = dict(StudyConfig.from_toml(folder / "exp2_long.toml").runs)["exp2-long"]
    assert (longer.members.init_from, longer.optim.steps) == ("../wt2-butterfly/runs/exp1", 1000)
    cadence = {"init_from", "steps", "eval_every", "snapshot_every", "checkpoint_every"}
    assert ({k: v for k, v in longer.to_dict().items() if k not in cadence}
            == {k: v for k, v in runs["exp2"].to_dict().items() if k not in cadence})


def test_population_every_is_refused_on_text(corpus, tmp_path, cli):
    (tmp_path / "pop.toml").write_text("population_every = 2\n")
    code, out, err = cli(["train", "--corpus", str(corpus), "--tokenizer", "word", "--seq-len",
                          "5", *MODEL, "--config", tmp_path / "pop.toml",
                          "--out", tmp_path / "run"])
    assert code == 2 and "population_every needs a synthetic language" in err, err
    assert not (tmp_path / "run").exists()


def _fake_wikitext(folder: Path) -> Path:
    """A folder holding WikiText-2's file names (not its text: found, but refused when read)."""
    folder.mkdir()
    for split in ("train", "valid", "test"):
        (folder / f"wiki.{split}.tokens").write_text(" = not WikiText = \n")
    return folder


def test_a_bad_wikitext2_path_is_an_error_naming_it_not_skipped(tmp_path, cli, monkeypatch):
    """DHWT_DATA holds a WikiText-2 (by its file names); WIKITEXT2_PATH, read first, names none:
    the run stops there instead of reading the other copy, and writes nothing."""
    monkeypatch.setenv("DHWT_DATA", str(_fake_wikitext(tmp_path / "data")))
    monkeypatch.setenv("WIKITEXT2_PATH", str(tmp_path / "nowhere"))
    code, out, err = cli(["train", "--corpus", "wikitext-2", "--tokenizer", "word", "--seq-len",
                          "5", *MODEL, "--out", tmp_path / "run"])
    assert (code, out) == (2, "") and err == (
        f"error: WIKITEXT2_PATH={tmp_path / 'nowhere'} holds no WikiText-2: expected "
        "wiki.train/valid/test.tokens (or a wikitext-2/ folder of them) or the archive "
        "wikitext-2-v1.tokens.tar.xz; fix or unset WIKITEXT2_PATH\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


@pytest.mark.parametrize("variable", ["WIKITEXT2_PATH", "DHWT_DATA"])
def test_the_wikitext2_copy_found_in_the_environment_is_recorded_as_the_runs_data(
        variable, tmp_path, monkeypatch):
    from dhwt.training.run_config import resolve_run_config

    monkeypatch.delenv("WIKITEXT2_PATH", raising=False)
    monkeypatch.delenv("DHWT_DATA", raising=False)
    folder = _fake_wikitext(tmp_path / "wt2")
    monkeypatch.setenv(variable, str(folder))
    options = {"corpus": "wikitext-2", "tokenizer": "word", "seq_len": 5, "objective": "clm",
               "batch_size": 3}
    config = resolve_run_config(options, None, tmp_path / "run", overwrite=False, resume=False)
    assert config.data.data == str(folder.resolve())
    assert f'data = "{folder.resolve()}"' in config.to_toml()
