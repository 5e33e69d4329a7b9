"""Where a figure's texts sit: its titles, axis labels, text boxes and legends, and which of
them print over each other or over another axes' tick labels (:mod:`distlab.plotting.plots` reports
these among a figure's legibility problems and moves what it can)."""

from __future__ import annotations

from matplotlib.axes import Axes
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
