"""`dhwt diagnose ORG/NAME[@REVISION]`: Hugging Face Hub ids read from a directory laid out as
the Hub cache is (models--ORG--NAME/{blobs,refs,snapshots}) under HF_HUB_OFFLINE, fetched with
huggingface_hub's download replaced by a copy from a local "remote" folder and its file system
by a local fsspec one that counts the bytes read; each failure one `error:` line.

Expected values are derived independently: the bytes a ranged read needs are the 8-byte length,
the header and the embeddings' rows (V * d * 4 each), read off the file by hand; the diagnosis
of an id equals that of the same checkpoint given as a folder."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.pretrained.test_reader import write_checkpoint

hf = pytest.importorskip("huggingface_hub")
local = pytest.importorskip("fsspec.implementations.local")

V, D = 40, 8
COMMIT = "0123456789abcdef0123456789abcdef01234567"
PAYLOAD = (256, 1024)  # a float32 non-embedding tensor of 1 MiB


def one_error(code, out, err):
    return code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1


def checkpoint(folder, payload=False, tied=False, seed=0):
    """A GPT-2-named checkpoint: an input and output matrix, and a large other tensor."""
    rng = np.random.default_rng(seed)
    tensors = {"transformer.wte.weight": rng.standard_normal((V, D))}
    if not tied:
        tensors["lm_head.weight"] = rng.standard_normal((V, D))
    if payload:
        tensors["transformer.h.0.mlp.c_fc.weight"] = np.zeros(PAYLOAD)
    return write_checkpoint(folder, tensors, {"model_type": "gpt2", "tie_word_embeddings": tied})


def as_hub_cache(folder, cache, repo, commit=COMMIT, ref="main"):
    """Lay the files of `folder` out as huggingface_hub caches them: blobs named by their
    hash, refs/REF holding the commit, snapshots/COMMIT/FILE linking to the blob."""
    root = cache / ("models--" + repo.replace("/", "--"))
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / ref).write_text(commit)
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for file in folder.iterdir():
        blob = hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.copyfile(file, root / "blobs" / blob)
        (snapshot / file.name).symlink_to(Path("..", "..", "blobs", blob))
    return snapshot


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    """An empty Hugging Face cache and dhwt store in tmp_path, offline."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("DHWT_CACHE", str(tmp_path / "dhwt"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "hf"


def diagnosis(cli, source):
    code, out, err = cli(["diagnose", source, "--json"])
    assert code == 0, err
    return json.loads(out)


def measures(document):
    return [{k: v for k, v in s.items() if k not in ("name",)} for s in document["subjects"]]


def test_a_cached_model_is_read_offline_by_id_and_revision(tmp_path, cli, hub_env):
    folder = checkpoint(tmp_path / "plain")
    as_hub_cache(folder, hub_env, "org/name")
    local = diagnosis(cli, folder)
    for source in ("org/name", "org/name@main", f"org/name@{COMMIT}"):
        document = diagnosis(cli, source)
        assert measures(document) == measures(local), source
        assert document["source"] == source
        assert document["description"].startswith(f"Hugging Face Hub model {source} at commit "
                                                   f"{COMMIT} (gpt2, gpt2 layout")


def test_hf_home_places_the_cache_when_hf_hub_cache_is_unset(tmp_path, cli, hub_env,
                                                            monkeypatch):
    folder = checkpoint(tmp_path / "plain")
    as_hub_cache(folder, tmp_path / "home" / "hub", "org/name")
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert measures(diagnosis(cli, "org/name")) == measures(diagnosis(cli, folder))


def test_an_uncached_model_offline_is_one_error_line(cli, hub_env):
    code, out, err = cli(["diagnose", "org/absent"])
    assert one_error(code, out, err), err
    assert (f"error: org/absent is not a path here, and as a Hugging Face Hub id it is not in "
            f"the cache ({hub_env}) while HF_HUB_OFFLINE is set") in err
    code, out, err = cli(["diagnose", "org/absent", "--step", "3"])
    assert one_error(code, out, err) and "give a revision as ORG/NAME@REVISION" in err, err


def test_an_unknown_revision_offline_is_not_in_the_cache(tmp_path, cli, hub_env):
    as_hub_cache(checkpoint(tmp_path / "plain"), hub_env, "org/name")
    code, out, err = cli(["diagnose", "org/name@v2"])
    assert one_error(code, out, err) and "org/name@v2 is not a path here" in err, err


def test_a_path_that_exists_means_the_path(tmp_path, cli, hub_env):
    """`org/name` is a folder here and a cached model: the folder is read."""
    as_hub_cache(checkpoint(tmp_path / "plain", seed=1), hub_env, "org/name")
    checkpoint(tmp_path / "org" / "name", seed=2)
    document = diagnosis(cli, "org/name")
    assert document["description"].startswith("checkpoint org/name (gpt2")
    assert measures(document) == measures(diagnosis(cli, tmp_path / "org" / "name"))
    code, out, err = cli(["diagnose", "a/b/c"])  # no path and no id: as before
    assert one_error(code, out, err) and "error: a/b/c does not exist" in err, err
    code, out, err = cli(["diagnose", "org/typo"])  # org/ is a folder here: a mistyped path
    assert one_error(code, out, err) and "error: org/typo does not exist" in err, err


class CountingFileSystem(local.LocalFileSystem):
    """The local file system, counting the bytes read through the files it opens."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read = 0

    def _open(self, path, mode="rb", block_size=None, **kwargs):
        file = super()._open(path, mode, block_size, **kwargs)
        read, fs = file.read, self

        def counted(n=-1):
            data = read(n)
            fs.read += len(data)
            return data

        file.read = counted
        return file


def test_ranged_reads_fetch_the_header_and_the_embeddings_only(tmp_path):
    from safetensors.torch import load

    from dhwt.pretrained.hub import read_header, read_ranges

    file = checkpoint(tmp_path / "big", payload=True) / "model.safetensors"
    fs = CountingFileSystem(skip_instance_cache=True)
    names = ["transformer.wte.weight", "lm_head.weight"]
    header = read_header(fs, str(file))
    data = read_ranges(fs, str(file), header, names)
    header_length = struct.unpack("<Q", file.read_bytes()[:8])[0]
    assert fs.read == 8 + header_length + 2 * V * D * 4
    assert file.stat().st_size - fs.read == PAYLOAD[0] * PAYLOAD[1] * 4
    tensors = load(data)
    assert sorted(tensors) == sorted(names)
    for name in names:
        expected = load(file.read_bytes())[name]
        assert torch.equal(tensors[name], expected)


@pytest.fixture
def remote(tmp_path, monkeypatch, hub_env):
    """The Hub replaced by the folders under tmp_path/remote/ORG/NAME@COMMIT: downloads copy
    into the cache as huggingface_hub lays it out; ranged reads go through a counting local
    file system rooted there. Online (HF_HUB_OFFLINE unset)."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    root = tmp_path / "remote"
    downloads = []

    def download(repo, name, *, revision=None, cache_dir=None, **_):
        source = root / f"{repo}@{COMMIT}"
        if not source.is_dir():
            raise hf.errors.RepositoryNotFoundError("404", response=_response(404))
        if revision not in (None, "main", COMMIT):
            raise hf.errors.RevisionNotFoundError("404", response=_response(404))
        if not (source / name).is_file():
            raise hf.errors.RemoteEntryNotFoundError("404", response=_response(404))
        downloads.append(name)
        staged = tmp_path / "staged"
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir()
        shutil.copyfile(source / name, staged / name)
        return str(as_hub_cache(staged, Path(cache_dir), repo) / name)

    fs = CountingFileSystem(skip_instance_cache=True)
    monkeypatch.setattr(hf, "hf_hub_download", download)
    monkeypatch.setattr(hf, "HfFileSystem", lambda: _Rooted(fs, root))
    return root, fs, downloads


class _Rooted:
    """`fs` with paths taken relative to `root` (as HfFileSystem takes ORG/NAME@REV/FILE)."""

    def __init__(self, fs, root):
        self.fs, self.root = fs, root

    def size(self, path):
        return self.fs.size(str(self.root / path))

    def open(self, path, mode="rb", **kwargs):
        return self.fs.open(str(self.root / path), mode, **kwargs)


def _response(status):
    import httpx2

    return httpx2.Response(status, request=httpx2.Request("GET", "https://huggingface.co/x"))


def test_a_large_checkpoint_is_read_by_byte_ranges_and_kept_for_offline_use(
        tmp_path, cli, remote, monkeypatch):
    root, fs, downloads = remote
    folder = checkpoint(root / f"org/big@{COMMIT}", payload=True)
    size = (folder / "model.safetensors").stat().st_size
    document = diagnosis(cli, "org/big")
    assert measures(document) == measures(diagnosis(cli, folder))
    assert downloads == ["config.json"]  # no tokenizer, index or weights file downloaded
    header = 8 + struct.unpack("<Q", (folder / "model.safetensors").read_bytes()[:8])[0]
    needed = header + 2 * V * D * 4
    assert fs.read == needed
    assert document["notes"][0] == (f"read {needed / 1e3:.1f} kB of model.safetensors "
                                    f"({size / 1e6:.1f} MB) by byte ranges: "
                                    f"{(size - needed) / 1e6:.1f} MB not downloaded")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # kept: offline now, with the same note
    assert diagnosis(cli, "org/big") == document


def test_a_tied_model_reads_its_one_matrix_by_byte_ranges(tmp_path, cli, remote):
    root, fs, _ = remote
    folder = checkpoint(root / f"org/tied@{COMMIT}", payload=True, tied=True)
    document = diagnosis(cli, "org/tied")
    header = 8 + struct.unpack("<Q", (folder / "model.safetensors").read_bytes()[:8])[0]
    assert fs.read == header + V * D * 4
    assert document["subjects"][0]["tied"] and document["notes"][0].startswith(
        f"read {(header + V * D * 4) / 1e3:.1f} kB of model.safetensors")


