"""The one configuration of a transformer: every architectural choice as a validated field."""

from __future__ import annotations

from dataclasses import dataclass

from dhwt.errors import DhwtError

ACTIVATIONS = ("gelu", "relu")
NORMS = ("post", "pre")
POSITIONS = ("none", "learned", "sinusoidal")
EMB_INITS = ("normal", "xavier")
INITS = ("torch", "xavier")


@dataclass(frozen=True)
class ModelConfig:
    """A transformer for masked (bidirectional) or causal language modelling.

    The defaults are the paper's EXor model: 1 layer, 1 head, d_model 4, d_ff 4, gelu, post-LN,
    dropout 0, no positional encoding, embeddings N(0, 1), no output bias.

    vocab_size, max_len: tokens in the vocabulary; longest sequence the model accepts.
    norm: "post" (x = LN(x + f(x)), torch's default) or "pre" (x = x + f(LN(x))).
    final_norm: a LayerNorm after the last layer, before the logits (GPT-2 style, usual with
        pre-LN; off by default so one layer equals torch.nn.TransformerEncoderLayer).
    positions: "none", "learned" (a (max_len, d) table initialised like the embeddings) or
        "sinusoidal" (the fixed table of Vaswani et al.).
    causal: True for causal LM (position t sees positions <= t), False for masked LM.
    output_bias: logits = h @ E_out^T + b with a bias b (zero-initialised) when True.
    emb_init: "normal" draws embeddings from N(0, emb_std^2); "xavier" uses Xavier-uniform on the
        (V, d) matrix. emb_scale multiplies input embeddings by sqrt(d_model) (the blog's setting).
    init: "torch" mimics torch.nn.TransformerEncoderLayer (Xavier-uniform attention in-projection,
        zero attention biases, nn.Linear's kaiming-uniform default elsewhere); "xavier" draws every
        other weight matrix Xavier-uniform (the blog's WikiText setting), biases as under "torch".
    """

    vocab_size: int
    max_len: int
    d_model: int = 4
    n_layers: int = 1
    n_heads: int = 1
    d_ff: int = 4
    dropout: float = 0.0
    activation: str = "gelu"
    norm: str = "post"
    final_norm: bool = False
    positions: str = "none"
    causal: bool = False
    output_bias: bool = False
    emb_init: str = "normal"
    emb_std: float = 1.0
    emb_scale: bool = False
    init: str = "torch"
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_len", "d_model", "n_layers", "n_heads", "d_ff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DhwtError(f"model {name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise DhwtError(
                f"model d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )
        if (
            isinstance(self.dropout, bool)
            or not isinstance(self.dropout, (int, float))
            or not 0.0 <= self.dropout < 1.0
        ):
            raise DhwtError(f"model dropout must be in [0, 1), got {self.dropout!r}")
        for name, allowed in (
            ("activation", ACTIVATIONS),
            ("norm", NORMS),
            ("positions", POSITIONS),
            ("emb_init", EMB_INITS),
            ("init", INITS),
        ):
            if getattr(self, name) not in allowed:
                raise DhwtError(
                    f"model {name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}"
                )
        for name in ("emb_std", "layer_norm_eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise DhwtError(f"model {name} must be a positive number, got {value!r}")
        for name in ("final_norm", "causal", "output_bias", "emb_scale"):
            if not isinstance(getattr(self, name), bool):
                raise DhwtError(f"model {name} must be true or false, got {getattr(self, name)!r}")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.n_heads
