"""Models with tying as a state: an ensemble-native transformer for masked and causal LM."""

from dhwt.models.config import ModelConfig
from dhwt.models.embeddings import TiedEmbeddings
from dhwt.models.transformer import Transformer

__all__ = ["ModelConfig", "TiedEmbeddings", "Transformer"]
