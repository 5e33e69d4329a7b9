"""One seaborn style for every figure of the project.

Figures show the mean over seeds with a 95 % Student-t confidence band over
seeds (:func:`distlab.stats.t_interval`, the same interval as the tables and
the scorecard; deterministic, no resampling), and every figure states whether its
times are simulated (virtual clock) or measured (wall clock) via
:func:`label_provenance`.  Rendering uses the non-interactive Agg backend.

Legibility, where the helper can tell (:func:`save` applies it, :func:`legibility_problems`
reports what is left): a provenance box on an axes goes to the first corner where it
covers no data (lines, bands, bars, points) and no legend, else above the axes; a
figure whose axes titles print over another axes' labels is laid out again;
:func:`note_coinciding` says which lines lie on top of each other.
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
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

from distlab.stats import t_errorbar  # noqa: E402
from distlab.tables import atomic_output  # noqa: E402

DPI = 150
SUFFIXES = {".png": "png", ".pdf": "pdf", ".svg": "svg"}
MEASURED_BACKENDS = {"gloo", "nccl", "measured"}


def set_style() -> None:
    """Apply the project style: seaborn whitegrid, paper context, colorblind palette."""
    sns.set_theme(
        context="paper",
        style="whitegrid",
        palette="colorblind",
        rc={
            "figure.figsize": (4.5, 3.0),
            "font.size": 9,
            "axes.titlesize": 10,
            "axes.labelsize": 9,
            "xtick.labelsize": 8,
            "ytick.labelsize": 8,
            "legend.fontsize": 8,
            "legend.title_fontsize": 8,
            "lines.linewidth": 1.5,
            "savefig.dpi": DPI,
            "savefig.bbox": "tight",
            "svg.hashsalt": "distlab",  # deterministic SVG ids
        },
    )


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


def line_with_ci(
    df: pd.DataFrame,
    x: str,
    y: str,
    hue: str | None,
    ax: Axes | None = None,
    units: str | None = "seed",
    ci: float | None = 95,
    style: str | None = None,
    hue_order: list | None = None,
    distinct: bool = False,
) -> Axes:
    """Line of the mean of ``y`` over ``units`` (seeds) with a t-interval band.

    Rows are first averaged within each (x, hue, style, unit) cell, so the band
    is a CI over seeds, not over repeated rows of one seed.  ``ci=None`` draws
    the mean only.  ``distinct`` gives each ``hue`` level its own dash pattern and
    marker as well as its colour (for many lines, or lines that lie close together).
    """
    ax = _axes(ax)
    data = _per_seed(df, y, [x, hue, style, units]) if units else df
    if distinct and hue and not style:
        style_kw = {"style": hue, "style_order": hue_order, "markers": True, "dashes": True}
    else:
        style_kw = {"style": style, "marker": "o"}
    sns.lineplot(
        data=data,
        x=x,
        y=y,
        hue=hue,
        hue_order=hue_order,
        errorbar=t_errorbar(ci / 100) if ci else None,
        markersize=4 if not distinct else 5,
        ax=ax,
        **style_kw,
    )
    return ax


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
    """Add to ``ax``'s title a line saying which lines coincide (nothing when none do);
    returns that line."""
    if not groups:
        return ""
    note = f"{what} that lie on top of each other: " + "; ".join(" = ".join(str(k) for k in g)
                                                                         for g in groups)
    note = textwrap.fill(note, width=int(wrap))
    title = ax.get_title()
    ax.set_title(f"{title}\n{note}" if title else note, fontsize=ax.title.get_fontsize())
    return note


def bar_with_ci(
    df: pd.DataFrame,
    x: str,
    y: str,
    hue: str | None,
    ax: Axes | None = None,
    units: str | None = "seed",
    ci: float | None = 95,
    order: list | None = None,
    hue_order: list | None = None,
) -> Axes:
    """Bars of the mean of ``y`` over seeds with t-interval error bars
    (``order``/``hue_order`` fix the categories' order, as in seaborn)."""
    ax = _axes(ax)
    data = _per_seed(df, y, [x, hue, units]) if units else df
    sns.barplot(
        data=data,
        x=x,
        y=y,
        hue=hue,
        order=order,
        hue_order=hue_order,
        errorbar=t_errorbar(ci / 100) if ci else None,
        capsize=0.1,
        err_kws={"linewidth": 1.0},
        ax=ax,
    )
    return ax


def provenance_text(backend: str, note: str = "") -> str:
    """``"simulated (virtual clock)"`` or ``"measured (wall clock, <backend>)"`` (+ note)."""
    key = backend.strip().lower()
    if key == "simulated":
        text = "simulated (virtual clock)"
    elif key == "measured":
        text = "measured (wall clock)"
    elif key in MEASURED_BACKENDS:
        text = f"measured (wall clock, {key})"
    else:
        raise ValueError(
            f"unknown backend {backend!r}: expected 'simulated' or one of {sorted(MEASURED_BACKENDS)}"
        )
    return f"{text}; {note}" if note else text


def label_provenance(ax_or_fig: Axes | Figure, backend: str, note: str = "") -> Text:
    """Stamp a small text box saying whether times are simulated or measured.

    On an Axes it goes into the first corner of the axes where it covers no data
    and no legend (lower right, lower left, upper right, upper left, then the
    middle of the lower and upper edge), else just above the axes at the right; the
    place is chosen when the figure is saved (:func:`save`), after its layout.  On a
    Figure it goes into the lower-right corner of the figure.  ``note`` (e.g.
    ``"5 seeds"``) is appended.
    """
    text = provenance_text(backend, note)
    style = {
        "ha": "right",
        "va": "bottom",
        "fontsize": 7,
        "color": "0.25",
        "bbox": {"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "0.7", "alpha": 0.85},
    }
    if isinstance(ax_or_fig, Axes):
        label = ax_or_fig.text(0.99, 0.02, text, transform=ax_or_fig.transAxes, **style)
        label._distlab_provenance = True  # placed clear of the data by place_provenance (save does it)
        return label
    if isinstance(ax_or_fig, Figure):
        return ax_or_fig.text(0.99, 0.01, text, **style)
    raise TypeError(f"expected a matplotlib Axes or Figure, got {type(ax_or_fig).__name__}")


# --------------------------------------------------------------------------- legibility
_CORNERS = [(0.99, 0.02, "right", "bottom"), (0.01, 0.02, "left", "bottom"), (0.99, 0.98, "right", "top"),
            (0.01, 0.98, "left", "top"), (0.5, 0.02, "center", "bottom"), (0.5, 0.98, "center", "top")]


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
    box = text.get_window_extent(renderer)
    if text.get_bbox_patch() is not None:
        box = Bbox.union([box, text.get_bbox_patch().get_window_extent(renderer)])
    if any(box.overlaps(o) for o in _obstacles(ax, renderer)):
        return True
    return _covers(box, _data_paths(ax))


def place_provenance(ax: Axes, text: Text, renderer=None) -> None:
    """Move ``text`` to the first corner of ``ax`` where it covers no data, else above the axes."""
    renderer = renderer or _renderer(ax.figure)
    for x, y, ha, va in _CORNERS:
        text.set_position((x, y))
        text.set_ha(ha)
        text.set_va(va)
        if not text_over_data(ax, text, renderer):
            return
    # no free corner: a line of its own above the axes, the title raised above it
    text.set_position((1.0, 1.01))
    text.set_ha("right")
    text.set_va("bottom")
    height_pt = text.get_window_extent(renderer).height * 72.0 / ax.figure.dpi
    for title in (ax.title, ax._left_title, ax._right_title):
        if title.get_text():
            ax.set_title(title.get_text(), loc=title.get_horizontalalignment(), fontsize=title.get_fontsize(),
                         pad=matplotlib.rcParams["axes.titlepad"] + height_pt + 2)


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


def tidy(fig: Figure) -> None:
    """Lay ``fig`` out again if an axes title prints over another axes' labels, then
    place each axes' provenance box clear of the data."""
    def place(renderer):
        for ax in fig.axes:
            for text in ax.texts:
                if getattr(text, "_distlab_provenance", False):
                    place_provenance(ax, text, renderer)

    place(_renderer(fig))
    if _labels_overlap(fig, _renderer(fig)) and fig.get_layout_engine() is None:
        fig.tight_layout(rect=(0, 0, 1, 0.96) if fig._suptitle is not None else None)
        place(_renderer(fig))


def legibility_problems(fig: Figure) -> list[str]:
    """What makes ``fig`` hard to read, as far as this helper can tell: no title, an
    unlabelled axis (categorical tick labels count as labels; a y axis shared with a
    labelled one counts), an axes title over another's labels, a text box over data."""
    renderer = _renderer(fig)
    problems = []
    axes = [a for a in fig.axes if a.get_visible() and a.has_data()]
    if not (fig._suptitle is not None and fig._suptitle.get_text()) and not all(
            a.get_title() or a.get_title(loc="left") for a in axes):
        problems.append("no title (neither the figure's nor every axes')")

    def named(axis, ticks):
        return bool(axis.label.get_text()) or any(t.get_text() and not _numeric(t.get_text()) for t in ticks)

    for i, a in enumerate(axes):
        if not named(a.xaxis, a.get_xticklabels()):
            problems.append(f"axes {i} ({a.get_title()!r}): no x label")
        shared = [b for b in a.get_shared_y_axes().get_siblings(a) if b is not a]
        if not named(a.yaxis, a.get_yticklabels()) and not any(named(b.yaxis, b.get_yticklabels()) for b in shared):
            problems.append(f"axes {i} ({a.get_title()!r}): no y label")
        for t in a.texts:
            if t.get_bbox_patch() is not None and text_over_data(a, t, renderer):
                problems.append(f"axes {i} ({a.get_title()!r}): text box {t.get_text()!r} covers data")
    if _labels_overlap(fig, renderer):
        problems.append("an axes title prints over another axes' labels")
    return problems


def _numeric(s: str) -> bool:
    """A tick label that is a number (plain or mathtext, e.g. ``$\\mathdefault{10^{0}}$``)."""
    cleaned = re.sub(r"\\(mathdefault|times|cdot)", "", s).replace("$", "")
    return bool(cleaned.strip()) and re.fullmatch(r"[\d.,eE+\-\u2212^{}\s%]*", cleaned) is not None


def save(fig: Figure, path: str | os.PathLike[str]) -> Path:
    """Save ``fig`` atomically (format from the suffix: .png, .pdf, .svg) and close it.

    Before saving, :func:`tidy` fixes what it can of the layout and places the
    provenance boxes; a PNG records what :func:`legibility_problems` still finds
    (text key ``distlab:legibility``) and its titles (``distlab:titles``).  Creation dates are omitted from PDF/SVG metadata so reruns
    are identical.
    """
    target = Path(path)
    fmt = SUFFIXES.get(target.suffix.lower())
    try:
        if fmt is None:
            raise ValueError(f"unsupported figure suffix {target.suffix!r}; use one of {sorted(SUFFIXES)}")
        tidy(fig)
        metadata = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}.get(fmt)
        if fmt == "png":  # what legibility_problems finds, and the titles, for tests/test_figures_legible.py
            metadata = {"distlab:legibility": json.dumps(legibility_problems(fig)),
                        "distlab:titles": json.dumps([t for t in [fig._suptitle.get_text() if fig._suptitle
                                                                  else ""] + [a.get_title() for a in fig.axes]
                                                      if t])}
        with atomic_output(target) as tmp:
            fig.savefig(tmp, format=fmt, dpi=DPI, bbox_inches="tight", metadata=metadata)
    finally:
        plt.close(fig)
    return target
