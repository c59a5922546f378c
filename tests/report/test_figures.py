"""The figures say what they draw: which seeds a band is over, where the tie switches are, the
exact fit where it exists; no panel is empty and no run hides another. Figures are captured
before they are saved and checked against values computed here from the inputs."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from matplotlib import font_manager
from matplotlib.font_manager import FontProperties
from matplotlib.ft2font import FT2Font
from matplotlib.ticker import NullFormatter

from dhwt.analysis.closeness import Closeness
from dhwt.config.schedule import TieEvent
from dhwt.report import figures


@pytest.fixture
def drawn(monkeypatch):
    """The figures drawn by the code under test, captured instead of written."""
    captured = []
    monkeypatch.setattr(figures, "save", lambda fig, path: captured.append(fig) or path)
    return captured


def closeness(side: str, values: np.ndarray) -> Closeness:
    """A Closeness whose three measures are `values` (T, S, P), pairs 0a-0b and 1a-1b."""
    return Closeness(side, np.arange(len(values)) * 10, tuple(range(values.shape[1])),
                     (("0a", "0b"), ("1a", "1b")), values, values, np.clip(values, -1, 1))


def lines_labelled(ax, label):
    return [line for line in ax.get_lines() if line.get_label() == label]


def test_closeness_small_multiples_over_the_kept_seeds(drawn):
    rng = np.random.default_rng(0)
    tied, inp, out = (rng.random((4, 5, 2)) for _ in range(3))
    runs = {"tied": {"tied matrix": closeness("input", tied)},
            "untied": {"input": closeness("input", inp), "output": closeness("output", out)}}
    keep = {"tied": np.array([1, 1, 0, 1, 0], bool), "untied": np.zeros(5, bool)}
    events = {"untied": (TieEvent(20, "untie"),)}
    figures.closeness_figure(runs, "unused.png", "normalised", keep=keep, events=events)
    (fig,) = drawn
    axes = np.array(fig.axes).reshape(2, 2)  # rows: pairs; columns: runs
    assert all(ax.get_visible() and ax.get_lines() for ax in axes.ravel())  # no empty panel
    assert "3 of 5 seeds off the plateau" in axes[0, 0].get_title()
    assert "all 5 seeds on the plateau" in axes[0, 1].get_title()  # then every seed is drawn
    for row in range(2):
        (line,) = lines_labelled(axes[row, 0], "tied matrix")
        np.testing.assert_allclose(line.get_ydata(), tied[:, keep["tied"], row].mean(axis=1))
        (line,) = lines_labelled(axes[row, 1], "output")
        np.testing.assert_allclose(line.get_ydata(), out[:, :, row].mean(axis=1))
        assert line.get_linestyle() != lines_labelled(axes[row, 1], "input")[0].get_linestyle()
        assert [t.get_text() for t in axes[row, 1].texts] == ["untie@20"]
        assert not axes[row, 0].texts  # the tied run has no switch
    assert axes[0, 0].get_ylim()[0] == 0
    (legend,) = fig.legends  # one, outside the panels
    assert {"tied matrix", "input", "output"} <= {t.get_text() for t in legend.get_texts()}
    assert "95% t-interval" in legend.get_title().get_text()


class Truth:
    bayes_cross_entropy, marginal_entropy = 0.5, 1.2
    bayes_accuracy, marginal_accuracy = 0.7, 0.45


def test_fit_figure_draws_each_seed_and_the_exact_excess_on_a_log_axis(drawn):
    steps = np.array([0, 100, 200])
    loss = np.array([[9.0, 9.0], [1.2, 0.9], [1.2, 0.51]])
    accuracy = np.array([[0.1, 0.2], [0.45, 0.6], [0.45, 0.7]])
    off = {"run": np.array([False, True])}
    events = {"run": (TieEvent(100, "untie"),)}
    figures.fit_figure({"run": (steps, loss, accuracy)}, "unused.png", Truth, True, off, events)
    (fig,) = drawn
    top, bottom = fig.axes
    assert top.get_yscale() == "log" and bottom.get_ylim() == (0, 1)
    seeds = lines_labelled(top, "seed on the plateau at the end") + lines_labelled(
        top, "seed off the plateau at the end")
    np.testing.assert_allclose([s.get_ydata() for s in seeds], (loss - 0.5).T)  # the excess
    assert "1 of 2 seeds off the plateau" in top.get_title()
    assert [t.get_text() for t in top.texts] == ["untie@100"]
    assert "exact" in fig.legends[0].get_title().get_text()


def test_metric_figure_keeps_runs_identical_until_an_untie_visible(drawn):
    steps = np.arange(4)
    same = np.ones((4, 3))
    figures.metric_figure({"tied": (steps, same), "untie@2": (steps, same)}, "unused.png",
                          optimum=0.5, log=True,
                          events={"untie@2": (TieEvent(2, "untie"),)})
    (ax,) = drawn[0].axes
    tied, untie = (lines_labelled(ax, f"{name} (3 members)")[0] for name in ("tied", "untie@2"))
    assert tied.get_linewidth() > untie.get_linewidth()
    assert tied.get_linestyle() != untie.get_linestyle()
    assert [t.get_text() for t in ax.texts] == ["untie@2"]


def artists(ax) -> int:
    return len(ax.get_lines()) + len(ax.collections)


def test_hundreds_of_runs_are_overlaid_in_a_few_artists(drawn):
    """Past COLUMNS runs each figure keeps its panels and a few artists per panel (one column
    per run took minutes at 300 runs), without a layout warning; the thick line is the median
    over runs of each run's mean over its kept seeds."""
    rng = np.random.default_rng(1)
    n = figures.COLUMNS * 5
    values = rng.random((n, 6, 3, 2))  # run, step, seed, pair
    runs = {f"r{i}": {"input": closeness("input", values[i]),
                      "output": closeness("output", 1 - values[i])} for i in range(n)}
    keep = {f"r{i}": np.array([True, True, False]) for i in range(n)}
    events = {f"r{i}": (TieEvent(10 * (i % 4) + 10, "untie"),) for i in range(n)}
    steps = np.arange(6) * 10
    fits = {f"r{i}": (steps, 0.6 + values[i, :, :, 0], values[i, :, :, 1]) for i in range(n)}
    kaplan = {f"r{i}": (np.array([10, 30]), np.array([0.5, 0.2]), np.array([0.3, 0.1]),
                        np.array([0.7, 0.4])) for i in range(n)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figures.closeness_figure(runs, "unused.png", "normalised", keep=keep, events=events)
        figures.fit_figure(fits, "unused.png", Truth, True, keep)
        figures.survival_figure(kaplan, "unused.png", 60)
        figures.metric_figure({k: (steps, v[1]) for k, v in fits.items()}, "unused.png")
        for fig in drawn:
            fig.canvas.draw()  # lays the figure out: a collapsed layout would warn here
    close, fit, survival, metric = drawn
    assert len(close.axes) == 2 * 2 and len(fit.axes) == 2
    switches = len(figures.distinct_events(events))
    assert max(artists(ax) for fig in drawn for ax in fig.axes) <= 4 + switches
    (median,) = lines_labelled(close.axes[0], "median over runs")
    np.testing.assert_allclose(median.get_ydata(),
                               np.median(values[:, :, :2, 0].mean(axis=2), axis=0))
    assert [t.get_text() for t in close.axes[0].texts] == [f"untie@{s}" for s in (10, 20, 30, 40)]
    assert f"{n} runs" in close.axes[0].get_title() and f"{n} runs" in fit.axes[0].get_title()
    assert len(fit.axes[0].collections) == 2  # seeds off and on the plateau: one artist each


def test_text_no_font_can_draw_is_escaped_and_a_font_that_can_is_used(tmp_path):
    fig = figures.new_figure(3, 2)
    ax = fig.subplots()
    cjk, circled, private = ax.set_title("run 未绑定"), ax.set_xlabel("Ⓐ"), ax.set_ylabel(
        "\U0010fffd")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns of each glyph it draws as a box
        figures.save(fig, tmp_path / "f.png")
    assert private.get_text() == "\\U0010fffd"  # in no font: escaped
    for text, value in ((circled, "Ⓐ"), (cjk, "run 未绑定")):  # in a font that is installed
        family = text.get_fontfamily()
        if text.get_text() == value:
            path = font_manager.findfont(FontProperties(family=family[-1]))
            assert {ord(c) for c in value if c != " "} <= set(FT2Font(path).get_charmap())
        else:
            assert text.get_text() == value.encode("unicode_escape").decode()
    assert circled.get_text() == "Ⓐ"  # STIXGeneral, shipped with matplotlib, has it


def test_log_axis_labels_are_plain_numbers():
    fig = figures.new_figure(3, 3)
    narrow, wide = fig.subplots(1, 2)
    narrow.plot([0, 1], [0.5, 4.0])
    wide.plot([0, 1], [0.01, 50.0])
    figures.log_y(narrow)
    figures.log_y(wide)
    assert narrow.yaxis.get_major_formatter()(1.0) == "1"
    assert narrow.yaxis.get_minor_formatter()(0.6) == "0.6"
    assert isinstance(wide.yaxis.get_minor_formatter(), NullFormatter)


@pytest.mark.slow  # two training runs, about 3 s
def test_the_run_report_compares_only_the_exact_fit_with_bayes(tmp_path, cli):
    import dhwt
    from dhwt.models.population import population_fit

    common = ["--grammar", "parity", "--steps", 40, "--seeds", "1-3", "--eval-every", 20]
    assert cli(["train", *common, "--out", tmp_path / "plain"])[0] == 0
    (tmp_path / "pop.toml").write_text("population_every = 20\n")
    assert cli(["train", *common, "--config", tmp_path / "pop.toml",
                "--out", tmp_path / "recorded"])[0] == 0
    for name in ("plain", "recorded"):
        run = dhwt.load_run(tmp_path / name)
        truth = run.task.truth
        ce, acc = population_fit(run.model(), truth)  # computed here, from the checkpoint
        text = (tmp_path / name / "report.md").read_text()
        exact, sampled = text.split("## Evaluation sets")
        for seed, c, a in zip((1, 2, 3), ce, acc):
            assert (f"| {seed} | {c:.4f} | {c - truth.bayes_cross_entropy:+.4f} | {a:.4f} | "
                    f"{a - truth.bayes_accuracy:+.4f} |") in exact
        assert "Bayes |" not in sampled  # sampled evaluation sets are not set against it
    recorded = [json.loads(x) for x in (tmp_path / "recorded" / "metrics.jsonl").open()]
    assert {r["step"] for r in recorded if r["split"] == "population"} == {0, 20, 40}


def test_a_figure_that_fails_to_save_leaves_the_old_file_and_no_temporary(tmp_path):
    """figures.save writes through dhwt.directories.atomic_path: a savefig that raises half-way
    leaves the earlier figure as it was and nothing hidden beside it."""
    path = tmp_path / "fig.png"
    path.write_bytes(b"earlier")
    fig = figures.new_figure(2, 2)

    def broken(target, **kwargs):
        with open(target, "wb") as fh:
            fh.write(b"half")
        raise OSError("disk full")

    fig.savefig = broken
    with pytest.raises(OSError, match="disk full"):
        figures.save(fig, path)
    assert [p.name for p in tmp_path.iterdir()] == ["fig.png"]
    assert path.read_bytes() == b"earlier"
