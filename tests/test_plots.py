"""Figures: one style, CI over seeds, provenance label, atomic save."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from distlab.plotting import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _runs() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        [{"s": s, "scheme": sch, "seed": seed, "step": step, "t": s + (sch == "pgc") + rng.normal(0, 0.1)}
         for s in (1, 2, 3) for sch in ("gc", "pgc") for seed in range(3) for step in range(2)]
    )


def test_line_with_ci_saves_png(tmp_path):
    ax = plots.line_with_ci(_runs(), x="s", y="t", hue="scheme")
    assert len(ax.lines) >= 2 and ax.collections  # one line per scheme, CI bands
    plots.label_provenance(ax.figure, "simulated", note="3 seeds")
    out = plots.save(ax.figure, tmp_path / "fig" / "line.png")
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000
    assert not plt.fignum_exists(ax.figure.number)  # closed
    assert [p.name for p in out.parent.iterdir()] == ["line.png"]


def test_line_with_ci_averages_within_seed():
    # Seed 0 logged three rows, seed 1 one row: each seed must count once, so
    # the line is at mean(mean(seed 0), seed 1) = (2 + 10) / 2 = 6, not the raw
    # row mean (1 + 2 + 3 + 10) / 4 = 4.
    df = pd.DataFrame({"x": [0, 0, 0, 0], "seed": [0, 0, 0, 1], "y": [1.0, 2.0, 3.0, 10.0]})
    ax = plots.line_with_ci(df, x="x", y="y", hue=None)
    assert ax.lines[0].get_ydata().tolist() == [6.0]
    raw = plots.line_with_ci(df, x="x", y="y", hue=None, units=None, ci=None)
    assert raw.lines[0].get_ydata().tolist() == [4.0]
    plt.close("all")


def test_bar_with_ci_and_formats(tmp_path):
    ax = plots.bar_with_ci(_runs(), x="s", y="t", hue="scheme")
    assert len(ax.patches) >= 6
    plots.save(ax.figure, tmp_path / "bar.pdf")
    assert (tmp_path / "bar.pdf").read_bytes().startswith(b"%PDF")
    fig, _ = plt.subplots()
    with pytest.raises(ValueError, match="suffix"):
        plots.save(fig, tmp_path / "bar.jpg")


def test_label_provenance_texts():
    fig, ax = plt.subplots()
    plots.label_provenance(fig, "simulated", note="5 seeds")
    plots.label_provenance(ax, "nccl")
    # the words go to the caption, nothing is drawn over the data
    assert plots.stamps(fig) == ["simulated (virtual clock); 5 seeds", "measured (wall clock, nccl)"]
    assert len(fig.texts) == 0 and len(ax.texts) == 0
    assert plots.provenance_text("gloo") == "measured (wall clock, gloo)"
    with pytest.raises(ValueError, match="unknown backend 'mpi'"):
        plots.label_provenance(fig, "mpi")
    plt.close(fig)


def test_figures_are_reproducible(tmp_path):
    paths = []
    for i in range(2):
        ax = plots.line_with_ci(_runs(), x="s", y="t", hue="scheme")
        plots.label_provenance(ax, "gloo")
        paths.append(plots.save(ax.figure, tmp_path / f"f{i}.svg"))
    assert paths[0].read_bytes() == paths[1].read_bytes()
