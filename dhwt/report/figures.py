"""Figures people would rather look at than read: pair closeness, loss and accuracy over training.

A mean over ensemble members carries its 95% Student-t band (dhwt.analysis.intervals.mean_band;
none with fewer than 3 members; a cosine's clipped to [-1, 1]), and the legend says so; where
seeds split between the plateau and the optimum the fit is drawn one line per seed instead;
survival curves are Kaplan-Meier with their own band. Tie switches are marked on every figure
over time, one legend sits below the panels, and runs identical up to an untie stay visible
(distinct dashes, thinner lines drawn later). Past COLUMNS runs (a sweep of hundreds) a figure
draws the runs overlaid instead of one column or legend entry each: every run's line in one
LineCollection and the median over runs, a few artists however many runs (one column per run
would take minutes to lay out and be unreadable). Figures are written atomically
(temp file, then rename) as PNG, through matplotlib's object API with the Agg canvas, so no
global backend is switched in the caller's process.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib import font_manager
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.ft2font import FT2Font
from matplotlib.patheffects import withStroke
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter, NullFormatter

from dhwt.analysis.closeness import Closeness
from dhwt.analysis.intervals import mean_band
from dhwt.directories import atomic_path

#: Most runs drawn one column (or legend entry) each; more are overlaid (see the module doc).
COLUMNS = 8
#: Most tie switches labelled one by one; more are drawn as plain verticals.
LABELLED_EVENTS = 12

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
    """Write `fig` to `path` atomically, every text drawable (drawable_text)."""
    drawable_text(fig)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format=path.suffix.lstrip(".") or "png")
    return path


def drawable_text(fig: Figure) -> None:
    r"""Let no text of `fig` draw empty boxes (a run named in Chinese on a machine without a
    Chinese font): characters its font lacks come from an installed font that has them all,
    else are written as Python escapes (\u672a), which any font draws.

    Examples:
        >>> fig = new_figure(2, 2)
        >>> title = fig.suptitle("run \U0010fffd")  # a private-use character: in no font
        >>> drawable_text(fig)
        >>> title.get_text()
        'run \\U0010fffd'
    """
    for text in fig.findobj(Text):
        value = text.get_text()
        if value.isascii():
            continue
        font = _charmap(font_manager.findfont(text.get_fontproperties()))
        missing = {c for c in value if not c.isspace() and ord(c) not in font}
        if not missing:
            continue
        fallback = _fallback(missing)
        if fallback is not None:
            text.set_fontfamily([*text.get_fontfamily(), fallback])
        else:
            text.set_text("".join(c.encode("unicode_escape").decode() if c in missing else c
                                  for c in value))


@functools.cache
def _charmap(path: str) -> frozenset[int]:
    """The code points a font file has glyphs for."""
    return frozenset(FT2Font(path).get_charmap())


def _fallback(characters: set[str]) -> str | None:
    """The family name of an installed font with glyphs for all `characters`, if any (not
    matplotlib's last-resort font, whose glyphs are boxes)."""
    points = {ord(c) for c in characters}
    for entry in font_manager.fontManager.ttflist:
        if not entry.name.startswith("Last Resort") and points <= _charmap(entry.fname):
            return entry.name
    return None


def step_axis(ax: Axes) -> None:
    """Label the x axis "step" with compact ticks (150k, not 150000: long runs' labels collide)."""
    ax.set_xlabel("step")
    ax.xaxis.set_major_formatter(FuncFormatter(_compact))


def log_y(ax: Axes) -> None:
    """A logarithmic y axis with plain-number labels (0.5, 2, 10; not 5x10^-1), the minor ticks
    labelled too when the data span less than two decades (else the axis has too few labels).
    Call after plotting."""
    ax.set_yscale("log")
    low, high = ax.get_ylim()
    plain = FuncFormatter(lambda value, _position=None: f"{value:.3g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain if high / low < 100 else NullFormatter())
    ax.tick_params(axis="y", which="minor", labelsize=7)


def _compact(value: float, _position: int | None = None) -> str:
    """12 -> '12', 25000 -> '25k', 1500000 -> '1.5M'."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def mark_events(ax: Axes, events: Sequence[object]) -> None:
    """Tie-schedule switches (dhwt.config.schedule.TieEvent, or any object whose str() names it
    and whose .step is its step) as dotted verticals labelled at the foot of the axes; past
    LABELLED_EVENTS of them, unlabelled verticals (one artist) with one legend entry."""
    if len(events) > LABELLED_EVENTS:
        ax.vlines([e.step for e in events], 0, 1, transform=ax.get_xaxis_transform(),
                  color="tab:purple", ls=":", lw=0.8, zorder=1,
                  label=f"tie switches ({len(events)})")
        return
    for event in events:
        ax.axvline(event.step, color="tab:purple", ls=":", lw=1.1, zorder=1)
        ax.annotate(str(event), (event.step, 0.02), xycoords=("data", "axes fraction"),
                    xytext=(3, 0), textcoords="offset points", fontsize=7,
                    color="tab:purple", rotation=90, ha="left", va="bottom")


def distinct_events(events: Mapping[str, Sequence[object]] | None) -> list[object]:
    """The tie switches of several runs, each (step, name) once, in step order."""
    found = {(e.step, str(e)): e for run in (events or {}).values() for e in run}
    return [found[key] for key in sorted(found)]


def legend_below(fig: Figure, axes: Sequence[Axes], title: str | None = None) -> None:
    """One legend for the whole figure, below the panels (so it covers no data): the labelled
    artists of `axes`, each label once."""
    seen: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    columns = max(1, min(len(seen), int(fig.get_figwidth() / 2.9)))  # about 2.9 in per label
    fig.legend(seen.values(), seen.keys(), loc="outside lower center", fontsize=8,
               ncols=columns, title=title, title_fontsize=8, frameon=False)


def spread(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Median, minimum and maximum of `rows` (N, T) at each of the T columns, ignoring nan
    (nan where a column has no value, without numpy's all-nan warning).

    Examples:
        >>> [v.tolist() for v in spread(np.array([[1.0, np.nan], [3.0, np.nan], [2.0, np.nan]]))]
        [[2.0, nan], [1.0, nan], [3.0, nan]]
    """
    rows = np.asarray(rows, dtype=float)
    out = np.full((3, rows.shape[1]), np.nan)
    some = np.isfinite(rows).any(axis=0)
    if some.any():
        kept = rows[:, some]
        out[:, some] = np.nanmedian(kept, axis=0), np.nanmin(kept, axis=0), np.nanmax(kept, axis=0)
    return out[0], out[1], out[2]


def _band(ax: Axes, x: np.ndarray, values: np.ndarray, label: str | None,
          bounds: tuple[float, float] | None = None, **style) -> None:
    """The mean over seeds (values (T, S)) with its 95% t band (none with fewer than 3 seeds),
    clipped to `bounds` (a cosine's [-1, 1]); `style`: the line's matplotlib keywords."""
    mean, half = mean_band(values, axis=1)
    (line,) = ax.plot(x, mean, label=label, **{"lw": 1.4, **style})
    if np.isnan(half).all():
        return
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = np.clip(low, *bounds), np.clip(high, *bounds)
    ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, lw=0)


def _overlay(ax: Axes, curves: Sequence[tuple[np.ndarray, np.ndarray]], label: str,
             **style) -> None:
    """Many runs' lines (steps, values) as one thin LineCollection, and their median at each
    step (over the runs that have it) as one thick line labelled `label`; `style`: colour and
    dash."""
    ax.add_collection(LineCollection([np.column_stack(c) for c in curves], lw=0.6, alpha=0.35,
                                     **style), autolim=True)
    steps = np.unique(np.concatenate([x for x, _ in curves]))
    table = np.full((len(curves), len(steps)), np.nan)
    for row, (x, y) in zip(table, curves):
        row[np.searchsorted(steps, x)] = y
    ax.plot(steps, spread(table)[0], lw=2.2, label=label, zorder=3,
            path_effects=[withStroke(linewidth=4, foreground="white")], **style)
    ax.autoscale_view()


#: How each matrix of a closeness panel is drawn: distinct colour and dash, so none hides another.
SIDE_STYLE = {
    "tied matrix": dict(color="tab:purple", ls="-"),
    "input": dict(color="tab:blue", ls="-"),
    "output": dict(color="tab:orange", ls="--"),
}


def closeness_figure(
    runs: Mapping[str, Mapping[str, Closeness]],
    path: str | Path,
    measure: str = "normalised",
    pair_labels: Mapping[tuple[str, str], str] | None = None,
    keep: Mapping[str, np.ndarray] | None = None,
    events: Mapping[str, Sequence[object]] | None = None,
) -> Path:
    """Pair closeness over training as small multiples: one row per pair, one column per run;
    in each panel the run's matrices (`runs`: name -> {"tied matrix" | "input" | "output":
    Closeness}) as mean lines with 95% t bands over seeds. `keep` (name -> (S,) bool) restricts a
    run to some seeds (e.g. those off the plateau; all when none is kept), named in the column's
    title; `events` (name -> tie switches) are marked in that run's panels."""
    first = next(iter(next(iter(runs.values())).values()))
    pairs = first.pairs
    if len(runs) > COLUMNS:
        return _closeness_overlaid(runs, path, measure, pair_labels, keep, events)
    fig = new_figure(3.4 * len(runs) + 0.6, 2.5 * len(pairs) + 0.9)
    axes = fig.subplots(len(pairs), len(runs), squeeze=False, sharex=True,
                        sharey=measure != "raw")
    for col, (name, sides) in enumerate(runs.items()):
        seeds = next(iter(sides.values())).seeds
        mask = np.ones(len(seeds), bool) if keep is None else np.asarray(keep[name], bool)
        if keep is None:
            title = f"{name}\n{len(seeds)} seeds"
        elif mask.any():
            title = f"{name}\n{int(mask.sum())} of {len(seeds)} seeds off the plateau"
        else:
            title, mask = f"{name}\nall {len(seeds)} seeds on the plateau", ~mask
        for row, pair in enumerate(pairs):
            ax = axes[row, col]
            for side, closeness in sides.items():
                values = getattr(closeness, measure)[:, mask, closeness.pairs.index(pair)]
                _band(ax, closeness.steps, values, side,
                      (-1.0, 1.0) if measure == "cosine" else None, **SIDE_STYLE[side])
            if measure == "normalised":
                ax.axhline(1.0, color="grey", lw=0.8, label="1 = the baseline pairs' distance")
            mark_events(ax, (events or {}).get(name, ()))
            _pair_panel(ax, row, col, len(pairs), title, pair, pair_labels, measure)
    if measure != "cosine":
        axes[0, 0].set_ylim(bottom=0)
    legend_below(fig, axes.ravel(), "line: mean over the column's seeds; band: its 95% "
                 "t-interval (3 or more seeds)")
    return save(fig, path)


def _pair_panel(ax, row: int, col: int, rows: int, title: str,  # noqa: ANN001 (an Axes)
                pair: tuple[str, str], pair_labels: Mapping[tuple[str, str], str] | None,
                measure: str) -> None:
    """Grid, and the labels of a closeness panel by its place: the column title on top, steps
    at the foot, the pair and measure on the left."""
    ax.grid(alpha=0.3)
    if row == 0:
        ax.set_title(title, fontsize=9)
    if row == rows - 1:
        step_axis(ax)
    if col == 0:
        label = (pair_labels or {}).get(pair, f"{pair[0]}-{pair[1]}")
        ax.set_ylabel(f"{label}\n{MEASURE_LABELS[measure]}", fontsize=9)


def _kept(mask: np.ndarray | None, seeds: int) -> np.ndarray:
    """The seeds a closeness line is over: those kept (off the plateau), all when none is."""
    mask = np.ones(seeds, bool) if mask is None else np.asarray(mask, bool)
    return mask if mask.any() else ~mask


def _closeness_overlaid(
    runs: Mapping[str, Mapping[str, Closeness]],
    path: str | Path,
    measure: str,
    pair_labels: Mapping[tuple[str, str], str] | None,
    keep: Mapping[str, np.ndarray] | None,
    events: Mapping[str, Sequence[object]] | None,
) -> Path:
    """closeness_figure past COLUMNS runs: one row per pair, one column per matrix kind (tied
    matrix, input, output), every run's mean over its kept seeds overlaid."""
    pairs = next(iter(next(iter(runs.values())).values())).pairs
    sides = [side for side in SIDE_STYLE if any(side in sides for sides in runs.values())]
    fig = new_figure(3.8 * len(sides) + 0.6, 2.5 * len(pairs) + 1.1)
    axes = fig.subplots(len(pairs), len(sides), squeeze=False, sharex=True,
                        sharey=measure != "raw")
    for col, side in enumerate(sides):
        drawn = {name: matrices[side] for name, matrices in runs.items() if side in matrices}
        for row, pair in enumerate(pairs):
            ax = axes[row, col]
            curves = []
            for name, c in drawn.items():
                seeds = _kept(None if keep is None else keep[name], len(c.seeds))
                values = getattr(c, measure)[:, seeds, c.pairs.index(pair)]
                curves.append((c.steps, values.mean(axis=1)))
            _overlay(ax, curves, "median over runs", **SIDE_STYLE[side])
            if measure == "normalised":
                ax.axhline(1.0, color="grey", lw=0.8, label="1 = the baseline pairs' distance")
            mark_events(ax, distinct_events({name: (events or {}).get(name, ())
                                             for name in drawn}))
            _pair_panel(ax, row, col, len(pairs), f"{side}\n{len(drawn)} runs", pair,
                        pair_labels, measure)
    if measure != "cosine":
        axes[0, 0].set_ylim(bottom=0)
    legend_below(fig, axes.ravel(), "thin: each run's mean over its seeds (those off the "
                 "plateau where any are); thick: the median over runs")
    return save(fig, path)


def metric_figure(
    curves: Mapping[str, tuple[np.ndarray, np.ndarray]],
    path: str | Path,
    optimum: float | None = None,
    ylabel: str = "accuracy",
    log: bool = False,
    events: Mapping[str, Sequence[object]] | None = None,
) -> Path:
    """A metric over steps, one curve per run: name -> (steps (T,), values (T, S)), the mean over
    members with its 95% t band, each run in its own dash and a thinner line than the one
    before (so that runs identical up to an untie stay visible); the Bayes optimum as a dashed
    line; `log` for a logarithmic y axis; `events` (name -> tie switches) marked."""
    fig = new_figure(5.8, 4.0)
    ax = fig.subplots()
    dashes = ("-", "--", "-.", ":")
    overlaid = len(curves) > COLUMNS
    if overlaid:
        _overlay(ax, [(steps, values.mean(axis=1)) for steps, values in curves.values()],
                 f"median over {len(curves)} runs", color="tab:blue")
    for i, (name, (steps, values)) in enumerate(() if overlaid else curves.items()):
        _band(ax, steps, values, f"{name} ({values.shape[1]} members)",
              ls=dashes[i % len(dashes)], lw=max(2.6 - 0.6 * i, 1.0))
    mark_events(ax, distinct_events(events))
    if optimum is not None:
        ax.axhline(optimum, ls="--", color="k", lw=1, label=f"Bayes optimum {optimum:.3f}")
    if log:
        log_y(ax)
    step_axis(ax)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    legend_below(fig, [ax], "thin: each run's mean over members" if overlaid else
                 "line: mean over members; band: its 95% t-interval")
    return save(fig, path)


def fit_figure(
    runs: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    path: str | Path,
    truth,
    exact: bool,
    off: Mapping[str, np.ndarray],
    events: Mapping[str, Sequence[object]] | None = None,
) -> Path:
    """Loss and accuracy over training against the task's ground truth, one column per run and
    one thin line per seed (the outcome is bimodal: a mean would sit where no seed is), coloured
    by whether the seed is off the plateau at the end (`off`: name -> (S,) bool). `runs`: name ->
    (steps (T,), cross-entropy (T, S), accuracy (T, S)). `exact`: the values are the population
    fit (dhwt.analysis.population), so the loss is drawn as the excess over the Bayes optimum on
    a log axis; else they come from an evaluation set, drawn as they are."""
    overlaid = len(runs) > COLUMNS
    fig = new_figure(6.0 if overlaid else 3.4 * len(runs) + 0.6, 5.6)
    axes = fig.subplots(2, 1 if overlaid else len(runs), squeeze=False, sharex=True,
                        sharey="row")
    bayes = truth.bayes_cross_entropy
    if overlaid:
        top, bottom = axes[:, 0]
        for ax, values, shift in ((top, 1, bayes if exact else 0.0), (bottom, 2, 0.0)):
            _seed_lines(ax, runs, values, shift, off)
        _fit_references(top, bottom, truth, exact)
        for ax in (top, bottom):
            mark_events(ax, distinct_events(events))
            ax.grid(alpha=0.3)
        seeds = sum(len(o) for o in off.values())
        learned = sum(int(np.sum(o)) for o in off.values())
        top.set_title(f"{len(runs)} runs, {seeds} seeds\n{learned} off the plateau at the end",
                      fontsize=9)
        step_axis(bottom)
    for col, (name, (steps, loss, accuracy)) in enumerate(() if overlaid else runs.items()):
        top, bottom = axes[:, col]
        for s in range(loss.shape[1]):  # plateau seeds on top: they lie on the plateau line
            style = (dict(color="tab:blue", label="seed off the plateau at the end", zorder=2)
                     if off[name][s] else
                     dict(color="dimgrey", label="seed on the plateau at the end", zorder=3))
            top.plot(steps, loss[:, s] - bayes if exact else loss[:, s], lw=1, alpha=0.7, **style)
            bottom.plot(steps, accuracy[:, s], lw=1, alpha=0.7, **style)
        _fit_references(top, bottom, truth, exact)
        for ax in (top, bottom):
            mark_events(ax, (events or {}).get(name, ()))
            ax.grid(alpha=0.3)
        top.set_title(f"{name}\n{int(np.sum(off[name]))} of {loss.shape[1]} seeds off the "
                      "plateau at the end", fontsize=9)
        step_axis(bottom)
    axes[0, 0].set_ylabel("cross-entropy - Bayes optimum\n(nats, exact)" if exact
                          else "cross-entropy, nats\n(train evaluation set)", fontsize=9)
    axes[1, 0].set_ylabel("expected accuracy (exact)" if exact
                          else "accuracy\n(train evaluation set)", fontsize=9)
    axes[1, 0].set_ylim(0, 1)
    for ax in axes[0]:
        log_y(ax)
    legend_below(fig, axes.ravel(), "exact over every context of the language (no sampling)"
                 if exact else "sampled: an evaluation set drawn once, noisy near the optimum")
    return save(fig, path)


def _seed_lines(ax: Axes, runs: Mapping[str, tuple[np.ndarray, ...]], values: int, shift: float,
                off: Mapping[str, np.ndarray]) -> None:
    """fit_figure past COLUMNS runs: every seed's line of runs[name][values] (T, S) minus
    `shift`, one LineCollection per state at the end (off / on the plateau)."""
    for state, color, zorder in (("off", "tab:blue", 2), ("on", "dimgrey", 3)):
        lines = [np.column_stack((run[0], run[values][:, s] - shift))
                 for name, run in runs.items()
                 for s in np.flatnonzero(np.asarray(off[name]) == (state == "off"))]
        if lines:
            ax.add_collection(LineCollection(lines, color=color, lw=0.6, alpha=0.5, zorder=zorder,
                                             label=f"seed {state} the plateau at the end"))
    ax.autoscale_view()


def _fit_references(top: Axes, bottom: Axes, truth, exact: bool) -> None:
    """The unigram plateau (dotted) and the Bayes optimum (dashed) of fit_figure's panels."""
    bayes, plateau = truth.bayes_cross_entropy, truth.marginal_entropy
    optimum = f"Bayes optimum ({bayes:.3f} nats, accuracy {truth.bayes_accuracy:.2f})"
    top.axhline(plateau - bayes if exact else plateau, color="k", ls=":", lw=1, zorder=1,
                label=f"unigram plateau ({plateau:.3f} nats, accuracy "
                      f"{truth.marginal_accuracy:.2f})")
    if not exact:
        top.axhline(bayes, color="k", ls="--", lw=1, zorder=1, label=optimum)
    bottom.axhline(truth.marginal_accuracy, color="k", ls=":", lw=1, zorder=1)
    bottom.axhline(truth.bayes_accuracy, color="k", ls="--", lw=1, zorder=1, label=optimum)


def survival_figure(
    curves: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    path: str | Path,
    horizon: float,
    events: Mapping[str, Sequence[object]] | None = None,
) -> Path:
    """Kaplan-Meier curves, one per run: name -> (steps, survival, low, high) from
    dhwt.analysis.escape.kaplan_meier, drawn as steps from 1 at step 0 to `horizon`, with the
    95% band; `events` (name -> tie switches) marked."""
    fig = new_figure(6, 4.2)
    ax = fig.subplots()
    styles = ("-", "--", "-.", ":")
    overlaid = len(curves) > COLUMNS
    if overlaid:
        ax.add_collection(LineCollection(
            [_post_steps(np.r_[0, steps, horizon], np.r_[1, survival, survival[-1]])
             for steps, survival, _, _ in curves.values()],
            color="tab:blue", lw=0.6, alpha=0.5, label=f"each of {len(curves)} runs"))
    for i, (name, (steps, survival, low, high)) in enumerate(() if overlaid else curves.items()):
        x = np.r_[0, steps, horizon]
        (line,) = ax.step(x, np.r_[1, survival, survival[-1]], where="post", label=name,
                          lw=max(2.8 - 0.7 * i, 1.0), ls=styles[i % len(styles)])
        ax.fill_between(x, np.r_[1, low, low[-1]], np.r_[1, high, high[-1]], step="post",
                        color=line.get_color(), alpha=0.15, lw=0)
    mark_events(ax, distinct_events(events))
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(0, horizon)
    ax.set_ylabel("share still on the plateau")
    step_axis(ax)
    ax.grid(alpha=0.3)
    legend_below(fig, [ax], "Kaplan-Meier estimates" if overlaid else
                 "Kaplan-Meier estimate; band: its 95% interval (log-log)")
    return save(fig, path)


def _post_steps(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Vertices (2n - 1, 2) of the step line through (x, y) that holds each y until the next x
    (matplotlib's where="post").

    Examples:
        >>> _post_steps(np.array([0, 2, 5]), np.array([1.0, 0.5, 0.5])).tolist()
        [[0.0, 1.0], [2.0, 1.0], [2.0, 0.5], [5.0, 0.5], [5.0, 0.5]]
    """
    xs = np.repeat(np.asarray(x, float), 2)[1:]
    ys = np.repeat(np.asarray(y, float), 2)[:-1]
    return np.column_stack((xs, ys))
