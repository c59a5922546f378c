"""Models with tying as a state: ensemble-native transformer, LSTM and MLP-Mixer language models."""

from __future__ import annotations

from collections.abc import Sequence

from dhwt.models.base import EnsembleLM, Tied
from dhwt.models.config import ModelConfig
from dhwt.models.embeddings import TiedEmbeddings
from dhwt.models.lstm import LSTM
from dhwt.models.mixer import Mixer
from dhwt.models.transformer import Transformer

ARCHITECTURE_CLASSES: dict[str, type[EnsembleLM]] = {
    cls.architecture: cls for cls in (Transformer, LSTM, Mixer)
}


def build_model(config: ModelConfig, seeds: Sequence[int], tied: Tied) -> EnsembleLM:
    """The ensemble of `seeds` of the architecture `config.architecture` names.

    Examples:
        >>> import torch
        >>> from dhwt.models import ModelConfig, build_model
        >>> config = ModelConfig(vocab_size=7, max_len=8)  # the paper's EXor transformer (d 4)
        >>> model = build_model(config, seeds=[1, 2], tied=True)  # 2 members trained as one
        >>> type(model).__name__, model.members, model.embeddings
        ('Transformer', 2, TiedEmbeddings(members=2, vocab=7, d=4, tied=True))
        >>> inputs = torch.randint(0, 7, (2, 3, 8))  # (members, batch, length) token ids
        >>> model(inputs).shape  # logits (members, batch, length, vocabulary)
        torch.Size([2, 3, 8, 7])
        >>> build_model(ModelConfig(vocab_size=7, max_len=8, architecture="lstm"), [1], tied=False)
        LSTM(
          (embeddings): TiedEmbeddings(members=1, vocab=7, d=4, tied=False)
          (layers): ModuleList(
            (0-1): 2 x Recurrence()
          )
        )
    """
    return ARCHITECTURE_CLASSES[config.architecture](config, seeds, tied)


__all__ = ["EnsembleLM", "LSTM", "Mixer", "ModelConfig", "TiedEmbeddings", "Transformer",
           "build_model"]
