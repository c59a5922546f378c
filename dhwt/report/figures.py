"""Figures people would rather look at than read: pair closeness and accuracy over training.

Every curve over training is the mean over ensemble members with a 95% Student-t band
(dhwt.analysis.intervals.mean_band; no band with fewer than 3 members; a cosine's band clipped to
[-1, 1]); survival curves are Kaplan-Meier with their own band. Figures are written atomically
(temp file, then rename) as PNG, through matplotlib's object API with the Agg canvas, so no
global backend is switched in the caller's process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from dhwt.analysis.closeness import Closeness
from dhwt.analysis.intervals import mean_band

MEASURE_LABELS = {
    "raw": "Euclidean distance",
    "normalised": "distance / baseline",
    "cosine": "cosine similarity",
}


def new_figure(width: float, height: float) -> Figure:
    """A figure bound to the Agg canvas (no pyplot state)."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, path: str | Path) -> Path:
    """Write `fig` to `path` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fig.savefig(tmp, dpi=120, format=path.suffix.lstrip(".") or "png")
    os.replace(tmp, path)
    return path


def step_axis(ax: Axes) -> None:
    """Label the x axis "step" with compact ticks (150k, not 150000: long runs' labels collide)."""
    ax.set_xlabel("step")
    ax.xaxis.set_major_formatter(FuncFormatter(_compact))


def _compact(value: float, _position: int | None = None) -> str:
    """12 -> '12', 25000 -> '25k', 1500000 -> '1.5M'."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def _band(ax: Axes, x: np.ndarray, values: np.ndarray, label: str,
          bounds: tuple[float, float] | None = None) -> None:
    """The mean over seeds with its 95% t band (none with fewer than 3 seeds), clipped to
    `bounds` (a cosine's [-1, 1])."""
    mean, half = mean_band(values, axis=1)
    (line,) = ax.plot(x, mean, label=label, lw=1.4)
    if np.isnan(half).all():
        return
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = np.clip(low, *bounds), np.clip(high, *bounds)
    ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, lw=0)


def closeness_figure(
    panels: Sequence[tuple[str, Closeness]],
    path: str | Path,
    measure: str = "normalised",
    pair_labels: Mapping[tuple[str, str], str] | None = None,
) -> Path:
    """One panel per (title, Closeness), one curve per pair: the paper's figure layout."""
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig = new_figure(4.2 * cols, 3.1 * rows)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=measure != "raw").ravel()
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    for ax, (title, closeness) in zip(axes, panels):
        values = getattr(closeness, measure)
        for p, pair in enumerate(closeness.pairs):
            label = (pair_labels or {}).get(pair, f"{pair[0]}-{pair[1]}")
            _band(ax, closeness.steps, values[:, :, p], label,
                  (-1.0, 1.0) if measure == "cosine" else None)
        ax.set_title(title, fontsize=10)
        step_axis(ax)
        ax.grid(alpha=0.3)
        if ax.get_subplotspec().is_first_col():
            ax.set_ylabel(MEASURE_LABELS[measure])
    axes[0].legend(fontsize=8)
    return save(fig, path)


def metric_figure(
    curves: Mapping[str, tuple[np.ndarray, np.ndarray]],
    path: str | Path,
    optimum: float | None = None,
    ylabel: str = "accuracy",
    log: bool = False,
) -> Path:
    """A metric over steps, one curve per run: name -> (steps (T,), values (T, S)); the Bayes
    optimum as a dashed line; `log` for a logarithmic y axis (losses that start far above it)."""
    fig = new_figure(5.5, 3.5)
    ax = fig.subplots()
    for name, (steps, values) in curves.items():
        _band(ax, steps, values, name)
    if optimum is not None:
        ax.axhline(optimum, ls="--", color="k", lw=1, label=f"Bayes optimum {optimum:.3f}")
    if log:
        ax.set_yscale("log")
    step_axis(ax)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return save(fig, path)


def survival_figure(
    curves: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    path: str | Path,
    horizon: float,
    events: Mapping[str, Sequence[int]] | None = None,
) -> Path:
    """Kaplan-Meier curves, one per run: name -> (steps, survival, low, high) from
    dhwt.analysis.escape.kaplan_meier, drawn as steps from 1 at step 0 to `horizon`, with the
    95% band; `events` (name -> steps) marks tie switches as dotted verticals."""
    fig = new_figure(6, 3.8)
    ax = fig.subplots()
    styles = ("-", "--", "-.", ":")
    for i, (name, (steps, survival, low, high)) in enumerate(curves.items()):
        x = np.r_[0, steps, horizon]
        (line,) = ax.step(x, np.r_[1, survival, survival[-1]], where="post", label=name,
                          lw=1.6, ls=styles[i % len(styles)])
        ax.fill_between(x, np.r_[1, low, low[-1]], np.r_[1, high, high[-1]], step="post",
                        color=line.get_color(), alpha=0.15, lw=0)
        for step in (events or {}).get(name, ()):
            ax.axvline(step, color=line.get_color(), ls=":", lw=1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(0, horizon)
    ax.set_ylabel("share still on the plateau")
    step_axis(ax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, title="Kaplan-Meier, 95% band (log-log)", title_fontsize=8)
    return save(fig, path)
