"""Which clock a figure's times are on, in words: the provenance text of a backend and the
clock every figure's title names (matplotlib-free; :mod:`distlab.plotting.plots` draws the boxes and
applies :func:`carry_clock` when it saves a figure).

A figure's times are simulated (virtual clock), measured (wall clock, with the backend) or
extrapolated (from measurements); :func:`provenance_text` says which, :func:`carry_clock`
appends the clock of a figure's provenance boxes to a title that names none, and
:func:`clock_in_titles` is the check :func:`distlab.plotting.plots.legibility_problems` reports.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MEASURED_BACKENDS = {"gloo", "nccl", "measured"}


def provenance_text(backend: str, note: str = "") -> str:
    """``"simulated (virtual clock)"`` or ``"measured (wall clock, <backend>)"`` (+ note)."""
    key = backend.strip().lower()
    if key == "simulated":
        text = "simulated (virtual clock)"
    elif key == "measured":
        text = "measured (wall clock)"
    elif key == "extrapolated":
        text = "extrapolated (from measurements)"
    elif key in MEASURED_BACKENDS:
        text = f"measured (wall clock, {key})"
    else:
        raise ValueError(
            f"unknown backend {backend!r}: expected 'simulated', 'extrapolated' or one of "
            f"{sorted(MEASURED_BACKENDS)}"
        )
    return f"{text}; {note}" if note else text


CLOCKS = ("simulated", "measured", "extrapolated")
_CLOCK_WORD = re.compile(r"\b(simulated|measured|extrapolated)\b", re.I)


_PROVENANCE_PHRASES = {"simulated (virtual clock)": "simulated", "measured (wall clock": "measured",
                       "extrapolated (from measurements)": "extrapolated"}


def _clocks(texts) -> list[str]:
    """The clocks the provenance texts among ``texts`` name (a text written by
    :func:`provenance_text` but placed by hand counts too)."""
    found = set()
    for t in texts:
        clock = getattr(t, "_distlab_clock", None)
        if clock:
            found.add(clock)
            continue
        found.update(c for phrase, c in _PROVENANCE_PHRASES.items() if phrase in t.get_text())
    return [c for c in CLOCKS if c in found]


def titles(fig: Figure) -> list[str]:
    """The figure's suptitle and its axes' titles that are set."""
    sup = fig._suptitle.get_text() if fig._suptitle is not None else ""
    return [x for x in [sup] + [a.get_title() for a in fig.axes] if x]


def carry_clock(fig: Figure) -> None:
    """Append the clock of the figure's provenance boxes to its title when the title names
    none: to the suptitle if there is one, else to each axes title (that axes' own boxes
    first, then the figure's)."""
    stamps = getattr(fig, "_distlab_stamps", [])
    every = _clocks(list(fig.texts) + [t for a in fig.axes for t in a.texts] + stamps)
    if not every:
        return
    if fig._suptitle is not None and fig._suptitle.get_text():
        if not _CLOCK_WORD.search(fig._suptitle.get_text()):
            fig._suptitle.set_text(f"{fig._suptitle.get_text()} ({' and '.join(every)})")
        return
    for ax in fig.axes:
        title = ax.get_title()
        if title and not _CLOCK_WORD.search(title):
            own = _clocks([*ax.texts, *(t for t in stamps if getattr(t, "_distlab_axes", None) is ax)])
            own = own or _clocks([*fig.texts, *(t for t in stamps if getattr(t, "_distlab_axes", None) is None)])
            own = own or every
            ax.title.set_text(f"{title} ({' and '.join(own)})")


def clock_in_titles(fig: Figure) -> bool:
    """Whether the suptitle, or every titled axes with data, names a clock."""
    sup = fig._suptitle.get_text() if fig._suptitle is not None else ""
    if sup:
        return bool(_CLOCK_WORD.search(sup))
    named = [a.get_title() for a in fig.axes if a.get_visible() and a.has_data() and a.get_title()]
    return bool(named) and all(_CLOCK_WORD.search(x) for x in named)
