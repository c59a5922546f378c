"""`dhwt diagnose` on tiny Hugging Face checkpoints in each naming scheme, written with
safetensors directly (and with transformers' own save_pretrained where it is installed).

Expected values are derived independently: an output matrix that is a rotated, scaled copy of
the input has the same inner-product neighbours (overlap 1); independent matrices agree at the
chance level; the per-token overlap equals a float64 brute force."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from dhwt.analysis.diagnose_result import DiagnoseOptions, diagnose_path
from dhwt.errors import DhwtError
from dhwt.pretrained.layouts import LAYOUTS
from dhwt.report.diagnose_report import reading

V, D = 120, 12
# (model_type, input name, output name, extra config) of every naming scheme dhwt reads
SCHEMES = [
    ("gpt2", "transformer.wte.weight", "lm_head.weight", {}),
    ("gpt2", "wte.weight", "lm_head.weight", {}),
    ("gpt_neox", "gpt_neox.embed_in.weight", "embed_out.weight", {}),
    ("llama", "model.embed_tokens.weight", "lm_head.weight", {}),
    ("mistral", "model.embed_tokens.weight", "lm_head.weight", {}),
    ("qwen2", "model.embed_tokens.weight", "lm_head.weight", {}),
    ("gemma", "model.embed_tokens.weight", "lm_head.weight", {}),
    ("phi3", "model.embed_tokens.weight", "lm_head.weight", {}),
    ("olmo", "model.embed_tokens.weight", "lm_head.weight", {}),
    ("hf_olmo", "model.transformer.wte.weight", "model.transformer.ff_out.weight", {}),
    ("opt", "model.decoder.embed_tokens.weight", "lm_head.weight", {}),
    ("phi-msft", "transformer.embd.wte.weight", "lm_head.linear.weight", {}),
]


def write_checkpoint(folder, tensors, config=None, dtype=torch.float32, shards=1):
    """A checkpoint folder: config.json and the tensors in `shards` safetensors files (an index
    when more than one)."""
    folder.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    named = {k: torch.as_tensor(np.asarray(v)).to(dtype) for k, v in tensors.items()}
    if shards == 1:
        save_file(named, str(folder / "model.safetensors"))
        return folder
    names, weight_map = sorted(named), {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: named[n] for n in names[s::shards]}
        save_file(part, str(folder / file))
        weight_map.update({n: file for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


def brute_overlap(x, y, k):
    """Mean |N_x ∩ N_y| / k under inner product, self excluded, ties to the lower index."""
    def neighbours(m):
        score = np.asarray(m, np.float64) @ np.asarray(m, np.float64).T
        np.fill_diagonal(score, -np.inf)
        return np.lexsort((np.broadcast_to(np.arange(len(m)), score.shape), -score), axis=1)[:, :k]
    a, b = neighbours(x), neighbours(y)
    return np.array([len(set(r) & set(s)) / k for r, s in zip(a, b)])


@pytest.fixture(scope="module")
def matrices():
    rng = np.random.default_rng(0)
    e = rng.standard_normal((V, D)) * rng.lognormal(0, 0.3, (V, 1))
    rotation, _ = np.linalg.qr(rng.standard_normal((D, D)))
    return e, 2 * e @ rotation, rng.standard_normal((V, D))


@pytest.mark.parametrize("model_type,input_name,output_name,extra", SCHEMES,
                         ids=[f"{s[0]}:{s[1]}" for s in SCHEMES])
def test_every_scheme_copy_gives_overlap_one(tmp_path, matrices, model_type, input_name,
                                             output_name, extra):
    e, rotated, _ = matrices
    folder = write_checkpoint(tmp_path / "ck", {input_name: e, output_name: rotated,
                                                "model.norm.weight": np.ones(D)},
                              {"model_type": model_type, "tie_word_embeddings": False, **extra})
    result = diagnose_path(str(folder), DiagnoseOptions(k=5))
    (subject,) = result.subjects
    assert subject.diagnosis is not None and result.shape == (1, V, D)
    assert subject.diagnosis.overlap.mean == 1.0 and subject.diagnosis.overlap.exact
    assert subject.diagnosis.cka == pytest.approx(1.0, abs=1e-6)
    assert "largely agree" in reading(subject, result)


def test_independent_matrices_agree_at_chance_and_match_a_brute_force(tmp_path, matrices):
    e, _, other = matrices
    folder = write_checkpoint(tmp_path / "ck", {"model.embed_tokens.weight": e,
                                                "lm_head.weight": other},
                              {"model_type": "llama", "tie_word_embeddings": False})
    d = diagnose_path(str(folder), DiagnoseOptions(k=5, chance_queries=V)).subjects[0].diagnosis
    np.testing.assert_array_equal(d.overlap_per_token, brute_overlap(e, other, 5))
    # chance over all V queries is exact too: two independent draws of one distribution
    assert abs(d.overlap.mean - d.chance.mean) < 0.03 and d.overlap.mean < 0.12
    result = diagnose_path(str(folder), DiagnoseOptions(k=5))
    assert "mostly disagree" in reading(result.subjects[0], result)


def test_sampled_queries_give_the_exact_rows_and_an_interval(tmp_path, matrices):
    e, _, other = matrices
    folder = write_checkpoint(tmp_path / "ck", {"gpt_neox.embed_in.weight": e,
                                                "embed_out.weight": other},
                              {"model_type": "gpt_neox"})
    d = diagnose_path(str(folder), DiagnoseOptions(k=5, queries=40, seed=3)
                      ).subjects[0].diagnosis
    assert d.sampled and len(d.tokens) == 40
    exact = brute_overlap(e, other, 5)
    np.testing.assert_array_equal(d.overlap_per_token, exact[d.tokens])
    assert d.overlap.low < d.overlap.mean < d.overlap.high


@pytest.mark.parametrize("tensors,config,why", [
    ({"transformer.wte.weight": "e"}, {"model_type": "gpt2"}, "gpt2 ties them by default"),
    ({"model.embed_tokens.weight": "e"}, {"model_type": "gemma", "tie_word_embeddings": True},
     "tie_word_embeddings true"),
    ({"model.embed_tokens.weight": "e", "lm_head.weight": "e"},
     {"model_type": "llama", "tie_word_embeddings": False}, "are equal"),
    ({"model.embed_tokens.weight": "e", "lm_head.weight": "other"},
     {"model_type": "qwen2", "tie_word_embeddings": True}, "uses model.embed_tokens.weight"),
])
def test_a_tied_checkpoint_is_said_to_be_tied(tmp_path, matrices, cli, tensors, config, why):
    e, _, other = matrices
    values = {"e": e, "other": other}
    folder = write_checkpoint(tmp_path / "ck", {k: values[v] for k, v in tensors.items()}, config)
    (subject,) = diagnose_path(str(folder), DiagnoseOptions()).subjects
    assert subject.diagnosis is None and why in subject.tied_because
    code, out, _ = cli(["diagnose", folder, "--json"])
    assert code == 0 and json.loads(out)["subjects"][0]["tied"] is True


def test_sharded_bfloat16_checkpoint_with_index(tmp_path, matrices):
    e, rotated, _ = matrices
    folder = write_checkpoint(tmp_path / "ck", {"model.embed_tokens.weight": e,
                                                "lm_head.weight": rotated,
                                                "model.norm.weight": np.ones(D)},
                              {"model_type": "mistral", "tie_word_embeddings": False},
                              dtype=torch.bfloat16, shards=2)
    assert len(list(folder.glob("*.safetensors"))) == 2
    (subject,) = diagnose_path(str(folder), DiagnoseOptions(k=5)).subjects
    bf16 = torch.as_tensor(e).to(torch.bfloat16).float().numpy()
    assert subject.diagnosis.input.indices.shape == (V, 5)
    np.testing.assert_array_equal(
        subject.diagnosis.input.indices,
        np.lexsort((np.broadcast_to(np.arange(V), (V, V)),
                    -np.where(np.eye(V, dtype=bool), -np.inf, bf16.astype(np.float64)
                              @ bf16.astype(np.float64).T)), axis=1)[:, :5])


def test_tokenizer_json_names_tokens_and_padding_rows_are_left_out(tmp_path, matrices, cli):
    tokenizers = pytest.importorskip("tokenizers")
    e, rotated, _ = matrices
    folder = write_checkpoint(tmp_path / "ck", {"model.embed_tokens.weight": e,
                                                "lm_head.weight": rotated},
                              {"model_type": "llama", "tie_word_embeddings": False})
    words = [f"w{i}" for i in range(V - 8)]  # the last 8 rows are padding
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0")
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    (tmp_path / "corpus.txt").write_text("w3 w3 w3 w5\nw7 w3\n")
    code, out, err = cli(["diagnose", folder, "--k", 5, "--corpus", tmp_path / "corpus.txt",
                          "--out", tmp_path / "rep", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["tokens"] == V and any("padding" in n for n in doc["notes"])
    subject = doc["subjects"][0]
    assert subject["input_output_knn_overlap"]["tokens"] == V - 8
    assert subject["agree_most"][0]["token"].startswith("w")
    buckets = {b["label"]: b for b in subject["buckets"]}
    assert buckets["never seen"]["tokens"] == V - 8 - 3  # w3, w5, w7 seen
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "never seen" in report and '"w' in report
    assert (tmp_path / "rep" / "figures" / "diagnose.png").stat().st_size > 0


def test_missing_tokenizer_falls_back_to_ids_and_says_so(tmp_path, matrices, cli):
    e, rotated, _ = matrices
    folder = write_checkpoint(tmp_path / "ck", {"embed_in.weight": e, "embed_out.weight": rotated},
                              {"model_type": "gpt_neox"})
    code, out, _ = cli(["diagnose", folder, "--k", 3])
    assert code == 0 and "no tokenizer.json: tokens are shown by id" in out


def test_transformers_checkpoints_when_installed(tmp_path):
    transformers = pytest.importorskip("transformers")
    for name, config in (
            ("gpt_neox", transformers.GPTNeoXConfig(vocab_size=V, hidden_size=16,
                                                    num_hidden_layers=1, num_attention_heads=2,
                                                    intermediate_size=16,
                                                    tie_word_embeddings=False)),
            ("llama", transformers.LlamaConfig(vocab_size=V, hidden_size=16, num_hidden_layers=1,
                                               num_attention_heads=2, intermediate_size=16,
                                               tie_word_embeddings=True))):
        model = transformers.AutoModelForCausalLM.from_config(config)
        model.save_pretrained(tmp_path / name)
        (subject,) = diagnose_path(str(tmp_path / name), DiagnoseOptions(k=3)).subjects
        assert (subject.diagnosis is None) == config.tie_word_embeddings


# --- bad input: one line, exit 2 ----------------------------------------------------------------

def bad(tmp_path, matrices):
    e, rotated, _ = matrices
    nan = e.copy()
    nan[7] = np.nan
    cases = {
        "not a folder": (tmp_path / "missing", "does not exist"),
        "empty folder": (tmp_path / "empty", "neither a dhwt run directory"),
        "unknown layout": (write_checkpoint(tmp_path / "unknown", {"encoder.tok.weight": e,
                                                                    "decoder.head.weight": e},
                                            {"model_type": "mystery"}),
                           "no known embedding layout"),
        "shapes": (write_checkpoint(tmp_path / "shapes", {"model.embed_tokens.weight": e,
                                                          "lm_head.weight": rotated[:-1]},
                                    {"model_type": "llama", "tie_word_embeddings": False}),
                   "must hold the same tokens"),
        "untied without output": (write_checkpoint(tmp_path / "noout",
                                                   {"model.embed_tokens.weight": e},
                                                   {"model_type": "llama",
                                                    "tie_word_embeddings": False}),
                                  "no output matrix was found"),
        "nan rows": (write_checkpoint(tmp_path / "nan", {"model.embed_tokens.weight": nan,
                                                         "lm_head.weight": rotated},
                                      {"model_type": "llama", "tie_word_embeddings": False}),
                     "NaN or infinite values (1 rows, first row 7)"),
        "huge float64": (write_checkpoint(tmp_path / "huge",
                                          {"model.embed_tokens.weight": e * 1e300},
                                          {"model_type": "llama"}, dtype=torch.float64),
                         "has values too large for float32 scores"),
    }
    (tmp_path / "empty").mkdir()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "config.json").write_text("{}")
    (tmp_path / "bin" / "pytorch_model.bin").write_bytes(b"")
    cases["bin only"] = (tmp_path / "bin", "no .safetensors file")
    (tmp_path / "badjson").mkdir()
    (tmp_path / "badjson" / "config.json").write_text("{not json")
    cases["bad config"] = (tmp_path / "badjson", "cannot read")
    for name, index, words in (("binary index", b"\xc5\xd7" * 1_000, "as JSON: 'utf-8' codec"),
                               ("deep index", b"[" * 100_000, "as JSON: maximum recursion"),
                               ("no weight map", b'{"weight_map": ["a"]}', "holds no weight map")):
        folder = write_checkpoint(tmp_path / name, {"model.embed_tokens.weight": e},
                                  {"model_type": "llama"})
        (folder / "model.safetensors.index.json").write_bytes(index)
        cases[name] = (folder, words)
    return cases


def test_bad_input_is_one_line_and_exit_2(tmp_path, matrices, cli):
    for name, (path, words) in bad(tmp_path, matrices).items():
        code, out, err = cli(["diagnose", path])
        assert code == 2 and out == "", name
        assert err.startswith("error: ") and err.count("\n") == 1 and words in err, (name, err)


def test_unknown_layout_lists_names_found_and_layouts_known(tmp_path, matrices):
    folder = bad(tmp_path, matrices)["unknown layout"][0]
    with pytest.raises(DhwtError) as info:
        diagnose_path(str(folder), DiagnoseOptions())
    message = str(info.value)
    assert "encoder.tok.weight" in message and "decoder.head.weight" in message
    assert all(layout.inputs[0] in message for layout in LAYOUTS)


def test_out_refuses_a_folder_of_other_files(tmp_path, matrices, cli):
    e, rotated, _ = matrices
    folder = write_checkpoint(tmp_path / "ck", {"embed_in.weight": e, "embed_out.weight": rotated},
                              {"model_type": "gpt_neox"})
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "report.md").write_text("my notes")
    code, _, err = cli(["diagnose", folder, "--out", tmp_path / "mine"])
    assert code == 2 and "no earlier diagnose report" in err
    assert (tmp_path / "mine" / "report.md").read_text() == "my notes"
    assert cli(["diagnose", folder, "--out", tmp_path / "rep", "--k", 3])[0] == 0
    assert cli(["diagnose", folder, "--out", tmp_path / "rep", "--k", 3])[0] == 0  # replaced


@pytest.mark.parametrize("bad", [-2.0, np.nan, np.inf])
def test_bad_token_counts_are_one_error_line(tmp_path, matrices, cli, bad):
    """diagnose --counts goes through the one check of counts (frequency.check_counts)."""
    e, rotated, _ = matrices
    folder = write_checkpoint(tmp_path / "ck", {"embed_in.weight": e, "embed_out.weight": rotated},
                              {"model_type": "gpt_neox"})
    counts = np.ones(V)
    counts[3] = bad
    np.save(tmp_path / "counts.npy", counts)
    code, out, err = cli(["diagnose", folder, "--counts", tmp_path / "counts.npy"])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "counts.npy: token counts must be one finite, non-negative number per token" in err
