"""Where a run computes: the `device` setting, checked, and resolved to a torch.device.

"cpu" (the default; the bit-exact guarantees of dhwt.training hold there), "cuda" (one GPU per
process: cuda:0 in one process, cuda:LOCAL_RANK under torchrun), "cuda:N" (GPU N, one process
only) or "auto" (cuda if torch sees a GPU, else cpu). The setting says where, not what: a run
may be resumed on another device (dhwt.training.trainer), so it is left out of the checks that
a resume repeats the run's config. torchrun's backend follows the device: nccl on GPUs, gloo on
the CPU.
"""

from __future__ import annotations

import torch

from dhwt.checks import Text
from dhwt.errors import DhwtError

DEVICES = ("cpu", "cuda", "cuda:N", "auto")
#: What a device setting may be, as the errors say it.
ALLOWED = f"one of {', '.join(DEVICES)} (N a whole number)"


def check_device(value: object) -> str:
    """`value` if it is a device setting, else DhwtError saying what is allowed."""
    if isinstance(value, str) and (value in ("cpu", "cuda", "auto") or (
            value.startswith("cuda:") and value[5:].isdigit())):
        return value
    raise DhwtError(f"device must be {ALLOWED}, got {value!r}")


#: The declared constraint of a `device` field (dhwt.checks.check_fields).
DEVICE = Text(ALLOWED, check_device)


def resolve_device(value: str, local_rank: int = 0, world_size: int = 1) -> torch.device:
    """The torch.device of the setting `value` for the process of `local_rank` among
    `world_size`; DhwtError if it asks for a GPU that is not there."""
    check_device(value)
    if value == "cpu" or (value == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if value.startswith("cuda:") and world_size > 1:
        raise DhwtError(f"device {value} puts all {world_size} processes on one GPU; under "
                        "torchrun give device cuda (each process takes cuda:LOCAL_RANK)")
    if not torch.cuda.is_available():
        raise DhwtError(f"device {value} asks for a GPU, but torch {torch.__version__} sees none "
                        "(a CPU build, or no GPU or driver); use device cpu or auto")
    if value.startswith("cuda:"):
        index, who = int(value[5:]), f"device {value}"
    else:
        index, who = local_rank, f"device {value} (process of LOCAL_RANK {local_rank})"
    count = torch.cuda.device_count()
    if index >= count:
        raise DhwtError(f"{who} needs GPU {index}, but torch sees {count} GPU"
                        f"{'s' * (count != 1)} (cuda:0 to cuda:{count - 1})")
    return torch.device("cuda", index)


def backend_for(device: torch.device) -> str:
    """The torch.distributed backend of processes computing on `device`."""
    return "nccl" if device.type == "cuda" else "gloo"
