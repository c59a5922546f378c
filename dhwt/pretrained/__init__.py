"""Pretrained checkpoints in the Hugging Face layout, read offline for their embeddings."""

from dhwt.pretrained.reader import Checkpoint, is_checkpoint, read_checkpoint

__all__ = ["Checkpoint", "is_checkpoint", "read_checkpoint"]
