"""One member of a run as a Hugging Face checkpoint (`dhwt export RUN --to hf --out DIR`, whose
recipe is dhwt.commands.export) that transformers loads as GPT2LMHeadModel
(AutoModelForCausalLM), so lm-evaluation-harness, generation and probing tools read a model
trained here.

Only an architecture that GPT-2's computes exactly is written: a causal transformer with learned
positions, pre-LN, a final LayerNorm, no input scale (emb_scale), no logit scale and no output
bias (GPT2LMHeadModel's head has none). Its activation maps by name: dhwt's gelu is the exact
erf form, transformers' "gelu" (GPT-2's own default, "gelu_new", is the tanh approximation);
relu is "relu". LayerNorms without learned gain and bias (norm_affine false) are written as ones
and zeros; dropout rates are copied (they act in training only). Anything else is refused with
every reason in one line.

Weights map one to one, transposed where GPT-2 keeps Conv1D's (in, out) layout: the attention
in-projection (q, k, v stacked, heads in order) is c_attn, the out-projection c_proj, the
feed-forward linear1 / linear2 are mlp.c_fc / mlp.c_proj, norm1 / norm2 ln_1 / ln_2, the final
norm ln_f. A tied member writes wte alone (tie_word_embeddings true, as save_pretrained does);
an untied one lm_head.weight too.

The folder also gets tokenizer.json (a word-level tokenizer of the run's symbols, split on
whitespace: exact for a synthetic language; its [BOS], [EOS] and [PAD] as bos_token_id,
eos_token_id and pad_token_id; no unknown-word token, so a word outside the run's symbols is an
error when encoded) where the run's tokens are such symbols and the `tokenizers`
package is installed, and RECORD, what was exported from where. It is a report
folder: new, empty, or an earlier export (replaced whole).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dhwt.checks import Choice, Integer, check_fields
from dhwt.defaults import EXPORT_TARGETS
from dhwt.directories import atomic_write_bytes, check_report_dir, replace_report
from dhwt.errors import DhwtError
from dhwt.filenames import FILE, Layout
from dhwt.languages.language import BOS, EOS, PAD_TOKEN
from dhwt.runs.result import Exported

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer

    from dhwt.models import ModelConfig, Transformer
    from dhwt.runs import Run

#: The export's record: which run, member and step, and what was written.
RECORD = "dhwt_export.json"
CONFIG = "config.json"
WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
#: Everything export writes into its --out folder (dhwt.filenames).
LAYOUT: Layout = dict.fromkeys((RECORD, CONFIG, WEIGHTS, TOKENIZER, TOKENIZER_CONFIG), FILE)
#: dhwt's activation -> transformers' activation_function of the same function.
ACTIVATIONS = {"gelu": "gelu", "relu": "relu"}


@dataclass(frozen=True)
class ExportOptions:
    """What `dhwt export` can be asked: the target format, the member (0-based, in seed order)
    and the checkpoint step ("last" or a step the run keeps)."""

    to: str = "hf"
    member: int = 0
    step: int | str = "last"

    CONSTRAINTS = {"to": [Choice(EXPORT_TARGETS)], "member": [Integer(0)],
                   "step": [Integer(0), Choice(("last",))]}

    def __post_init__(self) -> None:
        check_fields(self, self.CONSTRAINTS)


def check_out(out: str) -> None:
    """Refuse an --out that holds anything but an earlier export (check_report_dir)."""
    check_report_dir(out, "export", RECORD, LAYOUT)


def gpt2_mismatch(config: ModelConfig) -> list[str]:
    """Why a dhwt ModelConfig is not a GPT-2 (GPT2LMHeadModel) exactly; [] when it is.

    Examples:
        >>> from dhwt.models import ModelConfig
        >>> gpt2_mismatch(ModelConfig(vocab_size=7, max_len=8, causal=True, norm="pre",
        ...                           final_norm=True, positions="learned"))
        []
        >>> for reason in gpt2_mismatch(ModelConfig(vocab_size=7, max_len=8)):  # EXor's defaults
        ...     print(reason)
        a masked LM (causal false), and GPT-2 is causal
        positions 'none', and GPT-2 learns a position table (positions learned)
        post-LN, and GPT-2 normalises before each sublayer (norm pre)
        no final LayerNorm, and GPT-2 has one (final_norm true)
    """
    c = config
    if c.architecture != "transformer":
        return [f"architecture {c.architecture!r}, and GPT-2 is a transformer"]
    reasons = []
    if not c.causal:
        reasons.append("a masked LM (causal false), and GPT-2 is causal")
    if c.positions != "learned":
        reasons.append(f"positions {c.positions!r}, and GPT-2 learns a position table "
                       "(positions learned)")
    if c.norm != "pre":
        reasons.append("post-LN, and GPT-2 normalises before each sublayer (norm pre)")
    if not c.final_norm:
        reasons.append("no final LayerNorm, and GPT-2 has one (final_norm true)")
    if c.emb_scale:
        reasons.append("emb_scale multiplies the input embeddings by sqrt(d_model), and GPT-2 "
                       "does not")
    if c.logit_scale != "none":
        reasons.append(f"logit_scale {c.logit_scale!r}, and GPT-2's logits are h @ E_out^T")
    if c.output_bias:
        reasons.append("an output bias, and GPT2LMHeadModel's head has none")
    if c.activation not in ACTIVATIONS:
        reasons.append(f"activation {c.activation!r}, which transformers does not name")
    return reasons


def export_run(path: str, out: str, options: ExportOptions) -> Exported:
    """Write member `options.member` of the run at `path` into the folder `out` (module doc)."""
    from dhwt.runs.run import load_run  # torch: not at import

    check_out(out)
    run = load_run(path)
    seeds = run.config.members.seeds
    if not 0 <= options.member < len(seeds):
        raise DhwtError(f"--member {options.member}: {path} has {len(seeds)} member"
                        f"{'s' if len(seeds) > 1 else ''} (0 to {len(seeds) - 1}, seeds "
                        f"{', '.join(map(str, seeds))})")
    if options.step == "last":
        if not run.checkpoint_steps:
            raise DhwtError(f"{path} keeps no checkpoint yet: nothing to export")
        step = run.checkpoint_steps[-1]
    else:
        step = options.step
    model = run.model(step)
    reasons = gpt2_mismatch(model.config)
    if reasons:
        raise DhwtError(f"{path} cannot be exported as transformers' GPT2LMHeadModel: "
                        f"{'; '.join(reasons)}")
    member = options.member
    tied = model.embeddings.tied_members[member]
    tensors = gpt2_tensors(model, member, tied)
    config = gpt2_config(model.config, tied)
    tokenizer, note = _tokenizer(run)
    roles = (("bos", BOS), ("eos", EOS), ("pad", PAD_TOKEN))
    specials = {} if tokenizer is None else {
        f"{role}_token": token for role, token in roles if token in run.vocab}
    config.update({f"{name}_id": run.vocab.index(token) for name, token in specials.items()})
    record = {"run": str(path), "member": member, "seed": seeds[member], "step": step,
              "to": options.to, "architectures": config["architectures"], "tied": tied}

    def fill(folder: Path) -> tuple[str, ...]:
        from safetensors.torch import save

        atomic_write_bytes(folder / WEIGHTS, save(tensors, metadata={"format": "pt"}))
        atomic_write_bytes(folder / CONFIG, (json.dumps(config, indent=1) + "\n").encode())
        written = [CONFIG, WEIGHTS]
        if tokenizer is not None:
            tokenizer.save(str(folder / TOKENIZER))
            atomic_write_bytes(folder / TOKENIZER_CONFIG, (json.dumps(
                {"tokenizer_class": "PreTrainedTokenizerFast", **specials}, indent=1)
                + "\n").encode())
            written += [TOKENIZER, TOKENIZER_CONFIG]
        atomic_write_bytes(folder / RECORD, (json.dumps(record, indent=1) + "\n").encode())
        return tuple(written + [RECORD])

    files = replace_report(out, "export", RECORD, LAYOUT, fill)
    return Exported(Path(out), member, seeds[member], step, tied, files,
                    (note,) if note else ())


def gpt2_config(config: ModelConfig, tied: bool) -> dict[str, object]:
    """transformers' GPT2Config, as config.json, of a dhwt ModelConfig that GPT-2 computes."""
    c = config
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": c.vocab_size, "n_positions": c.max_len, "n_embd": c.d_model,
        "n_layer": c.n_layers, "n_head": c.n_heads, "n_inner": c.d_ff,
        "activation_function": ACTIVATIONS[c.activation],
        "resid_pdrop": c.dropout, "embd_pdrop": c.dropout, "attn_pdrop": c.dropout,
        "layer_norm_epsilon": c.layer_norm_eps, "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        "tie_word_embeddings": tied, "bos_token_id": None, "eos_token_id": None,
    }


