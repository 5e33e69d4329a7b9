"""One seaborn style for every figure of the project.

Figures show the mean over seeds with a 95 % Student-t confidence band over
seeds (:func:`distlab.scoring.stats.t_interval`, the same interval as the tables and
the scorecard; deterministic, no resampling), and every figure states whether its
times are simulated (virtual clock) or measured (wall clock) via
:func:`label_provenance` (its words and the titles' clock: :mod:`distlab.plotting.plotclock`).
Rendering uses the non-interactive Agg backend.

Print: :func:`save` lays a figure out at a column's or a page's width
(:mod:`distlab.plotting.style`), no text under 8 points, and writes its caption beside it
(:mod:`distlab.plotting.captions`: what it shows, its seeds, its interval, its basis); the
provenance (:func:`label_provenance`) and the notes on coinciding lines go to the caption, not
over the data; methods carry the papers' names (:func:`name`).

Legibility, where the helper can tell (:func:`save` applies it, :func:`legibility_problems`
reports what is left): a legend that covers data moves to a free corner, or the y range grows to make
one; every figure's title names its clock (the suptitle, else each axes title, gets the clock of
its provenance boxes appended: simulated, measured or extrapolated); a figure whose axes titles
print over another axes' labels is laid out again; :func:`note_coinciding` says which lines lie
on top of each other (in the caption).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np

import matplotlib

if "matplotlib.pyplot" not in sys.modules:  # never switch an already chosen backend
    matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.path import Path as MplPath  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from distlab.plotting.plottext import (  # noqa: E402,F401 (the key checks, part of this module's interface)
    absent_legend_entries, apart, band_colour_problems, figure_texts, shown_tick_boxes, text_box, text_collisions)
from distlab.plotting.plotclock import (  # noqa: E402,F401 (the clock's helpers, part of this module's interface)
    CLOCKS, MEASURED_BACKENDS, carry_clock, clock_in_titles, provenance_text, titles)
from distlab.plotting import captions, names, style  # noqa: E402
from distlab.scoring.stats import t_errorbar, t_interval  # noqa: E402
from distlab.results.tables import atomic_output  # noqa: E402

DPI = style.DPI
SUFFIXES = {".png": "png", ".pdf": "pdf", ".svg": "svg"}


def set_style() -> None:
    """Apply the project style (:func:`distlab.plotting.style.apply`: seaborn whitegrid, paper
    context, colorblind palette, type sizes of 8 points and up at print size)."""
    style.apply()


def _axes(ax: Axes | None) -> Axes:
    if ax is not None:
        return ax
    set_style()
    _, new_ax = plt.subplots()
    return new_ax


def _per_seed(df: pd.DataFrame, y: str, keys: list[str | None]) -> pd.DataFrame:
    """Average ``y`` within each (keys, seed) cell so every seed counts once."""
    cols = list(dict.fromkeys(k for k in keys if k))
    return df.groupby(cols, as_index=False, dropna=False, observed=True, sort=False)[y].mean()


def clipped_t_errorbar(confidence: float = 0.95):
    """For a quantity that cannot be negative (a time, a rate, a size, a count): the t
    interval over seeds, its lower end cut at zero (a symmetric interval of two or three
    seeds often reaches below it); the figure says so (:data:`POSITIVE_NOTE`)."""
    def bar(values) -> tuple[float, float]:
        v = pd.Series(values, dtype=float).dropna().to_numpy()
        if (v < 0).any():
            raise ValueError(f"a quantity that cannot be negative has a negative value, {v.min():g}")
        ci = t_interval(v, confidence)
        return max(ci.low, 0.0), ci.high
    return bar


POSITIVE_NOTE = "mean over seeds, 95% t interval cut at 0"
BAND = "shaded band: 95 % Student-t interval of the mean over seeds"
BARS = "error bars: 95 % Student-t interval of the mean over seeds"
BARS_POSITIVE = BARS + ", cut at 0"
COLUMN, PAGE = style.COLUMN, style.PAGE


def caption(fig: Figure, what: str, seeds: int | str, interval: str, basis: str) -> None:
    """The caption ``fig`` is saved with (:func:`distlab.plotting.captions.set_caption`); ``seeds``
    a count (``3`` reads "3 seeds") or words; ``basis`` defaults to the clocks of its provenance."""
    n = f"{seeds} seed{'s' if seeds != 1 else ''}" if isinstance(seeds, (int, np.integer)) else str(seeds)
    captions.set_caption(fig, what, n, interval, basis)


def name(internal: str) -> str:
    """The paper's name for an internal id (:func:`distlab.plotting.names.display`)."""
    return names.display(internal)


def _with_ci(kind: str, df: pd.DataFrame, x: str, y: str, hue: str | None, ax: Axes | None = None,
             units: str | None = "seed", ci: float | None = 95, positive: bool = False,
             style: str | None = None, distinct: bool = False, **kw) -> Axes:
    """The mean of ``y`` over ``units`` (seeds) with a t interval, as lines (``kind="line"``)
    or bars (``"bar"``).

    Rows are first averaged within each (x, hue, style, unit) cell, so the interval is one
    over seeds, not over repeated rows of one seed.  ``ci=None``: the mean only.  ``positive``
    (a quantity that cannot be negative): the interval cut at zero (:func:`clipped_t_errorbar`);
    say so on the figure (:data:`POSITIVE_NOTE`).  Lines:
    ``distinct`` gives each ``hue`` level its own dashes and marker.  Other keywords
    (``order``, ``hue_order``) go to seaborn.
    """
    ax = _axes(ax)
    data = _per_seed(df, y, [x, hue, style, units]) if units else df
    interval = clipped_t_errorbar if positive else t_errorbar
    common = {"data": data, "x": x, "y": y, "hue": hue, "ax": ax,
              "errorbar": interval(ci / 100) if ci else None, **kw}
    if kind == "bar":
        sns.barplot(capsize=0.1, err_kws={"linewidth": 1.0}, **common)
    elif distinct and hue and not style:
        sns.lineplot(style=hue, style_order=kw.get("hue_order"), markers=True, dashes=True,
                     markersize=5, **common)
    else:
        sns.lineplot(style=style, marker="o", markersize=4, **common)
    return ax


def line_with_ci(df: pd.DataFrame, x: str, y: str, hue: str | None, ax: Axes | None = None,
                 **kw) -> Axes:
    """Line of the mean of ``y`` over seeds with a t-interval band (:func:`_with_ci`;
    ``style``, ``hue_order``, ``distinct``, ``units``, ``ci``, ``positive``)."""
    return _with_ci("line", df, x, y, hue, ax, **kw)


def coinciding(df: pd.DataFrame, x: str, y: str, hue: str, tol: float = 0.002, log: bool = False) -> list[list]:
    """Groups (of two or more) of ``hue`` levels whose mean curves of ``y`` against ``x``
    lie on top of each other when drawn: at every ``x`` they differ by at most ``tol``
    of the range the curves span (in log10 on a log axis)."""
    curves = {}
    for k, g in df.groupby(hue, sort=False, observed=True):
        c = g.groupby(x)[y].mean()
        curves[k] = np.log10(c.where(c > 0)) if log else c
    values = pd.concat(list(curves.values())) if curves else pd.Series(dtype=float)
    span = float(np.nanmax(values) - np.nanmin(values)) if values.notna().any() else 0.0
    groups: list[list] = []
    for k, c in curves.items():
        for g in groups:
            ref = curves[g[0]]
            if ref.index.equals(c.index) and np.allclose(ref.to_numpy(), c.to_numpy(), rtol=0, atol=tol * span,
                                                         equal_nan=True):
                g.append(k)
                break
        else:
            groups.append([k])
    return [g for g in groups if len(g) > 1]


def note_coinciding(ax: Axes, groups: list[list], what: str = "curves", wrap: int = 60) -> str:
    """Say which lines of ``ax`` coincide (nothing when none do): in the figure's caption (its
    notes, after what it shows, with the axes' title), not over the figure; returns the note
    (``wrap`` is kept for callers: a caption is not wrapped)."""
    if not groups:
        return ""
    note = f"{what} that lie on top of each other: " + "; ".join(" = ".join(str(k) for k in g)
                                                                         for g in groups)
    title = ax.get_title()
    fig = ax.get_figure(root=True)
    fig.__dict__.setdefault("_distlab_notes", []).append(f"{title}: {note}" if title else note)
    return note


def log_ticks(ax: Axes, axis: str = "y") -> None:
    """Plain-number ticks on a log axis that spans little (a loss from 2.2 to 0.6 gets
    0.7, 1, 1.5, 2 rather than one or two powers of ten)."""
    from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter, StrMethodFormatter
    lo, hi = (ax.get_ylim() if axis == "y" else ax.get_xlim())
    decades = np.log10(hi / lo) if lo > 0 and hi > lo else 3.0
    subs = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0) if decades < 1 else (1.0, 2.0, 5.0) if decades < 2.5 else (1.0,)
    a = ax.yaxis if axis == "y" else ax.xaxis
    # under a factor of two (a short run's loss, 2.31 to 2.25) no 1-1.5-2-3-5-7 mantissa may
    # fall inside: evenly spaced plain numbers instead
    a.set_major_locator(MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]) if decades < np.log10(2)
                        else LogLocator(base=10, subs=subs))
    a.set_major_formatter(StrMethodFormatter("{x:g}"))
    a.set_minor_formatter(NullFormatter())


def bar_with_ci(df: pd.DataFrame, x: str, y: str, hue: str | None, ax: Axes | None = None,
                **kw) -> Axes:
    """Bars of the mean of ``y`` over seeds with t-interval error bars (:func:`_with_ci`;
    ``order``/``hue_order`` fix the categories' order, as in seaborn; ``units``, ``ci``,
    ``positive``)."""
    return _with_ci("bar", df, x, y, hue, ax, **kw)


def label_provenance(ax_or_fig: Axes | Figure, backend: str, note: str = "") -> Text:
    """Say whether the figure's times are simulated or measured (``note``, e.g. ``"5 seeds"``,
    appended): the words go to the figure's caption, not over its data, and the clock to its
    title (:func:`carry_clock`).  Returns the (undrawn) text that carries them."""
    if not isinstance(ax_or_fig, (Axes, Figure)):
        raise TypeError(f"expected a matplotlib Axes or Figure, got {type(ax_or_fig).__name__}")
    text = provenance_text(backend, note)
    label = Text(0, 0, text, visible=False)
    label._distlab_clock = text.split(" ", 1)[0]  # simulated | measured | extrapolated
    label._distlab_axes = ax_or_fig if isinstance(ax_or_fig, Axes) else None  # whose title takes its clock
    fig = ax_or_fig.get_figure(root=True) if isinstance(ax_or_fig, Axes) else ax_or_fig
    stamps = fig.__dict__.setdefault("_distlab_stamps", [])
    stamps.append(label)
    return label


def stamps(fig: Figure) -> list[str]:
    """The provenance texts given to ``fig`` (:func:`label_provenance`), once each, in order."""
    return list(dict.fromkeys(t.get_text() for t in getattr(fig, "_distlab_stamps", [])))


# --------------------------------------------------------------------------- legibility
def _renderer(fig: Figure):
    fig.canvas.draw()  # fixes the layout, the autoscaled limits and the text sizes
    return fig.canvas.get_renderer()


def _data_paths(ax: Axes) -> list[tuple[MplPath, bool]]:
    """Every drawn datum of ``ax`` in display coordinates: (path, filled)."""
    out = []
    for line in ax.lines:
        if not line.get_visible() or line.get_label() == "_nolegend_" and len(line.get_xdata()) == 0:
            continue
        path = line.get_transform().transform_path(line.get_path())
        if len(path.vertices):
            out.append((path, False))
            if line.get_marker() not in (None, "", "None", " "):
                out.extend((MplPath(np.array([v, v])), False) for v in path.vertices)
    for coll in ax.collections:
        if not coll.get_visible():
            continue
        if isinstance(coll, PathCollection) and len(coll.get_offsets()):  # scatter: its points
            pts = coll.get_offset_transform().transform(coll.get_offsets())
            out.extend((MplPath(np.array([p, p])), False) for p in pts if np.all(np.isfinite(p)))
            continue
        tr = coll.get_transform()
        out.extend((tr.transform_path(p), True) for p in coll.get_paths() if len(p.vertices))
    for patch in ax.patches:
        if patch.get_visible():
            out.append((patch.get_transform().transform_path(patch.get_path()), True))
    return out


def _covers(box: Bbox, paths: list[tuple[MplPath, bool]]) -> bool:
    box = box.padded(2)
    for path, filled in paths:
        # real vertices only: a CLOSEPOLY's vertex is a placeholder (often the origin)
        real = np.ones(len(path.vertices), bool) if path.codes is None else path.codes != MplPath.CLOSEPOLY
        v = path.vertices[real & np.all(np.isfinite(path.vertices), axis=1)]
        if len(v) == 0:
            continue
        if len(v) == 2 and np.allclose(v[0], v[1]):  # a point
            if box.contains(*v[0]):
                return True
            continue
        if np.any((v[:, 0] >= box.x0) & (v[:, 0] <= box.x1) & (v[:, 1] >= box.y0) & (v[:, 1] <= box.y1)):
            return True
        finite = path if np.isfinite(path.vertices).all() else path.cleaned(remove_nans=True)
        if finite.intersects_bbox(box, filled=filled):
            return True
    return False


def _obstacles(ax: Axes, renderer) -> list[Bbox]:
    legend = ax.get_legend()
    return [legend.get_window_extent(renderer)] if legend is not None and legend.get_visible() else []


def text_over_data(ax: Axes, text: Text, renderer=None) -> bool:
    """Whether ``text``'s box covers data of ``ax`` or its legend."""
    renderer = renderer or _renderer(ax.figure)
    box = text_box(text, renderer)
    if any(box.overlaps(o) for o in _obstacles(ax, renderer)):
        return True
    return _covers(box, _data_paths(ax))


_LEGEND_LOCS = ("upper right", "upper left", "lower left", "lower right", "center right", "center left",
                "upper center", "lower center")


LEGEND_CLEARANCE_PX = 4


def legend_over_data(ax: Axes, renderer=None) -> bool:
    """Whether the legend of ``ax`` (one drawn inside it) covers its data."""
    legend = ax.get_legend()
    if legend is None or not legend.get_visible():
        return False
    renderer = renderer or _renderer(ax.figure)
    box = legend.get_window_extent(renderer)
    if not box.overlaps(ax.get_window_extent(renderer)):
        return False  # placed outside the axes
    # a clearance of a few points: a cap or a marker that ends at the legend's frame is hidden by it
    return _covers(box.padded(LEGEND_CLEARANCE_PX), _data_paths(ax))


def _grow_top(ax: Axes, frac: float) -> None:
    """Raise the top of the y range so that a free band of ``frac`` of the axes height is
    left above the current range (on a linear or a log axis)."""
    lo, hi = ax.get_ylim()
    frac = min(frac, 0.6)
    if ax.get_yscale() == "log" and lo > 0 and hi > 0:
        ax.set_ylim(lo, hi * (hi / lo) ** (frac / (1 - frac)))
    elif ax.get_yscale() == "linear":
        ax.set_ylim(lo, hi + (hi - lo) * frac / (1 - frac))


def place_legend(ax: Axes, renderer=None) -> None:
    """Move a legend that covers data to the first corner where it covers none; with no free
    corner, raise the top of the y range until an upper corner is free (two tries), else put
    it beside the axes on the right when no other axes is there."""
    legend = ax.get_legend()
    if legend is None or legend.get_bbox_to_anchor() is not ax.bbox:
        return  # none, or anchored by its figure code: leave it
    renderer = renderer or _renderer(ax.figure)
    if getattr(legend, "_loc", None) == 0:
        # "best" is chosen again at every draw, and savefig's tight box draws once more: a place
        # checked here could move onto the data there.  Fix it to the first corner clear of data.
        for loc in _LEGEND_LOCS:
            legend.set_loc(loc)
            if not legend_over_data(ax, renderer):
                return
    elif not legend_over_data(ax, renderer):
        return
    for loc in _LEGEND_LOCS:
        legend.set_loc(loc)
        if not legend_over_data(ax, renderer):
            return
    lims = ax.get_ylim()
    for _ in range(2):
        height = legend.get_window_extent(renderer).height / max(ax.get_window_extent(renderer).height, 1)
        if height > 0.35 and ax.get_yscale() == "log":  # decades of room would squash the data
            break
        _grow_top(ax, height + 0.04)
        renderer = _renderer(ax.figure)
        for loc in _LEGEND_LOCS[:2] + ("upper center",):
            legend.set_loc(loc)
            if not legend_over_data(ax, renderer):
                return
    # still covered: beside the axes on the right when no axes sits there, the range as it was
    box = ax.get_window_extent(renderer)
    right = [b for b in ax.figure.axes if b is not ax and b.get_visible()
             and b.get_window_extent(renderer).x0 >= box.x1 - 1
             and b.get_window_extent(renderer).y0 < box.y1 and b.get_window_extent(renderer).y1 > box.y0]
    if not right:
        ax.set_ylim(*lims)
        legend.set_loc("upper left")
        legend.set_bbox_to_anchor((1.01, 1.0), transform=ax.transAxes)
        return
    legend.set_loc("best")


def _labels_overlap(fig: Figure, renderer) -> bool:
    """An axes' title over another axes' title, x label or tick labels."""
    axes = [a for a in fig.axes if a.get_visible()]
    for a in axes:
        if not a.title.get_text():
            continue
        t = a.title.get_window_extent(renderer)
        for b in axes:
            if b is a:
                continue
            boxes = [b.xaxis.label.get_window_extent(renderer)] if b.xaxis.label.get_text() else []
            boxes += [b.title.get_window_extent(renderer)] if b.title.get_text() else []
            boxes += [tl.get_window_extent(renderer) for tl in b.get_xticklabels() if tl.get_text()]
            if any(t.overlaps(bx) for bx in boxes):
                return True
    return False


def _under_suptitle(fig: Figure, renderer) -> list[Bbox]:
    """The boxes of the titles, axis labels, text boxes and legends that the suptitle prints over."""
    sup = fig._suptitle
    if sup is None or not sup.get_text():
        return []
    s = sup.get_window_extent(renderer)
    return [b for _, owner, b in figure_texts(fig, renderer) if owner is not fig and not apart(s, b)]


def lift_suptitle(fig: Figure, renderer=None) -> None:
    """Move the suptitle just above every axes title and text box it prints over
    (``bbox_inches="tight"`` then keeps it in the saved image)."""
    renderer = renderer or _renderer(fig)
    for _ in range(8):  # raised above one box, it may meet the title above that box
        boxes = _under_suptitle(fig, renderer)
        if not boxes:
            return
        top = max(b.y1 for b in boxes)
        fig._suptitle.set_y(fig.transFigure.inverted().transform((0, top + 4))[1])
        fig._suptitle.set_va("bottom")


def tidy(fig: Figure) -> None:
    """Name the clock in the title (:func:`carry_clock`), give a short log axis plain ticks
    (:func:`log_ticks`), move legends off the data, lay ``fig`` out again if an axes title
    prints over another axes' labels, and lift the suptitle above what it would print over."""
    carry_clock(fig)
    renderer = _renderer(fig)
    for ax in fig.axes:  # plain numbers on a short log axis; then crowded level x labels turned
        for problem in _tick_problems(ax, renderer):
            if problem.startswith("log "):
                log_ticks(ax, problem[4])
        if "x tick labels overlap" in _tick_problems(ax, _renderer(fig)):  # the plain ticks may crowd
            ax.tick_params(axis="x", labelrotation=30)
        place_legend(ax)
    if _labels_overlap(fig, _renderer(fig)) and fig.get_layout_engine() is None:
        fig.tight_layout(rect=(0, 0, 1, 0.96) if fig._suptitle is not None else None)
    # the layout above can narrow an axes after its labels were checked (on CI, the tiny run's
    # demo_loss_time panels): crowded level x labels are turned once more, on the final layout
    # turned labels are taller and push the x label down: onto the title of the panel below
    # (the tiny run's demo_loss_time, at some measured times), so the layout is made again
    turned = False
    renderer = _renderer(fig)
    for ax in fig.axes:
        if "x tick labels overlap" in _tick_problems(ax, renderer):
            ax.tick_params(axis="x", labelrotation=30)
            turned = True
    if turned:
        if _labels_overlap(fig, _renderer(fig)) and fig.get_layout_engine() is None:
            fig.tight_layout(rect=(0, 0, 1, 0.96) if fig._suptitle is not None else None)
    lift_suptitle(fig)