def test_a_small_checkpoint_is_downloaded_whole_into_the_hub_cache(tmp_path, cli, remote):
    root, fs, downloads = remote
    folder = checkpoint(root / f"org/small@{COMMIT}")
    document = diagnosis(cli, "org/small")
    assert downloads == ["config.json", "model.safetensors"]
    assert measures(document) == measures(diagnosis(cli, folder))
    assert (tmp_path / "hf" / "models--org--small" / "snapshots" / COMMIT /
            "model.safetensors").is_file()


def test_sharded_checkpoints_fetch_only_the_shards_of_the_embeddings(tmp_path, cli, remote):
    root, fs, downloads = remote
    rng = np.random.default_rng(0)
    tensors = {"model.embed_tokens.weight": rng.standard_normal((V, D)),
               "lm_head.weight": rng.standard_normal((V, D)),
               "model.layers.0.mlp.weight": np.zeros(PAYLOAD),
               "model.norm.weight": np.ones(D)}
    folder = write_checkpoint(root / f"org/llama@{COMMIT}", tensors,
                              {"model_type": "llama", "tie_word_embeddings": False}, shards=2)
    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    document = diagnosis(cli, "org/llama")
    assert measures(document) == measures(diagnosis(cli, folder))
    assert downloads == ["config.json", "model.safetensors.index.json"]
    shards = {weight_map["model.embed_tokens.weight"], weight_map["lm_head.weight"]}
    assert sorted(n.split(" of ")[1].split(" (")[0] for n in document["notes"][:2]) == \
        sorted(shards) == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


@pytest.mark.parametrize("error,expected", [
    (lambda: hf.errors.GatedRepoError("403", response=_response(403)),
     "error: org/big on the Hugging Face Hub is gated: accept its terms at "
     "https://huggingface.co/org/big and give a token with access (HF_TOKEN or `hf auth login`)"),
    (lambda: hf.errors.RepositoryNotFoundError("404", response=_response(404)),
     "error: org/big is not a path here, and the Hugging Face Hub has no model org/big (a "
     "private one needs a token: HF_TOKEN or `hf auth login`)"),
    (lambda: hf.errors.RevisionNotFoundError("404", response=_response(404)),
     "error: the Hugging Face Hub model org/big has no revision 'main' (a branch, tag or commit)"),
    (lambda: hf.errors.LocalEntryNotFoundError("Cannot reach the Hub\nmore"),
     "error: org/big is not a path here, and as a Hugging Face Hub id it is not in the cache "
     "({cache}) and the Hub cannot be reached (Cannot reach the Hub)"),
], ids=["gated", "not-found", "revision", "no-network"])
def test_each_hub_failure_is_one_error_line(cli, remote, monkeypatch, hub_env, error, expected):
    def fail(*args, **kwargs):
        raise error()

    monkeypatch.setattr(hf, "hf_hub_download", fail)
    code, out, err = cli(["diagnose", "org/big"])
    assert one_error(code, out, err), err
    assert err.strip() == expected.format(cache=hub_env)


def test_unknown_ids_and_revisions_from_the_hub(tmp_path, cli, remote):
    root, _, _ = remote
    checkpoint(root / f"org/big@{COMMIT}")
    code, out, err = cli(["diagnose", "org/none"])
    assert one_error(code, out, err) and "Hugging Face Hub has no model org/none" in err, err
    code, out, err = cli(["diagnose", "org/big@v9"])
    assert one_error(code, out, err), err
    assert "error: the Hugging Face Hub model org/big has no revision 'v9'" in err


def test_a_model_without_safetensors_is_refused_in_one_line(tmp_path, cli, remote):
    root, _, _ = remote
    folder = root / f"org/bin@{COMMIT}"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "gpt2"}')
    (folder / "pytorch_model.bin").write_bytes(b"x")
    code, out, err = cli(["diagnose", "org/bin"])
    assert one_error(code, out, err), err
    assert "org/bin on the Hugging Face Hub has no safetensors weights" in err


def test_without_huggingface_hub_an_id_says_which_extra(cli, hub_env, monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    code, out, err = cli(["diagnose", "org/name"])
    assert one_error(code, out, err), err
    assert "pip install 'dhwt[hub]'" in err


def test_an_index_that_points_to_the_wrong_shard_is_one_error_line(tmp_path, cli, remote):
    root, _, _ = remote
    rng = np.random.default_rng(0)
    tensors = {"model.embed_tokens.weight": rng.standard_normal((V, D)),
               "lm_head.weight": rng.standard_normal((V, D)),
               "model.layers.0.mlp.weight": np.zeros(PAYLOAD)}
    folder = write_checkpoint(root / f"org/bad@{COMMIT}", tensors,
                              {"model_type": "llama", "tie_word_embeddings": False}, shards=2)
    index = folder / "model.safetensors.index.json"
    weight_map = json.loads(index.read_text())["weight_map"]
    other = {f for f in set(weight_map.values()) if f != weight_map["lm_head.weight"]}.pop()
    index.write_text(json.dumps({"weight_map": {**weight_map, "lm_head.weight": other}}))
    code, out, err = cli(["diagnose", "org/bad"])
    assert one_error(code, out, err), err
    assert (f"org/bad@{COMMIT}/{other} does not hold the tensor lm_head.weight (its header "
            "lists no dtype, shape and data_offsets for it)") in err
