"""A pretrained checkpoint in the Hugging Face layout, read offline: its input and output
embedding matrices, whether they are tied, and its token strings.

A checkpoint is a folder with config.json and its weights in safetensors: model.safetensors,
several shards listed by model.safetensors.index.json, or any *.safetensors files. Only the two
embedding tensors are read (safetensors maps the files; a 7B checkpoint's other weights are never
loaded), in float32 whatever their stored dtype. transformers is not needed; tokenizer.json is
read with the `tokenizers` package when both are present, else tokens are shown by id.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dhwt.checks import check_matrix
from dhwt.errors import DhwtError, reason, shorten
from dhwt.pretrained.layouts import find_layout
from dhwt.userfiles import open_safetensors

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
TOKENIZER = "tokenizer.json"
#: Rows past the tokenizer's tokens are called padding up to this share of the matrix (models
#: round a vocabulary up to a multiple of 64 to 1,024: well under 10%).
PADDING = 0.1


@dataclass(frozen=True)
class Checkpoint:
    """The embeddings of a checkpoint. output is None when tied (one matrix serves both);
    n_tokens: the rows that are tokens (the tokenizer's size when it has fewer than the matrix,
    whose extra rows are padding); token(i): how to print token i; notes: what a reader should
    know about how it was read."""

    path: Path
    model_type: str | None
    layout: str
    input_name: str
    output_name: str | None
    tied_because: str | None
    input: np.ndarray
    output: np.ndarray | None
    n_tokens: int
    token: Callable[[int], str] = field(repr=False)
    notes: tuple[str, ...] = ()

    @property
    def tied(self) -> bool:
        return self.output is None


def is_checkpoint(path: Path) -> bool:
    """Whether `path` looks like a Hugging Face checkpoint folder (config.json or safetensors)."""
    return path.is_dir() and ((path / CONFIG).is_file() or any(path.glob("*.safetensors")))


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Read the embeddings of the checkpoint folder `path` (see the module doc)."""
    path = Path(path)
    if not path.is_dir():
        raise DhwtError(f"{path} is not a folder; a checkpoint is a folder with config.json and "
                        "safetensors weights")
    config = _config(path)
    files = _tensor_files(path)
    found = find_layout(files)
    notes: list[str] = []
    vectors = _read(files[found.input], found.input)
    tie_config = config.get("tie_word_embeddings")
    if found.output is None:
        if tie_config is False or (tie_config is None and not found.layout.tied):
            raise DhwtError(f"{path}: the config does not tie the embeddings, but no output "
                            f"matrix was found (looked for {', '.join(found.layout.outputs)})")
        tied_because = (f"no output matrix is saved ({found.layout.outputs[0]} absent) and "
                        + ("config.json ties them (tie_word_embeddings true)" if tie_config
                           else f"{found.layout.name} ties them by default"))
        output = None
    else:
        output = _read(files[found.output], found.output)
        if output.shape[0] != vectors.shape[0]:
            raise DhwtError(f"{path}: the input matrix {found.input} has {vectors.shape[0]} rows "
                            f"and the output matrix {found.output} {output.shape[0]}; they must "
                            "hold the same tokens")
        tied_because = None
        if tie_config is True:
            tied_because = (f"config.json ties them (tie_word_embeddings true): transformers uses "
                            f"{found.input} for both")
        elif output.shape == vectors.shape and np.array_equal(output, vectors):
            tied_because = "the saved input and output matrices are equal"
        if tied_because is not None:
            output = None
    token, size, note = _tokens(path)
    n_tokens = vectors.shape[0]
    if note:
        notes.append(note)
    if size is not None and size < n_tokens:
        extra = n_tokens - size
        why = ("(padding)" if extra <= PADDING * n_tokens else
               f"({extra / n_tokens:.0%}: more than padding adds, so {TOKENIZER} may not be "
               "this model's)")
        notes.append(f"rows {size}-{n_tokens - 1} of the {n_tokens}-row matrices have no token in "
                     f"{TOKENIZER} {why} and are left out")
        n_tokens = size
    elif size is not None and size > n_tokens:
        notes.append(f"{TOKENIZER} has {size} tokens and the matrices {n_tokens} rows: ids "
                     f"{n_tokens}-{size - 1} have no row ({TOKENIZER} may not be this model's)")
    return Checkpoint(path=path, model_type=config.get("model_type"), layout=found.layout.name,
                      input_name=found.input, output_name=found.output,
                      tied_because=tied_because, input=vectors, output=output,
                      n_tokens=n_tokens, token=token, notes=tuple(notes))


def _config(path: Path) -> dict[str, object]:
    file = path / CONFIG
    if not file.is_file():
        return {}
    config = _json(file)
    if not isinstance(config, dict):
        raise DhwtError(f"{file} must hold a JSON object, got {type(config).__name__}")
    return config


def _json(file: Path) -> object:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DhwtError(f"cannot read {file} as JSON: {reason(exc)}") from None


def read_weight_map(index: Path) -> dict[str, str]:
    """The weight map of the safetensors index file `index`: tensor name -> file name."""
    weight_map = _json(index)
    weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
    if not (isinstance(weight_map, dict)
            and all(isinstance(file, str) for file in weight_map.values())):
        raise DhwtError(f"{index} holds no weight map (\"weight_map\": an object of tensor "
                        "name -> safetensors file name)")
    return weight_map


