"""How a run rounds its floats: the `precision` and `tf32` settings (TrainConfig.placement).

"fp32": everything in float32 (the default; on the CPU resumes are bit-exact). "bf16-mixed":
the forward pass runs under torch.autocast with bfloat16, so matrix products (linear layers,
attention, the logits) take bfloat16 operands, while weights, gradients and optimizer state stay
float32, and LayerNorm, the softmax of attention and of the loss, and the loss itself are
computed in float32 (dhwt.models.layers.layer_norm, dhwt.models.output). On the CPU bf16-mixed
is deterministic, so its resumes are bit-exact too; on a GPU neither precision is (dhwt.training
.trainer). `tf32`: float32 products on a GPU's TF32 units (10-bit mantissa operands, float32
sums), a CUDA setting.
"""

from __future__ import annotations

import contextlib

import torch

from dhwt.errors import DhwtError


def check_precision(precision: str, tf32: bool, device: torch.device) -> None:
    """DhwtError if `device` cannot compute in `precision` (or `tf32`), in one line."""
    if tf32 and device.type != "cuda":
        raise DhwtError(f"tf32 = true needs a CUDA device (TF32 is a GPU's float32 mode); the "
                        f"run computes on {device}")
    if precision == "bf16-mixed" and device.type == "cuda" and not torch.cuda.is_bf16_supported(
            including_emulation=False):
        raise DhwtError(f"precision bf16-mixed needs a GPU with bfloat16 units (compute "
                        f"capability 8.0 or newer); {torch.cuda.get_device_name(device)} has "
                        "none: use precision fp32")


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The context the model's forward pass runs in under `precision` on `device`."""
    if precision == "bf16-mixed":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


class tf32_matmuls:
    """Float32 products on TF32 units inside the block when `on`, restored afterwards."""

    def __init__(self, on: bool) -> None:
        self.on = on

    def __enter__(self) -> None:
        self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = self.on

    def __exit__(self, *exc: object) -> None:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved
