"""The print sizes and type sizes every figure of the project is made at.

A figure is a column wide (:data:`COLUMN`, 3.5 in) or a page wide (:data:`PAGE`, 7 in), laid
out at that size and saved at :data:`DPI` without scaling, so that each text's size in points
is its size in print; no text is under :data:`MIN_PT` points.  :func:`apply` sets the
matplotlib and seaborn parameters; :func:`fit` gives a figure its print width (the nearer of
the two to the width it was drawn for) and raises any text under :data:`MIN_PT`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.text import Text

COLUMN = 3.5  # inches: one column of a two-column paper
PAGE = 7.0  # inches: the full text width
MIN_PT = 8.0  # the smallest type size, in points at print size
DPI = 300  # the saved raster's resolution; the PNG records it
MAX_HEIGHT = 8.5  # inches: a figure is never taller than a page's text block

RC = {
    "figure.figsize": (COLUMN, 2.5),
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.labelsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.title_fontsize": 8,
    "figure.titlesize": 9,
    "lines.linewidth": 1.2,
    "lines.markersize": 3.5,
    "axes.linewidth": 0.6,
    "grid.linewidth": 0.4,
    "savefig.dpi": DPI,
    "svg.hashsalt": "distlab",  # deterministic SVG ids
}


def apply() -> None:
    """The project style: seaborn whitegrid, paper context, colorblind palette, the sizes above."""
    sns.set_theme(context="paper", style="whitegrid", palette="colorblind", rc=RC)


def print_width(fig: Figure) -> float:
    """The print width a figure drawn at its current size takes: a column up to 4.5 in, else a page."""
    return COLUMN if fig.get_figwidth() <= 4.5 else PAGE


def fit(fig: Figure, width: float | None = None) -> float:
    """Give ``fig`` its print width (``width``, else :func:`print_width`), its height scaled with it
    (at most :data:`MAX_HEIGHT`), and no text under :data:`MIN_PT`; returns the width."""
    width = width or print_width(fig)
    w, h = fig.get_size_inches()
    fig.set_size_inches(width, min(MAX_HEIGHT, max(1.6, h * width / w if w > width else h)))
    floor_fonts(fig)
    return width


def floor_fonts(fig: Figure) -> None:
    """Raise every text of ``fig`` under :data:`MIN_PT` to it (tick labels made later too)."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for which in ("major", "minor"):
                ticks = axis.get_ticklabels(which=which)
                if ticks and min(t.get_fontsize() for t in ticks) < MIN_PT:
                    ax.tick_params(axis="x" if axis is ax.xaxis else "y", which=which, labelsize=MIN_PT)
    for text in fig.findobj(Text):
        if text.get_fontsize() < MIN_PT:
            text.set_fontsize(MIN_PT)


def visible_texts(fig: Figure) -> list[Text]:
    """Every text a reader sees: titles, axis labels, tick labels in view, legends, annotations."""
    out = []
    for text in fig.findobj(Text):
        if text.get_visible() and text.get_text().strip() and text.get_figure(root=True) is fig:
            out.append(text)
    for ax in fig.axes:  # tick labels outside the view limits are kept by matplotlib but not drawn
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for which in ("major", "minor"):
                locs = axis.get_ticklocs(minor=which == "minor")
                hidden = {id(t) for t, v in zip(axis.get_ticklabels(which=which), locs) if not lo <= v <= hi}
                out = [t for t in out if id(t) not in hidden]
    return out


def new(width: float = COLUMN, height: float = 2.5, **kw):
    """``plt.subplots`` at a print width (``COLUMN`` or ``PAGE``) with the style applied."""
    apply()
    return plt.subplots(figsize=(width, height), **kw)
