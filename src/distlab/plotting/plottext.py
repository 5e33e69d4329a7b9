"""Where a figure's texts sit: its titles, axis labels, text boxes and legends, and which of
them print over each other or over another axes' tick labels (:mod:`distlab.plotting.plots` reports
these among a figure's legibility problems and moves what it can); and whether its keys match what
is drawn: a band not in its line's colour, a legend entry with nothing drawn in its colour, style
or hatch."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox


def text_box(text: Text, renderer) -> Bbox:
    """``text``'s box on the canvas, its frame included."""
    b = text.get_window_extent(renderer)
    if text.get_bbox_patch() is not None:
        b = Bbox.union([b, text.get_bbox_patch().get_window_extent(renderer)])
    return b


def figure_texts(fig: Figure, renderer) -> list[tuple[str, object, Bbox]]:
    """Every title, axis label, text box and legend of ``fig``: (name, owner, box); owner is
    the axes it belongs to, or the figure."""
    out = []
    if fig._suptitle is not None and fig._suptitle.get_text():
        out.append(("the figure's title", fig, text_box(fig._suptitle, renderer)))
    out += [(f"the figure's text box {t.get_text()[:30]!r}", fig, text_box(t, renderer))
            for t in fig.texts if t.get_bbox_patch() is not None and t.get_text()]
    out += [("a figure legend", fig, lg.get_window_extent(renderer)) for lg in fig.legends if lg.get_visible()]
    for i, a in enumerate(fig.axes):
        if not a.get_visible():
            continue
        name = f"axes {i}"
        out += [(f"{name}'s title", a, text_box(t, renderer))
                for t in (a.title, a._left_title, a._right_title) if t.get_text()]
        out += [(f"{name}'s {axis} label", a, text_box(lab, renderer))
                for axis, lab in (("x", a.xaxis.label), ("y", a.yaxis.label)) if lab.get_text()]
        out += [(f"{name}'s text box {t.get_text()[:30]!r}", a, text_box(t, renderer))
                for t in a.texts if t.get_bbox_patch() is not None and t.get_text()]
        legend = a.get_legend()
        if legend is not None and legend.get_visible():
            out.append((f"{name}'s legend", a, legend.get_window_extent(renderer)))
    return out


def text_collisions(fig: Figure, renderer) -> list[str]:
    """Titles, axis labels, text boxes and legends that print over each other or over another
    axes' tick labels (a legend and a text box of one axes are :func:`text_over_data`'s)."""
    items = figure_texts(fig, renderer)
    ticks = {i: shown_tick_boxes(b, renderer) for i, b in enumerate(fig.axes) if b.get_visible()}
    out = []
    for k, (na, oa, ba) in enumerate(items):
        for nb, ob, bb in items[k + 1:]:
            if oa is ob and {_kind(na), _kind(nb)} == {"legend", "text box"}:
                continue
            if not apart(ba, bb):
                out.append(f"{na} prints over {nb}")
        out += [f"{na} prints over the tick labels of axes {i}" for i, boxes in ticks.items()
                if fig.axes[i] is not oa and any(not apart(ba, t) for t in boxes)]
    return out


def _kind(name: str) -> str:
    """``legend``, ``text box`` or ``label`` (titles included), from a :func:`figure_texts` name."""
    return "legend" if name.endswith("legend") else "text box" if "'s text box " in name else "label"


def shown_tick_boxes(ax: Axes, renderer) -> list[Bbox]:
    """The boxes of the tick labels ``ax`` draws: visible, with text, inside its view limits."""
    out = []
    for axis in (ax.xaxis, ax.yaxis):
        lo, hi = sorted(axis.get_view_interval())
        eps = (hi - lo) * 1e-9
        for tick in axis.get_major_ticks() + axis.get_minor_ticks():
            if tick.get_loc() is not None and lo - eps <= tick.get_loc() <= hi + eps:
                out += [lab.get_window_extent(renderer) for lab in (tick.label1, tick.label2)
                        if lab.get_visible() and lab.get_text()]
    return out


def apart(a: Bbox, b: Bbox, slack: float = 1.0) -> bool:
    """Whether two boxes do not overlap by more than ``slack`` pixels (touching is apart)."""
    return (a.x1 <= b.x0 + slack or b.x1 <= a.x0 + slack
            or a.y1 <= b.y0 + slack or b.y1 <= a.y0 + slack)


# ------------------------------------------------------------------ keys against what is drawn

def _rgb(colour) -> np.ndarray:
    return np.asarray(matplotlib.colors.to_rgba(colour))[:3]


