"""Checks of numeric input that more than one package needs, each raising DhwtError with one
line. It sits below analysis so that readers of matrices (dhwt.pretrained) check them as the KNN
engine does; torch is imported on first use only, so importing it stays light."""

from __future__ import annotations

import math

import numpy as np

from dhwt.errors import DhwtError


def check_matrix(x: object, name: str) -> np.ndarray:
    """x as a 2-D float array with at least two rows and finite values, or DhwtError."""
    import torch

    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.asarray(x)
    if x.ndim != 2:
        raise DhwtError(f"{name} must be a 2-D matrix (tokens x dimensions), got shape {x.shape}")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise DhwtError(f"{name} must hold numbers, got dtype {x.dtype}")
    if x.shape[0] < 2 or x.shape[1] < 1:
        raise DhwtError(f"{name} needs at least 2 rows and 1 column, got shape {x.shape}")
    # NaN propagates; torch's threads: 2 GB in a fraction of a second
    largest = largest_magnitude(x if x.dtype in (np.float32, np.float64)
                                else x.astype(np.float64))
    if not math.isfinite(largest):
        finite = np.isfinite(x).all(axis=1)
        row = int(np.flatnonzero(~finite)[0])
        raise DhwtError(f"{name} has NaN or infinite values ({int((~finite).sum())} rows, "
                        f"first row {row})")
    limit = math.sqrt(1e36 / x.shape[1])  # squaring the largest would overflow a float
    if largest > limit:
        raise DhwtError(f"{name} has values too large for float32 scores (max |value| "
                        f"{largest:.3g}, at most {limit:.3g} for {x.shape[1]} columns); scale it "
                        "down")
    return x


def largest_magnitude(x: np.ndarray) -> float:
    """max |x| of a float32 or float64 array (torch's aminmax: no temporary copy, all threads;
    NaN if x holds one)."""
    import torch

    low, high = torch.aminmax(torch.from_numpy(x))
    return max(-float(low), float(high))
