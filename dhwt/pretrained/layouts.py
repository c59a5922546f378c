"""Where each architecture keeps its input and output embedding matrices in a Hugging Face
checkpoint: tensor names, and whether it ties them when the config does not say.

A layout is found by the tensor names present, not by config.json's model_type alone (fine-tunes
and ports rename model types but keep the tensors). Names are tried with and without the
architecture's prefix, since bare-model checkpoints (GPT2Model, GPTNeoXModel) drop it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from dhwt.errors import DhwtError, brief


@dataclass(frozen=True)
class Layout:
    """One naming scheme. inputs / outputs: candidate tensor names, first match wins; tied: what
    the architecture does when config.json has no tie_word_embeddings (transformers'
    PretrainedConfig default is True; the configs of untied families say False)."""

    name: str
    model_types: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    tied: bool = True


LAYOUTS = (
    Layout("gpt2", ("gpt2",), ("transformer.wte.weight", "wte.weight"), ("lm_head.weight",)),
    Layout("gpt-neox", ("gpt_neox",), ("gpt_neox.embed_in.weight", "embed_in.weight"),
           ("embed_out.weight",), tied=False),
    Layout("opt", ("opt",), ("model.decoder.embed_tokens.weight", "decoder.embed_tokens.weight"),
           ("lm_head.weight",)),
    Layout("olmo-original", ("olmo", "hf_olmo"), ("model.transformer.wte.weight",),
           ("model.transformer.ff_out.weight",), tied=False),
    Layout("phi-original", ("phi", "phi-msft", "mixformer-sequential"),
           ("transformer.embd.wte.weight",), ("lm_head.linear.weight",), tied=False),
    Layout("llama", ("llama", "mistral", "mixtral", "qwen2", "qwen3", "olmo", "olmo2", "gemma",
                     "gemma2", "gemma3_text", "phi", "phi3", "stablelm", "starcoder2"),
           ("model.embed_tokens.weight", "embed_tokens.weight"), ("lm_head.weight",)),
)
KNOWN = ", ".join(f"{layout.name} ({layout.inputs[0]} / {layout.outputs[0]})"
                  for layout in LAYOUTS)


@dataclass(frozen=True)
class Found:
    """The layout found and the names of its matrices in the checkpoint (output None: absent)."""

    layout: Layout
    input: str
    output: str | None


def find_layout(names: Collection[str]) -> Found:
    """The layout whose input tensor is among `names`; DhwtError listing what was found and what
    is known otherwise.

    Examples:
        >>> found = find_layout(["gpt_neox.embed_in.weight", "embed_out.weight"])
        >>> found.layout.name, found.input, found.output
        ('gpt-neox', 'gpt_neox.embed_in.weight', 'embed_out.weight')
        >>> find_layout(["model.embed_tokens.weight"]).output is None  # tied: no lm_head saved
        True
    """
    present = set(names)
    for layout in LAYOUTS:
        found_input = next((n for n in layout.inputs if n in present), None)
        if found_input is not None:
            output = next((n for n in layout.outputs if n in present), None)
            return Found(layout, found_input, output)
    likely = sorted(n for n in present if any(w in n.lower() for w in _HINTS))
    shown = brief(likely + sorted(present - set(likely)))
    raise DhwtError(f"no known embedding layout among the checkpoint's {len(present)} tensors "
                    f"({shown}, embedding-like names first); known layouts: {KNOWN}")


#: Parts of tensor names that suggest an embedding or a head, shown first in errors.
_HINTS = ("emb", "wte", "head", "out")
