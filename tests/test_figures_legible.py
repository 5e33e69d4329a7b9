"""Every figure is legible, as far as the plotting helper can tell.

distlab.plots.save lays a figure out again when an axes title prints over another axes'
labels, moves each provenance box to a corner where it covers no data (else above the
axes), and records in the PNG what distlab.plots.legibility_problems still finds (no
title, an unlabelled axis, a text box over data, overlapping labels).  The unit tests
check the helper on figures built to fail; the end-to-end test reads every figure the
tiny workflow made.
"""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from distlab import plots


def _meta(path) -> tuple[list[str], list[str]]:
    text = Image.open(path).text
    return json.loads(text["distlab:legibility"]), json.loads(text["distlab:titles"])


def test_a_provenance_box_moves_off_the_data(tmp_path):
    plots.set_style()
    fig, ax = plt.subplots()
    x = np.linspace(0, 1, 50)
    ax.plot(x, 1 - x)  # runs through the lower-right corner's neighbourhood ...
    ax.plot(x, np.full_like(x, 0.02))  # ... and along the whole bottom edge
    ax.set(title="t", xlabel="x", ylabel="y")
    box = plots.label_provenance(ax, "simulated", "a long note that makes the box wide")
    assert plots.text_over_data(ax, box)  # where it starts: on the data
    plots.tidy(fig)
    assert not plots.text_over_data(ax, box)
    assert box.get_position()[1] > 0.5  # moved to the top
    out = plots.save(fig, tmp_path / "f.png")
    assert _meta(out) == ([], ["t"])


def test_a_box_with_no_free_corner_goes_above_the_axes(tmp_path):
    plots.set_style()
    fig, ax = plt.subplots()
    ax.bar(["a", "b", "c"], [1.0, 1.0, 1.0], width=1.0)  # bars fill the whole axes
    ax.set(title="bars", ylabel="y")
    box = plots.label_provenance(ax, "measured", "3 repeats")
    plots.tidy(fig)
    assert box.get_position()[1] > 1.0 and not plots.text_over_data(ax, box)
    assert plots.legibility_problems(fig) == []
    plt.close(fig)


def test_titles_over_labels_are_laid_out_again():
    plots.set_style()
    fig, axes = plt.subplots(2, 1, figsize=(4, 3))
    for ax in axes:
        ax.plot([0, 1], [0, 1])
        ax.set(title="a title", xlabel="an x label", ylabel="y")
    assert "an axes title prints over another axes' labels" in plots.legibility_problems(fig)
    plots.tidy(fig)
    assert plots.legibility_problems(fig) == []
    plt.close(fig)


def test_missing_titles_and_labels_are_reported():
    plots.set_style()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    problems = plots.legibility_problems(fig)
    assert any("no title" in p for p in problems)
    assert any("no x label" in p for p in problems) and any("no y label" in p for p in problems)
    plt.close(fig)


def test_coinciding_lines_are_found_and_named():
    df = pd.DataFrame({"x": [0, 1, 0, 1, 0, 1], "y": [1.0, 0.5, 1.0, 0.5, 1.0, 0.7],
                       "run": ["a", "a", "b", "b", "c", "c"]})
    assert plots.coinciding(df, "x", "y", "run") == [["a", "b"]]
    fig, ax = plt.subplots()
    ax.set_title("loss")
    note = plots.note_coinciding(ax, plots.coinciding(df, "x", "y", "run"))
    assert "a = b" in note and ax.get_title().startswith("loss\n")
    # drawn, a difference of a thousandth of the range is invisible: those coincide too
    near = df.assign(y=df["y"] + np.where(df["run"] == "b", 1e-4, 0.0))
    assert plots.coinciding(near, "x", "y", "run") == [["a", "b"]]
    assert plots.coinciding(near, "x", "y", "run", tol=1e-6) == []
    plt.close(fig)


@pytest.mark.slow
def test_every_figure_of_the_tiny_run_is_legible(tiny_workflow):
    work, r = tiny_workflow
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    figures = sorted((work / "paper/figures").glob("*.png"))
    assert len(figures) >= 15
    bad = {}
    for path in figures:
        problems, titles = _meta(path)
        if problems or not titles:
            bad[path.name] = problems or ["no title"]
    assert not bad, bad

    # the baseline says when its lines coincide (DGD's arithmetic is the same on both backends)
    steps = pd.read_csv(work / "results/baseline/steps.csv")
    steps["run"] = steps["method"] + "/" + steps["backend"]
    same = plots.coinciding(steps, "step", "loss", "run")
    titles = " ".join(_meta(work / "paper/figures/baseline_loss.png")[1])
    assert ("losses that lie on top of each other" in titles) == bool(same)
