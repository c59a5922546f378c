"""The memory a run needs, checked before anything is allocated (dhwt.training.memory): a run
that obviously cannot fit is refused, one that obviously can is not, and the bound counts what
it says it counts."""

from __future__ import annotations

import pytest
import torch

from dhwt.errors import DhwtError
from dhwt.models import ModelConfig, build_model
from dhwt.training.memory import Need, available_memory


def test_the_parameters_counted_are_those_of_a_built_model():
    for architecture in ("transformer", "lstm", "mixer"):
        config = ModelConfig(vocab_size=11, max_len=6, architecture=architecture)
        built = build_model(config, [1, 2], tied=False)
        need = Need.of(config, members=2, rows=1, length=6)
        assert 2 * need.parameters == sum(p.numel() for p in built.parameters())
        assert need.parameter_bytes == 2 * need.parameters * 16


def test_the_memory_available_here_is_read():
    available = available_memory(torch.device("cpu"))
    assert isinstance(available, int) and available > 0


def test_a_run_that_obviously_fits_passes_and_one_that_cannot_is_refused():
    here, config = available_memory(torch.device("cpu")), ModelConfig(vocab_size=7, max_len=5)
    Need.of(config, members=3, rows=8, length=5).check(here, "device cpu")  # a few kB
    with pytest.raises(DhwtError, match=r"^the run needs at least .* TB of memory \(3 members x "
                                        r"192 parameters: .*; batches of 10,000,000,000,000 "
                                        r"strings x 5 tokens: .*\) but device cpu has "):
        Need.of(config, members=3, rows=10**13, length=5).check(here, "device cpu")
