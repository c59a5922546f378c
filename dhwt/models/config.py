"""The one configuration of a model: the architecture and every choice in it, as validated fields."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from dhwt.checks import Boolean, Choice, Integer, Real, check_fields
from dhwt.defaults import ARCHITECTURES
from dhwt.errors import DhwtError
from dhwt.models.dropout import packed_threshold

# Fields that only some architectures read; under any other they must keep their defaults, so no
# setting is silently ignored. Fields not listed here apply to every architecture.
USED_BY = {
    "n_layers": ("transformer",),
    "n_heads": ("transformer",),
    "d_ff": ("transformer",),
    "dropout": ("transformer",),
    "ff_dropout": ("transformer",),
    "dropout_masks": ("transformer",),
    "activation": ("transformer",),
    "norm": ("transformer",),
    "positions": ("transformer",),
    "final_norm": ("transformer", "mixer"),
    "norm_affine": ("transformer", "mixer"),
    "layer_norm_eps": ("transformer", "mixer"),
    "lstm_layers": ("lstm",),
    "lstm_hidden": ("lstm",),
    "mixer_layers": ("mixer",),
    "token_mixing": ("mixer",),
    "channel_mixing": ("mixer",),
}
#: The fields a task sets (its vocabulary, its sequence length, its objective); the others are
#: the choices of whoever asks for the model.
TASK_FIELDS = ("vocab_size", "max_len", "causal")
ACTIVATIONS = ("gelu", "relu")
NORMS = ("post", "pre")
POSITIONS = ("none", "learned", "sinusoidal")
EMB_INITS = ("normal", "xavier", "fairseq")
LOGIT_SCALES = ("none", "rsqrt_d")
INITS = ("torch", "xavier", "gpt2")
DROPOUT_MASKS = ("bernoulli", "packed")
#: GPT-2's initializer_range: the standard deviation of its weights.
GPT2_STD = 0.02


@dataclass(frozen=True)
class ModelConfig:
    """A model for masked (bidirectional) or causal language modelling.

    architecture: "transformer" (dhwt.models.transformer), "lstm" (dhwt.models.lstm) or "mixer"
    (dhwt.models.mixer, masked LM only). The defaults are the paper's EXor models: the
    transformer has 1 layer, 1 head, d_model 4, d_ff 4, gelu, post-LN, dropout 0, no positional
    encoding; the LSTM 2 layers of hidden size 8 (bidirectional for masked LM), projected back to
    d_model 4; the mixer 1 layer, token-mixing width 4, channel-mixing width 8 (relu, pre-LN).
    All: embeddings N(0, 1), no output bias. A field that only other architectures read (see
    USED_BY) must keep its default.

    vocab_size, max_len: tokens in the vocabulary; longest sequence the model accepts (the mixer
        accepts exactly max_len: its token-mixing weights span the positions). Both come from
        the task: None in a run's configuration (dhwt.config) until `for_task` sets them; a
        model is built only from a config that has them.
    lstm_layers, lstm_hidden: stacked LSTM layers and the hidden size of each direction.
    mixer_layers, token_mixing, channel_mixing: mixer layers and the hidden widths of the
        token-mixing MLP (across positions) and the channel-mixing MLP (across features).
    dropout, ff_dropout: the dropout rate, applied to the embeddings (after positions), the
        attention weights and the output of each sublayer (attention, feed-forward); ff_dropout
        also applies it to the feed-forward activation, as torch.nn.TransformerEncoderLayer does.
        Without it the places are GPT-2's (embd_pdrop, attn_pdrop, resid_pdrop).
    dropout_masks: how the masks are drawn from each member's generator (dhwt.models.dropout):
        "bernoulli" (torch's bernoulli_, keep rate 1 - dropout exactly; every earlier run's) or
        "packed" (two elements per 31-bit draw, keep rate within 2^-16 of 1 - dropout, about 3x
        faster on the CPU). Another stream: a run resumes with the masks it was trained with.
    norm: "post" (x = LN(x + f(x)), torch's default) or "pre" (x = x + f(LN(x))).
    final_norm: a LayerNorm after the last layer, before the logits (GPT-2 style, usual with
        pre-LN; off by default so one layer equals torch.nn.TransformerEncoderLayer).
    norm_affine: every LayerNorm learns its gain and bias (True, torch's elementwise_affine) or
        keeps them at 1 and 0 (False): then a post-LN transformer's hidden states have norm
        sqrt(d_model) exactly (up to eps), so ||h|| cannot grow to meet a logit gap.
    positions: "none", "learned" (a (max_len, d) table initialised like the embeddings) or
        "sinusoidal" (the fixed table of Vaswani et al.).
    causal: True for causal LM (position t sees positions <= t; the LSTM is then
        unidirectional), False for masked LM.
    output_bias: logits = h @ E_out^T + b with a bias b (zero-initialised) when True.
    logit_scale: "none", or "rsqrt_d": the final hidden states are multiplied by
        d_model^-1/2, so logits = (h @ E_out^T) / sqrt(d_model) (+ b), as Mesh-TensorFlow and T5
        do for a tied head: with emb_scale the input reads E sqrt(d) and the output E / sqrt(d),
        so one matrix at one scale can serve both ends. `hidden` returns the scaled h.
    emb_init: "normal" draws embeddings from N(0, emb_std^2); "xavier" uses Xavier-uniform on the
        (V, d) matrix; "fairseq" draws N(0, 1/d_model) (fairseq's and Vaswani et al.'s tied
        tables, usually with emb_scale; emb_std unused). emb_scale multiplies input embeddings
        by sqrt(d_model) (the blog's setting).
    init: "torch" mimics torch's own modules (transformer: nn.TransformerEncoderLayer, with
        Xavier-uniform attention in-projection, zero attention biases, nn.Linear's kaiming-uniform
        default elsewhere; LSTM: nn.LSTM's U(+-1/sqrt(lstm_hidden)) everywhere; mixer: nn.Linear);
        "xavier" draws every other weight matrix Xavier-uniform (the blog's WikiText setting),
        biases as under "torch"; "gpt2" (transformer only) is GPT-2's: every weight matrix
        N(0, 0.02^2), the two residual output projections (attention out, second feed-forward
        layer) N(0, (0.02 / sqrt(2 n_layers))^2), biases zero (HF transformers'
        GPT2PreTrainedModel._init_weights). The GPT-2 convention whole: init "gpt2", emb_init
        "normal" with emb_std 0.02, positions "learned", norm "pre", final_norm, activation
        "gelu", no emb_scale.

    Examples:
        >>> from dhwt.models import ModelConfig
        >>> config = ModelConfig(vocab_size=7, max_len=8, d_model=8, n_heads=2)
        >>> config.architecture, config.n_layers, config.head_dim
        ('transformer', 1, 4)
        >>> ModelConfig(vocab_size=7, max_len=8, architecture="lstm", n_heads=2)
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: model n_heads applies to the transformer only, not to architecture
        'lstm' (got 2; leave it at 1)
    """

    vocab_size: int | None = None
    max_len: int | None = None
    architecture: str = "transformer"
    d_model: int = 4
    n_layers: int = 1
    n_heads: int = 1
    d_ff: int = 4
    dropout: float = 0.0
    ff_dropout: bool = True
    dropout_masks: str = "bernoulli"
    activation: str = "gelu"
    norm: str = "post"
    final_norm: bool = False
    norm_affine: bool = True
    positions: str = "none"
    causal: bool = False
    output_bias: bool = False
    logit_scale: str = "none"
    emb_init: str = "normal"
    emb_std: float = 1.0
    emb_scale: bool = False
    init: str = "torch"
    layer_norm_eps: float = 1e-5
    lstm_layers: int = 2
    lstm_hidden: int = 8
    mixer_layers: int = 1
    token_mixing: int = 4
    channel_mixing: int = 8

    CONSTRAINTS = {
        "vocab_size": [Integer(1), None], "max_len": [Integer(1), None],
        "architecture": [Choice(ARCHITECTURES)], "d_model": [Integer(1)],
        "n_layers": [Integer(1)], "n_heads": [Integer(1)], "d_ff": [Integer(1)],
        "dropout": [Real(0.0, 1.0, high_open=True)], "ff_dropout": [Boolean()],
        "dropout_masks": [Choice(DROPOUT_MASKS)], "activation": [Choice(ACTIVATIONS)],
        "norm": [Choice(NORMS)], "final_norm": [Boolean()], "norm_affine": [Boolean()],
        "positions": [Choice(POSITIONS)], "causal": [Boolean()], "output_bias": [Boolean()],
        "logit_scale": [Choice(LOGIT_SCALES)], "emb_init": [Choice(EMB_INITS)],
        "emb_std": [Real(0.0, low_open=True)], "emb_scale": [Boolean()], "init": [Choice(INITS)],
        "layer_norm_eps": [Real(0.0, low_open=True)], "lstm_layers": [Integer(1)],
        "lstm_hidden": [Integer(1)], "mixer_layers": [Integer(1)], "token_mixing": [Integer(1)],
        "channel_mixing": [Integer(1)]}

    def __post_init__(self) -> None:
        check_fields(self, self.CONSTRAINTS)
        if self.d_model % self.n_heads:
            raise DhwtError(
                f"model d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )
        if (self.dropout_masks == "packed" and self.dropout > 0
                and packed_threshold(self.dropout) < 1):
            raise DhwtError(f"model dropout {self.dropout!r} keeps nothing with dropout_masks "
                            "'packed' (15-bit thresholds); use 'bernoulli'")
        for f in fields(self):  # TOML and flags may give 1 for 1.0: store floats as floats
            if f.type == "float" and type(getattr(self, f.name)) is int:
                object.__setattr__(self, f.name, float(getattr(self, f.name)))
        self._check_applies()

    def _check_applies(self) -> None:
        """DhwtError if a field the architecture does not read differs from its default."""
        for f in fields(self):
            users = USED_BY.get(f.name, ARCHITECTURES)
            if self.architecture not in users and getattr(self, f.name) != f.default:
                raise DhwtError(
                    f"model {f.name} applies to the {' and '.join(users)} only, not to "
                    f"architecture {self.architecture!r} (got {getattr(self, f.name)!r}; leave it "
                    f"at {f.default!r})"
                )
        if self.init == "gpt2" and self.architecture != "transformer":
            raise DhwtError(f"model init 'gpt2' applies to the transformer only, not to "
                            f"architecture {self.architecture!r}")
        if self.architecture == "mixer" and self.causal:
            raise DhwtError("architecture 'mixer' is for masked LM only: its token mixing reads "
                            "every position, so it has no causal form")

    def for_task(self, vocab_size: int, max_len: int, causal: bool) -> ModelConfig:
        """This model for a task of `vocab_size` tokens, sequences up to `max_len`, causal or not."""
        return replace(self, vocab_size=vocab_size, max_len=max_len, causal=causal)

    def check_complete(self) -> None:
        """DhwtError unless the task's fields are set (a model can be built)."""
        if self.vocab_size is None or self.max_len is None:
            raise DhwtError("the model's vocab_size and max_len are not set: they come from the "
                            "task (ModelConfig.for_task)")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.n_heads
