"""The similarity figures stay readable at any number of members: pairs drawn in groups (each
run's seed pairs, pairs across runs) as a median with its range, every label inside the
figure, no matplotlib warning."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from dhwt.analysis.knn_curves import Curve, SimilarityCurves
from dhwt.report import runs_similarity_report

RUNS = ("tied", "untied", "untie@100")
STEPS = np.arange(5) * 50


def three_runs_of_three_seeds() -> tuple[SimilarityCurves, dict[str, str]]:
    """36 pair curves per side and 9 DH curves of random values; member name -> run."""
    rng = np.random.default_rng(0)
    names = [f"{run}/seed{seed}" for run in RUNS for seed in (1, 2, 3)]
    measures = ("overlap", "jaccard", "chance_overlap", "chance_jaccard", "cka", "procrustes")

    def values():
        return {m: rng.random(len(STEPS)) for m in measures}

    curves = [Curve("pair", side, a, b, values()) for side in ("input", "output")
              for a, b in itertools.combinations(names, 2)]
    curves += [Curve("dh", "input-output", name, name, values()) for name in names]
    return (SimilarityCurves(10, "ip", STEPS, 100, tuple(curves), False),
            {name: name.split("/")[0] for name in names})


@pytest.fixture
def drawn(monkeypatch):
    """name -> figure of every figure the section saves (saved for real, so drawn)."""
    figures = {}
    save = runs_similarity_report.save

    def keep(fig, path):
        figures[path.name] = fig
        return save(fig, path)

    monkeypatch.setattr(runs_similarity_report, "save", keep)
    return figures


@pytest.mark.slow  # draws three figures
def test_three_runs_of_three_seeds_draw_groups_inside_the_figure_without_warnings(
        drawn, tmp_path):
    result, runs = three_runs_of_three_seeds()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runs_similarity_report.similarity_section(result, tmp_path, runs=runs)
    assert set(drawn) == {"similarity_knn.png", "similarity_other.png", "similarity_dh.png"}
    for name, fig in drawn.items():  # everything drawn lies inside the canvas (inches)
        drawn_box = fig.get_tightbbox(fig.canvas.get_renderer())
        width, height = fig.get_size_inches()
        assert (drawn_box.x0 >= -0.01 and drawn_box.y0 >= -0.01 and drawn_box.x1 <= width + 0.01
                and drawn_box.y1 <= height + 0.01), f"{name}: {drawn_box} outside the figure"
    pairs = [c for c in result.of_kind("pair") if c.side == "input"]
    within = {run: [c for c in pairs if c.a.startswith(f"{run}/") and c.b.startswith(f"{run}/")]
              for run in RUNS}
    between = [c for c in pairs if c.a.split("/")[0] != c.b.split("/")[0]]
    assert [len(g) for g in within.values()] == [3, 3, 3] and len(between) == 27
    ax = drawn["similarity_knn.png"].axes[0]
    lines = {line.get_label(): line for line in ax.get_lines() if line.get_linestyle() == "-"}
    expected = {f"within {run} (3 pairs)": group for run, group in within.items()}
    expected["between runs (27 pairs)"] = between
    assert set(lines) == set(expected)
    for label, group in expected.items():
        median = np.median([c.values["overlap"] for c in group], axis=0)
        np.testing.assert_allclose(lines[label].get_ydata(), median)
    dh = {line.get_label() for line in drawn["similarity_dh.png"].axes[0].get_lines()
          if line.get_linestyle() == "-"}
    assert dh == {f"{run} (3 members)" for run in RUNS}


def test_many_runs_share_one_within_group():
    names = [f"r{i}/s{j}" for i in range(runs_similarity_report.WITHIN_GROUPS + 1) for j in (1, 2)]
    curves = [Curve("pair", "input", a, b) for a, b in itertools.combinations(names, 2)]
    groups = runs_similarity_report.group_curves(curves, {n: n.split("/")[0] for n in names})
    assert [(label, len(g)) for label, g in groups] == [
        ("within a run", len(names) // 2), ("between runs", len(curves) - len(names) // 2)]
