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
    """The ensemble of `seeds` of the architecture `config.architecture` names."""
    return ARCHITECTURE_CLASSES[config.architecture](config, seeds, tied)


__all__ = ["EnsembleLM", "LSTM", "Mixer", "ModelConfig", "TiedEmbeddings", "Transformer",
           "build_model"]