def band_colour_problems(ax: Axes) -> list[str]:
    """Bands (``fill_between``) whose colour is that of no line running inside them: a band
    drawn without its line's colour (matplotlib's next colour, not the line's) reads as
    another series."""
    from matplotlib.collections import FillBetweenPolyCollection, PolyCollection

    lines = [ln for ln in ax.lines if ln.get_visible() and len(ln.get_xdata()) > 1]
    out = []
    for coll in ax.collections:
        if not (coll.get_visible() and isinstance(coll, (PolyCollection, FillBetweenPolyCollection))):
            continue
        faces = coll.get_facecolor()
        paths = [p for p in coll.get_paths() if len(p.vertices) > 2]
        if not len(faces) or not paths:
            continue
        face = faces[0][:3]
        inside = []
        for ln in lines:
            xy = np.column_stack([np.asarray(ln.get_xdata(), float), np.asarray(ln.get_ydata(), float)])
            xy = xy[np.all(np.isfinite(xy), axis=1)]
            if len(xy) < 2:
                continue
            # in the display's coordinates: a point on the band's edge counts as inside
            pts = ax.transData.transform(xy)
            hit = np.zeros(len(pts), bool)
            for p in paths:
                hit |= ax.transData.transform_path(p).contains_points(pts, radius=2.0) | \
                    ax.transData.transform_path(p).contains_points(pts, radius=-2.0)
            if hit.mean() >= 0.8:
                inside.append(ln)
        if inside and not any(np.abs(_rgb(ln.get_color()) - face).max() < 0.06 for ln in inside):
            names = ", ".join(sorted({ln.get_label() for ln in inside if not ln.get_label().startswith("_")})) or \
                "its line"
            out.append(f"a band's colour is not that of the line inside it ({names})")
    return out


def _drawn_styles(axes: list[Axes]) -> tuple[list, list]:
    """(visible lines with data, visible patches and collections) of ``axes``."""
    lines, fills = [], []
    for ax in axes:
        box = ax.bbox.padded(1)
        for ln in ax.lines:  # a line counts where some point of it is in view (in display coordinates)
            if not ln.get_visible():
                continue
            xy = np.asarray(ln.get_xydata(), float)
            xy = xy[np.all(np.isfinite(xy), axis=1)]
            pts = ln.get_transform().transform(xy) if len(xy) else xy
            inside = bool(len(pts)) and bool(np.any((pts[:, 0] >= box.x0) & (pts[:, 0] <= box.x1) &
                                                    (pts[:, 1] >= box.y0) & (pts[:, 1] <= box.y1)))
            if inside:
                lines.append(ln)
        fills += [p for p in ax.patches if p.get_visible() and not (hasattr(p, "get_width") and p.get_width() == 0)]
        fills += [c for c in ax.collections if c.get_visible() and (
            len(c.get_paths()) or (isinstance(c, PathCollection) and len(c.get_offsets())))]
    return lines, fills


def _hatch_shows(patch) -> bool:
    """Whether ``patch``'s hatch is drawn in another colour than its face."""
    colour = patch.get_hatchcolor() if hasattr(patch, "get_hatchcolor") else getattr(patch, "_hatch_color", None)
    face = patch.get_facecolor()
    return colour is None or not len(np.atleast_1d(face)) or not _same(np.atleast_2d(face)[0], colour)


def _same(a, b) -> bool:
    return np.abs(_rgb(a) - _rgb(b)).max() < 0.06


def _grey(colour) -> bool:
    r, g, b = _rgb(colour)
    return max(r, g, b) - min(r, g, b) < 0.02


def absent_legend_entries(fig: Figure) -> list[str]:
    """Legend entries that promise what no axes draws: a line in a colour (or, for a grey key
    entry, a dash pattern) no drawn line has, a patch in a colour or hatch no drawn patch has.
    An entry whose label an artist carries counts as drawn."""
    out = []
    legends = [(ax.get_legend(), [ax]) for ax in fig.axes] + [(lg, list(fig.axes)) for lg in fig.legends]
    for legend, axes in legends:
        if legend is None or not legend.get_visible():
            continue
        lines, fills = _drawn_styles(axes)
        labelled = {a.get_label() for a in lines + fills}
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch

        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            name = text.get_text()
            if handle is None or name in labelled or not name or name.startswith("_") or not handle.get_visible():
                continue
            if isinstance(handle, Line2D) and handle.get_linestyle() in ("None", "", " ") and \
                    handle.get_marker() in (None, "", "None", " "):
                continue  # a title row (seaborn's, between a hue's and a style's entries)
            if isinstance(handle, Line2D):
                colour = handle.get_color()
                if _grey(colour):  # a key for a style: some line drawn with its dashes (or marker)
                    ok = any(ln.get_linestyle() == handle.get_linestyle() and
                             (handle.get_marker() in (None, "", "None", " ") or ln.get_marker() == handle.get_marker())
                             for ln in lines) or any(_same(ln.get_color(), colour) for ln in lines)
                else:
                    ok = any(_same(ln.get_color(), colour) for ln in lines)
            elif isinstance(handle, Patch):
                hatch = handle.get_hatch()
                if hatch:  # a hatch in its face's colour does not show
                    ok = any((getattr(p, "get_hatch", lambda: None)() or "") == hatch and _hatch_shows(p) for p in fills)
                elif _grey(handle.get_facecolor()):
                    ok = bool(fills) or bool(lines)
                else:
                    ok = any(any(_same(fc, handle.get_facecolor()) for fc in np.atleast_2d(f.get_facecolor())
                                 if len(fc)) for f in fills) or any(_same(ln.get_color(), handle.get_facecolor()) for ln in lines)
            else:
                ok = True  # other kinds of handles (collections): not judged
            if not ok:
                out.append(f"legend entry {name!r} has nothing drawn in its colour or style")
    return out