def legibility_problems(fig: Figure) -> list[str]:
    """What makes ``fig`` hard to read, as far as this helper can tell: no title, a title
    that names no clock, an unlabelled axis (categorical tick labels count as labels; a y
    axis shared with a labelled one counts), an axes title over another's labels, a text
    box or a legend over data, a band not in its line's colour (:func:`band_colour_problems`),
    a legend entry with nothing drawn in its colour, style or hatch (:func:`absent_legend_entries`)."""
    renderer = _renderer(fig)
    problems = []
    axes = [a for a in fig.axes if a.get_visible() and a.has_data()]
    if not (fig._suptitle is not None and fig._suptitle.get_text()) and not all(
            a.get_title() or a.get_title(loc="left") for a in axes):
        problems.append("no title (neither the figure's nor every axes')")

    def named(axis, ticks):
        return bool(axis.label.get_text()) or any(t.get_text() and not _numeric(t.get_text()) for t in ticks)

    for i, a in enumerate(axes):
        shared_x = [b for b in a.get_shared_x_axes().get_siblings(a) if b is not a]
        if not named(a.xaxis, a.get_xticklabels()) and not any(named(b.xaxis, b.get_xticklabels()) for b in shared_x):
            problems.append(f"axes {i} ({a.get_title()!r}): no x label")
        shared = [b for b in a.get_shared_y_axes().get_siblings(a) if b is not a]
        if not named(a.yaxis, a.get_yticklabels()) and not any(named(b.yaxis, b.get_yticklabels()) for b in shared):
            problems.append(f"axes {i} ({a.get_title()!r}): no y label")
        for t in a.texts:
            if t.get_bbox_patch() is not None and text_over_data(a, t, renderer):
                problems.append(f"axes {i} ({a.get_title()!r}): text box {t.get_text()!r} covers data")
        if legend_over_data(a, renderer):
            problems.append(f"axes {i} ({a.get_title()!r}): the legend covers data")
    if axes and not clock_in_titles(fig):
        problems.append("no clock in the title (simulated, measured or extrapolated)")
    if _labels_overlap(fig, renderer):
        problems.append("an axes title prints over another axes' labels")
    if _under_suptitle(fig, renderer):
        problems.append("the figure's title prints over an axes title, label, text box or legend")
    problems += [p for p in text_collisions(fig, renderer) if not p.startswith("the figure's title prints over axes")]
    for i, a in enumerate(axes):
        problems += [f"axes {i} ({a.get_title()!r}): {p}" for p in _tick_problems(a, renderer)]
        problems += [f"axes {i} ({a.get_title()!r}): {p}" for p in band_colour_problems(a)]
    problems += absent_legend_entries(fig)
    return problems


def _tick_problems(ax: Axes, renderer) -> list[str]:
    """Level tick labels over each other; a log axis with under three numbers (or under a
    decade, in powers of ten); error bars below zero under all-positive bars."""
    out = []
    for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
        labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
        # rotated labels' boxes overlap where their glyphs do not: level ones only
        boxes = sorted((t.get_window_extent(renderer) for t in labels if t.get_rotation() == 0),
                       key=lambda b: b.x0 if name == "x" else b.y0)
        if any(a.overlaps(b) for a, b in zip(boxes, boxes[1:])):
            out.append(f"{name} tick labels overlap")
        lo, hi = sorted(axis.get_view_interval())
        shown = [t for which in ("major", "minor") for t, v in
                 zip(axis.get_ticklabels(which=which), axis.get_ticklocs(minor=which == "minor"))
                 if lo <= v <= hi and t.get_text() and _numeric(t.get_text())]
        hidden = not any(t.get_visible() for t in axis.get_ticklabels()) or not axis._major_tick_kw.get("label1On", True)
        if axis.get_scale() == "log" and ax.has_data() and not hidden and (
                len(shown) < 3 or hi < 10 * lo and any("10^" in t.get_text() for t in shown)):
            out.append(f"log {name} axis with fewer than three plain numbers on it")
    bars = [b.get_height() for b in ax.patches if hasattr(b, "get_height") and b.get_width() > 0]
    if bars and min(bars) > 0 and any(len(ln.get_ydata()) and np.nanmin(ln.get_ydata()) < 0 for ln in ax.lines):
        out.append("an error bar reaches below zero under positive bars")
    return out


def _numeric(s: str) -> bool:
    """A tick label that is a number (plain or mathtext, e.g. ``$\\mathdefault{10^{0}}$``)."""
    cleaned = re.sub(r"\\(mathdefault|times|cdot)", "", s).replace("$", "")
    return bool(cleaned.strip()) and re.fullmatch(r"[\d.,eE+\-\u2212^{}\s%]*", cleaned) is not None