def _tensor_files(path: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it: the index's weight map, else the names
    in every *.safetensors file of the folder."""
    index = path / INDEX
    if index.is_file():
        return {name: path / file for name, file in read_weight_map(index).items()}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        others = sorted(p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth"))
        if others:
            raise DhwtError(f"{path} holds {', '.join(others)} but no .safetensors file; dhwt "
                            "reads safetensors checkpoints (save_pretrained writes them by "
                            "default)")
        raise DhwtError(f"{path} is not a checkpoint: no .safetensors file (and not a dhwt run "
                        "directory: no config.toml)")
    names: dict[str, Path] = {}
    for file in files:
        with open_safetensors(file, f"{file} as safetensors", framework="pt") as f:
            names.update({name: file for name in f.keys()})
    return names


def _read(file: Path, name: str) -> np.ndarray:
    """One tensor as a finite float32 (V, d) matrix."""
    import torch

    with open_safetensors(file, f"{name} from {shorten(file)}", framework="pt",
                          missing=f"{shorten(file)} (listed as holding {name}) does not "
                                  "exist") as f:
        tensor = f.get_tensor(name)
    if tensor.ndim != 2:
        raise DhwtError(f"{name} in {file.name} has shape {tuple(tensor.shape)}; an embedding "
                        "matrix is (tokens, dimensions)")
    if tensor.dtype == torch.float64:  # checked before float32 turns values past 3e38 to inf
        return check_matrix(tensor.numpy(), name).astype(np.float32)
    return check_matrix(tensor.float().numpy(), name)


def _tokens(path: Path) -> tuple[Callable[[int], str], int | None, str | None]:
    """(token id -> printable string, the tokenizer's size or None, a note or None)."""
    def by_id(i: int) -> str:
        return f"#{i}"

    file = path / TOKENIZER
    if not file.is_file():
        return by_id, None, f"no {TOKENIZER}: tokens are shown by id"
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return by_id, None, (f"{TOKENIZER} is present but the tokenizers package is not "
                             "installed (pip install 'dhwt[text]'): tokens are shown by id")
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as exc:  # tokenizers raises its own exception type
        return by_id, None, f"cannot read {TOKENIZER} ({reason(exc)}): tokens are shown by id"

    def text(i: int) -> str:
        return tokenizer.decode([i], skip_special_tokens=False) or tokenizer.id_to_token(i) or f"#{i}"

    return text, tokenizer.get_vocab_size(with_added_tokens=True), None


@dataclass(frozen=True)
class TokenCounts:
    """counts: how often each token id of the tokenizer occurs in a corpus; unknown: the words
    it could not encode (a word-level tokenizer with no unknown-word token raises on a word
    outside its vocabulary), with how often each occurs."""

    counts: np.ndarray
    unknown: Counter[str]


def count_tokens(path: str | Path, corpus: str | Path) -> TokenCounts:
    """How often each token id occurs in the text file `corpus` tokenized by the checkpoint's
    tokenizer.json, line by line (one count per id of the tokenizer), and the words it could not
    encode (left out of the counts)."""
    file = Path(path) / TOKENIZER
    if not file.is_file():
        raise DhwtError(f"counting tokens in a corpus needs the checkpoint's {TOKENIZER}, and "
                        f"{path} has none; give --counts FILE instead")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise DhwtError("counting tokens in a corpus needs the tokenizers package: pip install "
                        "'dhwt[text]'") from None
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as exc:  # tokenizers raises its own exception type
        raise DhwtError(f"cannot read {file}: {reason(exc)}") from None
    try:
        lines = Path(corpus).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise DhwtError(f"corpus {corpus} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DhwtError(f"cannot read corpus {corpus} as UTF-8 text: {reason(exc)}") from None
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    counts = np.zeros(size, np.int64)
    unknown: Counter[str] = Counter()
    for batch in range(0, len(lines), 4096):
        try:
            encodings = tokenizer.encode_batch(lines[batch:batch + 4096], add_special_tokens=False)
        except Exception:  # tokenizers' own type: a word it cannot encode; again word by word
            encodings = [e for line in lines[batch:batch + 4096]
                         for e in _encode_words(tokenizer, line, unknown)]
        ids = np.fromiter((i for e in encodings for i in e.ids), np.int64)
        counts += np.bincount(ids[ids < size], minlength=size)
    return TokenCounts(counts, unknown)


def _encode_words(tokenizer: Tokenizer, line: str, unknown: Counter[str]) -> list[Encoding]:
    """The encodings of the words of `line` (as the tokenizer's pre-tokenizer splits it, else at
    whitespace) that `tokenizer` can encode; the others are counted in `unknown`."""
    words = ([w for w, _ in tokenizer.pre_tokenizer.pre_tokenize_str(line)]
             if tokenizer.pre_tokenizer is not None else line.split())
    encodings = []
    for word in words:
        try:
            encodings.append(tokenizer.encode(word, add_special_tokens=False))
        except Exception:  # tokenizers' own type
            unknown[word] += 1
    return encodings
