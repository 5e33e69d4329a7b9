"""One seaborn style for every figure of the project.

Figures show the mean over seeds with a 95 % Student-t confidence band over
seeds (:func:`distlab.stats.t_interval`, the same interval as the tables and
the scorecard; deterministic, no resampling), and every figure states whether its
times are simulated (virtual clock) or measured (wall clock) via
:func:`label_provenance`.  Rendering uses the non-interactive Agg backend.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import matplotlib

if "matplotlib.pyplot" not in sys.modules:  # never switch an already chosen backend
    matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.text import Text  # noqa: E402

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
) -> Axes:
    """Line of the mean of ``y`` over ``units`` (seeds) with a t-interval band.

    Rows are first averaged within each (x, hue, style, unit) cell, so the band
    is a CI over seeds, not over repeated rows of one seed.  ``ci=None`` draws
    the mean only.
    """
    ax = _axes(ax)
    data = _per_seed(df, y, [x, hue, style, units]) if units else df
    sns.lineplot(
        data=data,
        x=x,
        y=y,
        hue=hue,
        hue_order=hue_order,
        style=style,
        errorbar=t_errorbar(ci / 100) if ci else None,
        marker="o",
        markersize=4,
        ax=ax,
    )
    return ax


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

    On an Axes it goes into the lower-right corner of the axes; on a Figure into
    the lower-right corner of the figure.  ``note`` (e.g. ``"5 seeds"``) is
    appended.
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
        return ax_or_fig.text(0.99, 0.02, text, transform=ax_or_fig.transAxes, **style)
    if isinstance(ax_or_fig, Figure):
        return ax_or_fig.text(0.99, 0.01, text, **style)
    raise TypeError(f"expected a matplotlib Axes or Figure, got {type(ax_or_fig).__name__}")


def save(fig: Figure, path: str | os.PathLike[str]) -> Path:
    """Save ``fig`` atomically (format from the suffix: .png, .pdf, .svg) and close it.

    Creation dates are omitted from PDF/SVG metadata so reruns are identical.
    """
    target = Path(path)
    fmt = SUFFIXES.get(target.suffix.lower())
    try:
        if fmt is None:
            raise ValueError(f"unsupported figure suffix {target.suffix!r}; use one of {sorted(SUFFIXES)}")
        metadata = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}.get(fmt)
        with atomic_output(target) as tmp:
            fig.savefig(tmp, format=fmt, dpi=DPI, bbox_inches="tight", metadata=metadata)
    finally:
        plt.close(fig)
    return target
