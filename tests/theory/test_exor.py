"""run_members reads a trained run directory back as the theorems' Trained members.

Checked against two independent computations: the head really is U h (logits recomputed from the
read hidden states and output rows) and each member's excess equals the exact population fit of
dhwt.analysis.population, which computes it from the model in float32 with its own code.
"""

from __future__ import annotations

import numpy as np
import pytest

from dhwt.analysis.population import run_population_fit
from dhwt.languages import load_task
from dhwt.theory.exor import run_members


@pytest.fixture(scope="module", params=["transformer", "mixer"])
def run(request, tmp_path_factory, cli):
    out = tmp_path_factory.mktemp(request.param) / "run"
    code, _, err = cli(["train", "--grammar", "parity",
                        "--architecture", request.param, "--tie-schedule", "untie@20",
                        "--steps", "40", "--seeds", "7-8", "--out", out])
    assert code == 0, err
    return out


def test_head_is_u_h_and_excess_matches_the_population_fit(run):
    ctx, members = run_members(run)
    assert [seed for seed, _ in members] == [7, 8]
    fit = run_population_fit(run, load_task(run / "data", "mlm"))
    for m, (_, member) in enumerate(members):
        assert not member.tied and member.b is None
        np.testing.assert_allclose(member.logits, member.h @ member.U.T, atol=1e-9)
        assert member.excess(ctx) == pytest.approx(fit.excess[m], abs=1e-5)
