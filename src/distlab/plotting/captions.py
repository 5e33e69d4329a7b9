"""Every figure's caption, written beside it, and the papers' figure order.

Each figure the workflow writes is listed in :data:`FIGURES` (its file's stem: the paper, the
paper's figure number where it reproduces one, what it shows).  A figure module says, before
saving, how many seeds the figure averages, which interval it draws and whether its times are
simulated or measured (:func:`set_caption`); :func:`distlab.plotting.plots.save` writes
``<name>.caption.txt`` beside ``<name>.png`` (:func:`write_caption`).  The write-up reads a
caption with :func:`figure_caption` and orders figures as the papers do with
:func:`figure_number`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..results.tables import atomic_output

if TYPE_CHECKING:
    from matplotlib.figure import Figure

@dataclass(frozen=True)
class Entry:
    paper: str  # a name of its paper in the papers' registry (distlab.papers: P1, atlas, baseline)
    number: int | None  # the paper's figure number, where the figure reproduces one
    order: int  # its place among the paper's figures (the paper's number first)


# a figure's stem: where it stands; the P1 numbers are the paper's (PGC, Figs. 3, 7-10)
FIGURES = {
    "pgc_fig3": Entry("P1", 3, 3), "pgc_fig7": Entry("P1", 7, 7), "pgc_fig8": Entry("P1", 8, 8),
    "pgc_fig9": Entry("P1", 9, 9), "pgc_fig10": Entry("P1", 10, 10), "pgc_real_vs_sim": Entry("P1", None, 11),
    "pgc_regime": Entry("P1", None, 12), "pgc_trace_fit": Entry("P1", None, 13),
    "placement_curves": Entry("P2", None, 1), "placement_learned": Entry("P2", None, 2),
    "placement_regime": Entry("P2", None, 3),
    "local_loss_tokens": Entry("P3", None, 1), "local_loss_time": Entry("P3", None, 2),
    "local_throughput_memory": Entry("P3", None, 3), "local_probes": Entry("P3", None, 4),
    "local_pc_cost": Entry("P3", None, 5), "local_hybrid": Entry("P3", None, 6), "local_nonident": Entry("P3", None, 7),
    "local_throughput_map": Entry("P3", None, 8),
    "demo_loss_steps": Entry("P4", None, 1), "demo_loss_bytes": Entry("P4", None, 2),
    "demo_loss_time": Entry("P4", None, 3), "demo_gap_steps": Entry("P4", None, 4), "demo_real": Entry("P4", None, 5),
    "atlas_winners_bandwidth_straggler": Entry("atlas", None, 1), "atlas_winners_bandwidth_size": Entry("atlas", None, 2),
    "atlas_time_vs_bandwidth": Entry("atlas", None, 3),
    "baseline_loss": Entry("baseline", None, 1), "techerror": Entry("baseline", None, 2),
}
BASES = ("simulated", "measured", "extrapolated")


def set_caption(fig: Figure, what: str, seeds: str, interval: str, basis: str) -> None:
    """What ``fig`` shows, over how many seeds (e.g. ``"3 seeds"``), which interval (e.g. ``"band:
    95 % t interval over seeds"``, or ``"no interval: one seed"``) and its basis (``simulated``,
    ``measured``, ``extrapolated``, or a sentence naming them, e.g. per bar)."""
    fig._distlab_caption = {"what": what.strip().rstrip("."), "seeds": seeds, "interval": interval, "basis": basis}


def caption_text(name: str, parts: dict) -> str:
    """The caption of the figure ``name`` from its parts (:func:`set_caption`)."""
    entry = FIGURES.get(name)
    head = f"{entry.paper} Fig. {entry.number} (reproduced). " if entry and entry.number else ""
    return (f"{head}{parts['what']}. Basis: {parts['basis']}. Seeds: {parts['seeds']}. "
            f"Interval: {parts['interval']}.")


def caption_of(fig: Figure, png: Path) -> str | None:
    """The caption of ``fig`` saved as ``png`` (:func:`caption_text`); None when it was given none."""
    parts = getattr(fig, "_distlab_caption", None)
    if parts is None:
        return None
    notes = getattr(fig, "_distlab_notes", [])  # which lines coincide (plots.note_coinciding)
    return caption_text(png.stem, {**parts, "what": "; ".join([parts["what"], *notes])} if notes else parts)


def write_caption(text: str, png: Path) -> Path:
    """``<name>.caption.txt`` beside ``png``."""
    out = png.with_name(png.stem + ".caption.txt")
    with atomic_output(out) as tmp:
        Path(tmp).write_text(text + "\n")
    return out


def figure_caption(path: str | os.PathLike[str]) -> str:
    """The caption of the figure at ``path``: its ``<name>.caption.txt``, else the caption the PNG
    carries (a figure copied under another name keeps it); FileNotFoundError when it has none."""
    p = Path(path)
    side = p.with_name(p.stem + ".caption.txt")
    if side.exists():
        return side.read_text().strip()
    if p.suffix.lower() == ".png" and p.exists():
        from PIL import Image

        text = Image.open(p).text.get("distlab:caption")
        if text:
            return text.strip()
    raise FileNotFoundError(f"no caption for {p}: neither {side.name} nor one in the PNG")


def figure_number(path: str | os.PathLike[str]) -> tuple[int, int, str]:
    """The sort key of the figure at ``path`` in the papers' order: the paper (the registry's
    order: the baseline, P1..P4, the atlas), its place in that paper (the paper's figure number
    first), its name.  A figure not listed sorts last."""
    name = Path(path).stem
    entry = FIGURES.get(name)
    if entry is None:
        return (10**6, 0, name)
    from ..pipeline.paper import find

    return (find(entry.paper).order, entry.order, name)
