"""What every ensemble-native language model here shares: members, tied embeddings, logits.

An architecture (Transformer, LSTM, Mixer) is an `EnsembleLM`: S members with a leading member
dimension on every parameter, member s drawn from generators derived from seeds[s] alone, the
tying state held by one `TiedEmbeddings`, and logits = h @ E_out^T (+ bias). A subclass draws its
own weights between `_build_embeddings` and `_build_output` (so every member's draws come in one
fixed order: input embeddings first, then the architecture's weights) and computes the final
hidden states feature-major in `_features`; this class adds the optional final LayerNorm and
turns them into logits, or straight into the loss (dhwt.models.output, which also decides the
logits' memory layout). Token order inside: batch-major (T = B * L, a sequence's tokens together)
unless the architecture sets `position_major` (T = L * B, one position of every sequence
together); `hidden`, the logits and the loss's targets follow it, so callers never see it.

Devices. Weights are always drawn on the CPU (so a seed gives the same initial weights on every
device) and move with `model.to(device)`. Every tensor a forward pass makes (masks, positions,
dropout masks, recurrent states) is made on the device of the inputs or is a buffer, so the
forward pass runs wherever the model and its inputs are (tests/models/test_devices.py runs it
on the "meta" device, where any tensor made on the CPU is an error). Dropout on the CPU draws
from each member's CPU generator; on another device from a generator on that device seeded like
it (`dropout_generators`), since drawing masks on the CPU and copying them would cost more than
the step itself at GPU sizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from dhwt.errors import DhwtError
from dhwt.models import init, layers, output
from dhwt.models.config import ModelConfig
from dhwt.models.embeddings import TiedEmbeddings

#: The tying state a model starts in: one for every member, or one per member.
Tied = bool | Sequence[bool]
#: The largest vocabulary whose input embeddings `_embed_features` computes by one-hot bmm.
ONE_HOT_VOCAB = 24


class EnsembleLM(nn.Module):
    """S language models (masked or causal) of one architecture trained as one.

    inputs (S, B, L) long -> logits (S, B, L, V) = h @ E_out^T (+ bias), where h = hidden(...).
    `embeddings` holds the tying state; `tied` only chooses the starting state (per member if
    given per member). Tied and untied models with the same seeds share every weight but the
    untied output matrix (drawn from the OUTPUT stream of each seed), so member s of an ensemble
    with per-member states equals a solo model of seeds[s] in its state. Random draws at run
    time (dropout) use one generator per member (stream DROPOUT of its seed), never the global
    RNG; checkpoint them with `rng_state()`.

    Examples:
        >>> import torch
        >>> from dhwt.models import ModelConfig, build_model
        >>> config = ModelConfig(vocab_size=7, max_len=8)
        >>> ensemble = build_model(config, seeds=[1, 2], tied=True)
        >>> solo = build_model(config, seeds=[2], tied=True)
        >>> inputs = torch.randint(0, 7, (2, 3, 8))
        >>> torch.allclose(ensemble(inputs)[1], solo(inputs[1:])[0])  # member 1 = seed 2 alone
        True
        >>> untied = build_model(config, seeds=[1, 2], tied=False)  # same draws, one more matrix
        >>> torch.equal(untied.embeddings.input_weight, ensemble.embeddings.input_weight)
        True
        >>> ensemble.hidden(inputs).shape  # what the logits are computed from: h @ E_out^T
        torch.Size([2, 3, 8, 4])
    """

    architecture: str  # the value of ModelConfig.architecture this class builds
    #: Tokens ordered (L, B) inside, not (B, L): see the module docstring.
    position_major = False
    config: ModelConfig
    seeds: tuple[int, ...]
    embeddings: TiedEmbeddings

    def _build_embeddings(
        self, config: ModelConfig, seeds: Sequence[int], tied: Tied
    ) -> list[torch.Generator]:
        """Set config, seeds and the embeddings; return each member's MAIN generator, which has
        drawn the input embeddings and draws the rest of the member's weights. `tied`: one state
        for every member, or one per member (tie variants as one ensemble)."""
        if config.architecture != self.architecture:
            raise DhwtError(f"{type(self).__name__} builds architecture {self.architecture!r}, "
                            f"but the config asks for {config.architecture!r}")
        config.check_complete()
        self.config = config
        self.seeds = init.check_seeds(seeds)
        main = [init.member_generator(s, init.MAIN) for s in self.seeds]
        input_weight = torch.stack([self._table(config.vocab_size, g) for g in main])
        tied_members = [tied] * len(self.seeds) if isinstance(tied, bool) else list(tied)
        output_weight = None if all(tied_members) else torch.stack(
            [self._table(config.vocab_size, init.member_generator(s, init.OUTPUT))
             for s in self.seeds]
        )
        self.embeddings = TiedEmbeddings(input_weight, output_weight, tied_members)
        return main

    def _table(self, rows: int, generator: torch.Generator) -> torch.Tensor:
        """A (rows, d_model) table drawn as the config says embeddings are drawn."""
        c = self.config
        return init.embedding_table(rows, c.d_model, c.emb_init, c.emb_std, generator)

    def _build_output(self) -> None:
        """The final LayerNorm and output bias (if configured), the dropout generators and the
        lookup offsets."""
        c, members = self.config, self.members
        if c.final_norm:
            self.final_norm_weight = layers.ones(members, c.d_model, c.norm_affine)
            self.final_norm_bias = layers.zeros(members, c.d_model, c.norm_affine)
        if c.output_bias:
            self.output_bias = layers.zeros(members, c.vocab_size)
        self.generators = [init.member_generator(s, init.DROPOUT) for s in self.seeds]
        offsets = torch.arange(members).view(members, 1, 1) * c.vocab_size
        self.register_buffer("_row_offsets", offsets, persistent=False)

    @property
    def members(self) -> int:
        """S, the number of members."""
        return len(self.seeds)

    def forward(self, inputs: torch.Tensor, padding: torch.Tensor | None = None, *,
                targets: torch.Tensor | None = None,
                weights: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (S, B, L, V) for inputs (S, B, L) long; padding (S, B, L) bool, True at pads.

        Given targets (S, B, L) long (-100 where no loss) and weights (S, B, L), instead the (S,)
        per-member losses sum(weights * CE), without keeping the logits where they are wide (the
        training path; dhwt.models.output). The logits are a view of (S, V, B, L) memory (or
        (S, V, L, B) if position-major) for vocabularies below output.TOKEN_MAJOR_VOCAB, else of
        (S, B, L, V) (or (S, L, B, V)) memory (`output.token_major`).
        """
        h = self._final(inputs, padding)
        bias = self.output_bias if self.config.output_bias else None
        out = self.embeddings.output_weight
        if targets is not None or weights is not None:
            if targets is None or weights is None:
                raise ValueError("give both targets and weights for the loss, or neither")
            return output.output_loss(h, out, bias, self._ordered(targets),
                                      self._ordered(weights))
        return self._unordered(output.logits(h, out, bias), inputs.shape)

    def hidden(self, inputs: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        """The final hidden states h (S, B, L, d) that feed the logits (a view of the
        feature-major (S, d, T) memory, tokens in the model's order).

        Outputs at padded positions are finite but meaningless; outputs at real positions never
        depend on what the pads hold (each architecture says how it reads pads).
        """
        h = self._final(inputs, padding)
        return self._unordered(h.mT, inputs.shape)

    def _ordered(self, x: torch.Tensor) -> torch.Tensor:
        """(S, B, L, ...) in the model's token order: (S, L, B, ...) if position-major."""
        return x.transpose(1, 2) if self.position_major else x

    def _unordered(self, x: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """(S, B, L, F) view of x (S, T, F) whose tokens are in the model's order; shape is the
        inputs' (S, B, L)."""
        members, batch, length = shape
        if self.position_major:
            return x.view(members, length, batch, -1).transpose(1, 2)
        return x.view(members, batch, length, -1)

    def _final(self, inputs: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
        """The final hidden states, feature-major: (S, d, T), tokens in the model's order (after
        the final LayerNorm and the logit scale, where configured)."""
        c = self.config
        x = self._features(inputs, padding)
        if c.final_norm:
            x = layers.layer_norm(x, self.final_norm_weight, self.final_norm_bias,
                                  c.layer_norm_eps)
        if c.logit_scale == "rsqrt_d":
            x = x * c.d_model**-0.5
        return x

    def _features(self, inputs: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
        """The architecture's output before the final LayerNorm (if any), feature-major:
        (S, d, T), tokens in the model's order."""
        raise NotImplementedError

    def _embed(self, inputs: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
        """Check inputs and padding; the input embeddings (S, B, L, d), scaled if configured."""
        self._check_inputs(inputs, padding)
        table = self.embeddings.input_weight.reshape(-1, self.config.d_model)
        return self._scaled(F.embedding(inputs + self._row_offsets, table))

    def _embed_features(self, inputs: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
        """Check inputs and padding; the input embeddings feature-major, (S, d, T) with the
        tokens in the model's order, scaled if configured.

        For at most ONE_HOT_VOCAB symbols this is one bmm E_in^T @ one_hot(inputs), whose
        backward is one bmm too, where the lookup's is a scatter-add: faster for small
        vocabularies, slower from about 32 symbols (the timings that set ONE_HOT_VOCAB:
        experiments/benchmarks/README.md).
        """
        members, batch, length = inputs.shape
        vocab, width = self.config.vocab_size, self.config.d_model
        if vocab > ONE_HOT_VOCAB:
            x = self._ordered(self._embed(inputs, padding))  # (S, B, L, d) or (S, L, B, d)
            return x.movedim(3, 1).reshape(members, width, batch * length).contiguous()
        self._check_inputs(inputs, padding)
        weight = self.embeddings.input_weight
        symbols = torch.arange(vocab, device=inputs.device).view(1, vocab, 1)
        tokens = self._ordered(inputs).reshape(members, 1, -1)
        one_hot = (tokens == symbols).to(weight.dtype)  # (S, V, T)
        return self._scaled(torch.bmm(weight.mT, one_hot))

    def _scaled(self, x: torch.Tensor) -> torch.Tensor:
        return x * math.sqrt(self.config.d_model) if self.config.emb_scale else x

    def _check_inputs(self, inputs: torch.Tensor, padding: torch.Tensor | None) -> None:
        """ValueError (DhwtError for a sequence too long) unless inputs and padding fit the
        model. On a GPU the token ids are checked on the device, with no host synchronisation
        (a per-step wait, experiments/benchmarks/profile_blog_records.py): an id out of range
        fails as a CUDA device-side assertion at a later call instead of this ValueError."""
        c = self.config
        if inputs.dim() != 3 or inputs.shape[0] != self.members:
            raise ValueError(
                f"inputs must be (S={self.members}, B, L), got shape {tuple(inputs.shape)}"
            )
        if inputs.shape[2] > c.max_len:
            raise DhwtError(
                f"sequence length {inputs.shape[2]} exceeds the model's max_len {c.max_len}"
            )
        if inputs.numel() and inputs.device.type != "meta":  # meta tensors hold no values
            low, high = torch.aminmax(inputs)
            if inputs.device.type != "cpu":  # reading them back would make every step wait
                torch._assert_async((low >= 0) & (high < c.vocab_size),
                                    f"token ids must lie in [0, {c.vocab_size})")
            elif low < 0 or high >= c.vocab_size:  # else a lookup reads another member's rows
                raise ValueError(f"token ids must lie in [0, {c.vocab_size}), got ids from "
                                 f"{int(low)} to {int(high)}")
        if padding is not None and padding.shape != inputs.shape:
            raise ValueError(
                f"padding shape {tuple(padding.shape)} differs from inputs {tuple(inputs.shape)}"
            )

    def dropout_generators(self, device: torch.device) -> list[torch.Generator] | None:
        """Each member's dropout generator for tensors on `device`: the CPU ones (`generators`),
        or one per member on `device` seeded with the CPU one's seed, made on first use (their
        streams differ from the CPU's: another algorithm). None on "meta", which draws nothing."""
        if device.type == "cpu":
            return self.generators
        if device.type == "meta":
            return None
        held = getattr(self, "_device_generators", None)
        if held is None or held[0].device != device:
            held = [torch.Generator(device).manual_seed(g.initial_seed()) for g in self.generators]
            self._device_generators = held
        return held

    @property
    def device(self) -> torch.device:
        """The device of the weights."""
        return self.embeddings.input_weight.device

    def rng_state(self) -> torch.Tensor:
        """(S, n) uint8 on the CPU: the states of the dropout generators of the weights' device,
        for checkpoints (restore them on a device of the same type)."""
        return torch.stack([g.get_state() for g in self.dropout_generators(self.device)])

    def set_rng_state(self, state: torch.Tensor) -> None:
        """Restore the dropout generators of the weights' device from `rng_state()`."""
        for generator, row in zip(self.dropout_generators(self.device), state):
            generator.set_state(row.clone())

    def reseed_dropout(self, step: int) -> None:
        """Start the dropout generators of the weights' device afresh from each member's seed and
        `step` (for a resume on another type of device, where saved states do not fit)."""
        for seed, generator in zip(self.seeds, self.dropout_generators(self.device)):
            generator.manual_seed(init.stream_seed(seed, init.DROPOUT, step))