PAD_IN = 0.03  # inches of margin kept around what a figure draws


def _print_box(fig: Figure, width: float) -> Bbox:
    """The box (inches) saved of ``fig``: exactly ``width`` wide, around all it draws.  A figure
    whose drawing is wider than ``width`` is narrowed (its layout redone) until it fits."""
    for _ in range(4):
        tight = fig.get_tightbbox(_renderer(fig))
        excess = tight.width + 2 * PAD_IN - width
        if excess <= 0.005 or fig.get_figwidth() - excess < 0.5 * width:
            break
        fig.set_size_inches(fig.get_figwidth() - excess, fig.get_figheight())
        if fig.get_layout_engine() is None and not getattr(fig, "_distlab_fixed_layout", False):
            fig.tight_layout(rect=(0, 0, 1, 0.96) if fig._suptitle is not None else None)
    fig._distlab_cropped = tight.width > width + 0.01  # what no narrowing brought within the width
    x0 = tight.x0 - (width - tight.width) / 2
    return Bbox.from_bounds(x0, tight.y0 - PAD_IN, width, tight.height + 2 * PAD_IN)


def _is_curve(line) -> bool:
    """A data line: three x values or more, in order (an error bar's caps go back and forth)."""
    try:
        x = np.asarray(line.get_xdata(), dtype=float)
    except (TypeError, ValueError):  # categorical x: not a curve
        return False
    return len(np.unique(x[np.isfinite(x)])) >= 3 and bool(np.all(np.diff(x[np.isfinite(x)]) >= 0))


def print_report(fig: Figure) -> dict:
    """What a reader sees of ``fig`` at print size: its texts, their smallest size in points,
    whether it was cut at its print width, the most data lines (of three points or more) a panel draws."""
    texts = style.visible_texts(fig)
    lines = [sum(_is_curve(ln) for ln in ax.lines) for ax in fig.axes if ax.get_visible()]
    return {"min_pt": min((t.get_fontsize() for t in texts), default=style.MIN_PT),
            "texts": [t.get_text() for t in texts], "cropped": bool(getattr(fig, "_distlab_cropped", False)),
            "lines_per_panel": max(lines, default=0)}


def save(fig: Figure, path: str | os.PathLike[str], width: float | None = None) -> Path:
    """Save ``fig`` atomically (format from the suffix: .png, .pdf, .svg) and close it.

    The figure is laid out at its print width (``width``: :data:`style.COLUMN` or
    :data:`style.PAGE`, else the nearer of the two, :func:`distlab.plotting.style.fit`), no text
    under :data:`style.MIN_PT` points, and saved exactly that wide at :data:`DPI`.  Before saving,
    :func:`tidy` fixes what it can of the layout; a PNG records what :func:`legibility_problems`
    still finds (text key ``distlab:legibility``), its titles (``distlab:titles``) and what it
    prints (``distlab:print``: its texts and their smallest size), and gets its caption beside it
    (:func:`distlab.plotting.captions.write_caption`).  Creation dates are omitted from PDF/SVG
    metadata so reruns are identical.
    """
    target = Path(path)
    fmt = SUFFIXES.get(target.suffix.lower())
    try:
        if fmt is None:
            raise ValueError(f"unsupported figure suffix {target.suffix!r}; use one of {sorted(SUFFIXES)}")
        width = style.fit(fig, width)
        tidy(fig)
        box = _print_box(fig, width)
        style.floor_fonts(fig)
        metadata = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}.get(fmt)
        text = captions.caption_of(fig, target)
        if fmt == "png":  # for tests/test_figures_legible.py and tests/test_figure_print.py
            metadata = {"distlab:legibility": json.dumps(legibility_problems(fig)),
                        "distlab:titles": json.dumps(titles(fig)), "distlab:print": json.dumps(print_report(fig)),
                        **({"distlab:caption": text} if text else {})}
        with atomic_output(target) as tmp:
            fig.savefig(tmp, format=fmt, dpi=DPI, bbox_inches=box, metadata=metadata)
        if fmt == "png" and text:
            captions.write_caption(text, target)
    finally:
        plt.close(fig)
    return target