def gpt2_tensors(model: Transformer, member: int, tied: bool) -> dict[str, torch.Tensor]:
    """The GPT2LMHeadModel state of one member of a dhwt Transformer (module doc), float32,
    contiguous."""
    m = member
    tensors = {"transformer.wte.weight": model.embeddings.input_weight[m],
               "transformer.wpe.weight": model.positions[m],
               "transformer.ln_f.weight": model.final_norm_weight[m],
               "transformer.ln_f.bias": model.final_norm_bias[m]}
    if not tied:
        tensors["lm_head.weight"] = model.embeddings.output_weight[m]
    for i, block in enumerate(model.blocks):
        h = f"transformer.h.{i}."
        tensors.update({
            h + "ln_1.weight": block.norm1_weight[m], h + "ln_1.bias": block.norm1_bias[m],
            h + "attn.c_attn.weight": block.in_proj_weight[m].T,
            h + "attn.c_attn.bias": block.in_proj_bias[m],
            h + "attn.c_proj.weight": block.out_proj_weight[m].T,
            h + "attn.c_proj.bias": block.out_proj_bias[m],
            h + "ln_2.weight": block.norm2_weight[m], h + "ln_2.bias": block.norm2_bias[m],
            h + "mlp.c_fc.weight": block.linear1_weight[m].T,
            h + "mlp.c_fc.bias": block.linear1_bias[m],
            h + "mlp.c_proj.weight": block.linear2_weight[m].T,
            h + "mlp.c_proj.bias": block.linear2_bias[m],
        })
    return {name: t.detach().float().contiguous().clone() for name, t in tensors.items()}


def _tokenizer(run: Run) -> tuple[Tokenizer | None, str | None]:
    """A word-level tokenizer of the run's symbols (tokenizers.Tokenizer) and None, or None and
    why none is written."""
    if run.config.data.corpus is not None:
        return None, (f"no tokenizer files: the run's tokenizer ({run.config.data.tokenizer}) "
                      "is dhwt's; token ids are the run's")
    vocab = run.vocab
    if any(not token or token != "".join(token.split()) for token in vocab):
        return None, "no tokenizer files: a token of the run holds whitespace"
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers
    except ImportError:
        return None, ("no tokenizer files: they need the tokenizers package (pip install "
                      "'dhwt[text]')")
    if len(set(vocab)) < len(vocab):
        return None, "no tokenizer files: the run's vocabulary repeats a token"
    # unk_token "": none (WordLevel must name one and otherwise names "<unk>", which the
    # vocabulary does not hold: the model has no row for it); a word outside it cannot be encoded
    tokenizer = Tokenizer(models.WordLevel({token: i for i, token in enumerate(vocab)},
                                           unk_token=""))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer, None
