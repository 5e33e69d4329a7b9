"""Every figure is legible, as far as the plotting helper can tell.

distlab.plotting.plots.save names the figure's clock in its title, moves a legend off the data,
lays a figure out again when an axes title prints over another axes' labels (the provenance
goes to the caption, not over the data), lifts the figure's title above what it would print
over, and records in the PNG
what distlab.plotting.plots.legibility_problems still finds (no title, a title without its clock,
an unlabelled axis, a text box or a legend over data, overlapping labels).  The unit tests
check the helper on figures built to fail; the end-to-end test reads every figure the
tiny workflow made.
"""

from __future__ import annotations

import json
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from conftest import ROOT, write_local_figure_inputs

from distlab.plotting import captions, plots


def _meta(path) -> tuple[list[str], list[str]]:
    text = Image.open(path).text
    return json.loads(text["distlab:legibility"]), json.loads(text["distlab:titles"])


def test_titles_over_labels_are_laid_out_again():
    plots.set_style()
    fig, axes = plt.subplots(2, 1, figsize=(4, 3))
    for ax in axes:
        ax.plot([0, 1], [0, 1])
        ax.set(title="a title (simulated)", xlabel="an x label", ylabel="y")
    assert "an axes title prints over another axes' labels" in plots.legibility_problems(fig)
    plots.tidy(fig)
    assert plots.legibility_problems(fig) == []
    plt.close(fig)


def test_labels_and_boxes_over_each_other_are_reported():
    """A two-row figure whose long y labels run into each other and whose lower text box sits
    on the upper panel's labels: both named; the layout that gives them room has none."""
    plots.set_style()
    fig, axes = plt.subplots(2, 1, figsize=(4, 3.2))
    for ax in axes:
        ax.plot([0, 1], [0, 1])
        ax.set(title="t (simulated)", xlabel="step",
               ylabel="a y label far longer than the height of its own axes")
    axes[1].text(1.0, 1.01, "a text box above the lower axes", transform=axes[1].transAxes,
                 ha="right", va="bottom", bbox={"boxstyle": "round"})
    problems = plots.legibility_problems(fig)
    assert "axes 0's y label prints over axes 1's y label" in problems
    assert "axes 1's text box 'a text box above the lower axe' prints over the tick labels of axes 0" in problems
    plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    for ax in axes:
        ax.plot([0, 1], [0, 1])
        ax.set(title="t (simulated)", xlabel="step", ylabel="a short y label")
    assert plots.legibility_problems(fig) == []
    plt.close(fig)


def test_tick_labels_outside_the_view_limits_are_not_counted():
    """Matplotlib keeps text for ticks beyond the view limits; they are not drawn, so a title
    over where they would be is no collision."""
    plots.set_style()
    fig, axes = plt.subplots(2, 1, figsize=(4, 4))
    for ax in axes:
        ax.plot([0, 1], [0, 1.03])
        ax.set(xlabel="x", ylabel="y")
        ax.set_yticks([-0.5, 0, 0.5, 1.0, 1.5])  # -0.5 and 1.5 lie outside the view
        ax.set_ylim(-0.05, 1.05)
    fig.suptitle("a title (simulated)")
    plots.tidy(fig)
    assert plots.legibility_problems(fig) == []
    plt.close(fig)


def test_a_coinciding_note_goes_to_the_caption_with_names_whole(tmp_path):
    """Which lines coincide is said in the caption (with the panel's title), not over the figure."""
    plots.set_style()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    ax.set(title="s = 1 (simulated)", xlabel="x", ylabel="y")
    note = plots.note_coinciding(ax, [["GC-FR", "GC-CR", "IS-GC-FR", "IS-GC-CR", "DGD"]], "losses", wrap=40)
    assert note == "losses that lie on top of each other: GC-FR = GC-CR = IS-GC-FR = IS-GC-CR = DGD"
    assert ax.get_title() == "s = 1 (simulated)"
    plots.caption(fig, "A line", 2, plots.BAND, "simulated")
    out = plots.save(fig, tmp_path / "f.png")
    assert f"A line; s = 1 (simulated): {note}. Basis" in captions.figure_caption(out)


def test_runs_on_a_time_grid_are_never_extrapolated():
    """A run evaluated once (at its end) stays one point, not a flat line back to zero; the
    grid spans only what every run of the group covers."""
    from distlab.plotting.util import on_grid
    df = pd.DataFrame({"method": ["a", "a", "a", "a", "b"], "seed": [0, 0, 1, 1, 0],
                       "time": [1.0, 10.0, 2.0, 8.0, 54.6], "val_loss": [5.0, 2.0, 4.0, 2.5, 1.98]})
    g = on_grid(df, "time", "val_loss", ["method", "seed"], points=5)
    a = g[g.method == "a"]
    assert a.time.min() == 2.0 and a.time.max() == 8.0  # the latest start, the earliest end
    b = g[g.method == "b"]
    assert len(b) == 1 and b.time.iloc[0] == 54.6 and b.val_loss.iloc[0] == 1.98
    apart = pd.DataFrame({"method": ["c"] * 4, "seed": [0, 0, 1, 1], "time": [0.0, 1.0, 2.0, 3.0],
                          "val_loss": [1.0, 0.9, 0.8, 0.7]})
    assert on_grid(apart, "time", "val_loss", ["method", "seed"]).empty


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
    assert "a = b" in note and ax.get_title() == "loss"
    # drawn, a difference of a thousandth of the range is invisible: those coincide too
    near = df.assign(y=df["y"] + np.where(df["run"] == "b", 1e-4, 0.0))
    assert plots.coinciding(near, "x", "y", "run") == [["a", "b"]]
    assert plots.coinciding(near, "x", "y", "run", tol=1e-6) == []
    plt.close(fig)


def _lines(ax, n=4):
    x = np.linspace(0, 1, 40)
    for k in range(n):
        ax.plot(x, 0.2 + 0.6 * x + 0.05 * k, label=f"run {k}")


def test_a_legend_over_data_moves_to_a_free_corner():
    plots.set_style()
    fig, ax = plt.subplots()
    _lines(ax)
    ax.legend(loc="center")  # the middle is where the lines are
    ax.set(title="t (simulated)", xlabel="x (s)", ylabel="y")
    assert plots.legend_over_data(ax)
    assert "axes 0 ('t (simulated)'): the legend covers data" in plots.legibility_problems(fig)
    plots.tidy(fig)
    assert not plots.legend_over_data(ax) and plots.legibility_problems(fig) == []
    plt.close(fig)


def test_a_best_placed_legend_is_fixed_where_the_check_saw_it(tmp_path):
    """loc="best" is chosen again at every draw; savefig's tight box draws once more, so the
    legend the check saw clear of the data could be drawn elsewhere (DeMo's real-vs-
    simulated bars).  tidy fixes it to a named corner that is clear, and it stays there."""
    plots.set_style()
    fig, ax = plt.subplots()
    _lines(ax)
    ax.legend()  # "best"
    ax.set(title="t (simulated)", xlabel="x (s)", ylabel="y")
    plots.tidy(fig)
    legend = ax.get_legend()
    assert legend._loc != 0 and not plots.legend_over_data(ax)
    where = legend._loc
    fig.savefig(tmp_path / "f.png", bbox_inches="tight")
    assert legend._loc == where and not plots.legend_over_data(ax)
    plt.close(fig)


def test_bars_that_fill_every_corner_make_room_above_them_for_the_legend():
    plots.set_style()
    fig, ax = plt.subplots()
    for i in range(6):
        ax.bar(np.arange(3) + i * 0.14, [3.7, 3.5, 3.9], width=0.14, label=f"m{i}")
    ax.legend(loc="lower left", ncol=2)
    ax.set(title="bars (simulated)", xlabel="s", ylabel="time (simulated s)")
    top = ax.get_ylim()[1]
    assert plots.legend_over_data(ax)
    plots.tidy(fig)
    assert not plots.legend_over_data(ax) and ax.get_ylim()[1] > top
    assert min(p.get_height() for p in ax.patches) > 3  # the data are unchanged
    plt.close(fig)


def test_a_legend_with_no_room_inside_goes_beside_the_rightmost_axes():
    plots.set_style()
    fig, axes = plt.subplots(1, 2)
    for ax in axes:
        ax.bar(["a", "b", "c"], [1.0, 1.0, 1.0], width=1.0, label="bars")
        ax.set_yscale("log")
        ax.set_ylim(1e-3, 1.0)
        ax.bar(["a", "b", "c"], [1e-3, 1e-3, 1e-3], bottom=1e-3, width=1.0, label="low")
        for _ in range(6):  # a legend taller than any room the range could make
            ax.bar(["a"], [1e-3], width=1.0, label="a bar with a long label")
        ax.legend(loc="lower left")
        ax.set(title="t (measured)", ylabel="y")
    lims = axes[1].get_ylim()
    plots.tidy(fig)
    assert not plots.legend_over_data(axes[1]) and axes[1].get_ylim() == lims
    assert axes[1].get_legend().get_bbox_to_anchor() is not axes[1].bbox  # beside it
    plt.close(fig)


def test_a_hand_placed_provenance_text_gives_the_title_its_clock():
    plots.set_style()
    fig, ax = plt.subplots()
    _lines(ax, 1)
    ax.set(title="loss", xlabel="step", ylabel="loss")
    fig.text(0.01, 0.01, "[gloo] " + plots.provenance_text("gloo") + "; [simulated] "
             + plots.provenance_text("simulated") + "; no times plotted")
    fig.suptitle("DGD vs SGD")
    plots.tidy(fig)
    assert plots.titles(fig)[0] == "DGD vs SGD (simulated and measured)"
    plt.close(fig)


def test_a_legend_anchored_outside_is_left_where_its_figure_put_it():
    plots.set_style()
    fig, ax = plt.subplots()
    _lines(ax)
    leg = ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))
    ax.set(title="t (measured)", xlabel="x", ylabel="y")
    plots.tidy(fig)
    assert ax.get_legend() is leg and leg.get_bbox_to_anchor() is not ax.bbox
    assert not plots.legend_over_data(ax)
    plt.close(fig)


def test_every_title_gets_its_clock():
    plots.set_style()
    # a suptitle takes every clock of the figure's boxes
    fig, axes = plt.subplots(1, 2)
    for ax, clock in zip(axes, ("simulated", "gloo")):
        _lines(ax, 1)
        ax.set(title="panel", xlabel="x", ylabel="y")
        plots.label_provenance(ax, clock)
    fig.suptitle("Fig. 9")
    assert "no clock in the title (simulated, measured or extrapolated)" in plots.legibility_problems(fig)
    plots.tidy(fig)
    assert plots.titles(fig)[0] == "Fig. 9 (simulated and measured)" and plots.clock_in_titles(fig)
    plt.close(fig)
    # no suptitle: each axes title its own box's clock, else the figure's
    fig, axes = plt.subplots(1, 3, figsize=(10, 4))
    for ax in axes:
        _lines(ax, 1)
        ax.set(xlabel="x", ylabel="y")
    axes[0].set_title("a")
    axes[1].set_title("b, measured already")
    axes[2].set_title("c")
    plots.label_provenance(axes[0], "extrapolated")
    plots.label_provenance(fig, "simulated")
    plots.tidy(fig)
    assert [a.get_title() for a in axes] == ["a (extrapolated)", "b, measured already", "c (simulated)"]
    assert plots.legibility_problems(fig) == []
    plt.close(fig)
    # without any provenance the title cannot know its clock: reported, not invented
    fig, ax = plt.subplots()
    _lines(ax, 1)
    ax.set(title="loss", xlabel="step", ylabel="loss")
    plots.tidy(fig)
    assert ax.get_title() == "loss"
    assert "no clock in the title (simulated, measured or extrapolated)" in plots.legibility_problems(fig)
    plt.close(fig)


def test_every_figure_of_the_tiny_run_is_legible(tiny_workflow):
    work, r = tiny_workflow
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    figures = sorted((work / "paper/figures").glob("*.png"))
    assert len(figures) >= 15
    bad = {}
    clock = re.compile(r"\b(simulated|measured|extrapolated)\b", re.I)
    for path in figures:
        problems, titles = _meta(path)
        if problems or not titles:
            bad[path.name] = problems or ["no title"]
        # every title carries its clock: the figure's title, else every axes title
        elif not clock.search(titles[0]) and not all(clock.search(x) for x in titles):
            bad[path.name] = [f"no clock in {titles}"]
    assert not bad, bad

    # the baseline says when its lines coincide (DGD's arithmetic is the same on both backends)
    steps = pd.read_csv(work / "results/baseline/steps.csv")
    steps["run"] = steps["method"] + "/" + steps["backend"]
    same = plots.coinciding(steps, "step", "loss", "run")
    caption = captions.figure_caption(work / "paper/figures/baseline_loss.png")
    assert ("losses that lie on top of each other" in caption) == bool(same)


# ------------------------------------------------------------------ ticks and intervals

def _two_seeds_far_apart() -> pd.DataFrame:
    # two seeds a long way apart: the t interval of the mean (t = 12.7 at one degree of
    # freedom) reaches below zero on the linear scale
    return pd.DataFrame({"m": ["a", "a", "b", "b"], "seed": [0, 1, 0, 1], "t": [0.0216, 0.0272, 0.010, 0.011]})


def _lowest_error_bar(ax) -> float:
    return min(float(np.nanmin(ln.get_ydata())) for ln in ax.lines if len(ln.get_ydata()))


def test_a_positive_quantitys_interval_never_reaches_below_zero():
    d = _two_seeds_far_apart()
    linear = plots.bar_with_ci(d, "m", "t", None)
    assert _lowest_error_bar(linear) < 0  # the symmetric interval does
    assert "an error bar reaches below zero under positive bars" in " ".join(plots.legibility_problems(linear.figure))
    ax = plots.bar_with_ci(d, "m", "t", None, positive=True)
    assert _lowest_error_bar(ax) == 0.0  # cut at zero
    assert ax.patches[0].get_height() == pytest.approx(0.0244)  # the mean, as in the tables
    full = plots.t_errorbar(0.95)([0.0216, 0.0272])
    assert plots.clipped_t_errorbar(0.95)([0.0216, 0.0272]) == (0.0, full[1])  # the top unchanged
    assert plots.clipped_t_errorbar(0.95)([1.0, 1.1, 1.2]) == plots.t_errorbar(0.95)([1.0, 1.1, 1.2])
    with pytest.raises(ValueError, match="negative"):
        plots.clipped_t_errorbar()([-1.0, 1.0])
    plt.close("all")


def test_a_short_log_axis_gets_plain_ticks_and_a_bare_one_is_reported():
    def loss_axes():
        fig, ax = plt.subplots()
        ax.plot(np.arange(10), np.linspace(2.2, 0.6, 10))
        ax.set(yscale="log", xlabel="step", ylabel="loss", title="x (simulated)")
        return fig, ax

    fig, ax = loss_axes()
    assert any("fewer than three plain numbers" in p for p in plots.legibility_problems(fig))
    fig, ax = loss_axes()
    plots.log_ticks(ax)
    assert plots.legibility_problems(fig) == []
    shown = [t.get_text() for t in ax.get_yticklabels() if t.get_visible() and t.get_text()]
    lo, hi = ax.get_ylim()
    shown = [s for s, v in zip(shown, ax.get_yticks()) if lo <= v <= hi]
    assert len(shown) >= 3 and all(re.fullmatch(r"[\d.]+", s) for s in shown), shown
    plt.close("all")
    # a span under a factor of two, where no 1-1.5-2-3-5-7 mantissa may fall: evenly spaced numbers
    fig, ax = plt.subplots()
    ax.plot(np.arange(10), np.linspace(2.31, 2.25, 10))
    ax.set(yscale="log", xlabel="step", ylabel="loss", title="x (simulated)")
    plots.log_ticks(ax)
    assert plots.legibility_problems(fig) == []
    plt.close(fig)


def test_overlapping_tick_labels_are_reported_and_turned_by_save(tmp_path):
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar([f"category {i}" for i in range(6)], np.arange(1, 7))
    ax.set(ylabel="count", title="x (measured)")
    assert "x tick labels overlap" in " ".join(plots.legibility_problems(fig))
    out = plots.save(fig, tmp_path / "crowded.png")
    assert _meta(out)[0] == []


def test_the_four_figures_read_last_round_are_legible(tmp_path):
    """demo_real and local_throughput_memory (intervals of times and sizes), local_nonident
    (its clock and its toy's label) and pgc_fig8 (ticks on a short log axis), from inputs
    shaped like the workflow's, with two far-apart seeds."""
    from distlab.demo.figures import real_figure
    from distlab.local import figures as lf
    from distlab.pgc import figures as pf

    real = pd.DataFrame([{"method": m, "n_workers": n, "seed": s, "step_time_median": v, "backend": "gloo"}
                         for m, n, vals in [("adamw", 2, (0.0093, 0.0109)), ("demo", 4, (0.0216, 0.0272))]
                         for s, v in enumerate(vals)])
    sim = pd.DataFrame({"method": ["adamw"] * 2, "n_workers": [2, 2], "seed": [0, 1], "step_time_median": [0.0107, 0.0108]})
    real.to_csv(tmp_path / "real.csv", index=False)
    sim.to_csv(tmp_path / "sim.csv", index=False)
    write_local_figure_inputs(tmp_path)
    steps = pd.DataFrame([{"scheme": sch, "s": s, "delay_mean": 1.0, "seed": seed, "step": step,
                           "train_loss_full": 2.2 * np.exp(-1.3 * (step / 150) ** 2) * (1 + 0.01 * seed)}
                          for sch, s in [("dgd", 0), ("gc-fr", 1), ("pgc-fr", 1)] for seed in range(2)
                          for step in range(0, 151, 25)])

    real_figure(tmp_path / "real.csv", tmp_path / "sim.csv", tmp_path / "demo_real.png")
    lf.throughput_memory(tmp_path / "tp.csv", tmp_path / "local_throughput_memory.png")
    lf.nonident_figure(tmp_path / "nonident.json", tmp_path / "local_nonident.png")
    pf.fig8(steps, tmp_path / "pgc_fig8.png", {})
    for name in ("demo_real", "local_throughput_memory", "local_nonident", "pgc_fig8"):
        problems, titles = _meta(tmp_path / f"{name}.png")
        assert problems == [], (name, problems)
        assert re.search(r"\b(simulated|measured)\b", titles[0]), (name, titles)
    # the intervals of the times and sizes, drawn again here, stay at or above zero
    ax = plots.bar_with_ci(real.assign(t=real.step_time_median), "method", "t", None, positive=True)
    assert _lowest_error_bar(ax) >= 0
    nonident_titles = " ".join(_meta(tmp_path / "local_nonident.png")[1])
    assert "no timing" in nonident_titles and "wall clock" not in nonident_titles
    plt.close("all")


@pytest.mark.parametrize("scale", [0.013, 0.03, 0.1, 0.7, 1.0])
def test_demo_loss_against_time_is_legible_whatever_the_measured_times(tmp_path, scale):
    """DeMo's loss-against-time panels (two networks x two worker counts, six methods' bands)
    from a tiny run's evaluation rows (tests/data/demo_tiny_steps.csv), their times scaled:
    the tiny run's measured compute gives each run other times, and with a legend and a clock
    box inside the panels, at these scales a title printed under a label or the legend over
    the bands.  One legend and one clock title, outside the panels."""
    from distlab.demo.figures import figure

    steps = pd.read_csv(ROOT / "tests/data/demo_tiny_steps.csv")
    steps[["time_datacenter", "time_wan"]] *= scale
    steps.to_csv(tmp_path / "steps.csv", index=False)
    nets = {"datacenter": {"label": "100 Gbit/s datacenter"}, "wan": {"label": "1 Gbit/s WAN, 20 ms"}}
    figure("loss_time", tmp_path / "steps.csv", tmp_path / "t.png", nets, "2 seeds; compute measured")
    problems, titles = _meta(tmp_path / "t.png")
    assert problems == [] and "simulated" in titles[0], (problems, titles)


# ------------------------------------------------------------------ bands and keys

def test_a_band_not_in_its_lines_colour_is_reported():
    """fill_between without a colour takes the next colour of the fills' own cycle, not its
    line's (placement_curves' bands): the band reads as another series.  The same band in its
    line's colour passes."""
    plots.set_style()
    x = np.linspace(1, 10, 20)
    fig, (bad, good) = plt.subplots(1, 2)
    for ax in (bad, good):
        ax.plot(x, x, color="C3", label="a")
        ax.set(title="t (simulated)", xlabel="x", ylabel="y")
    bad.fill_between(x, x - 1, x + 1, alpha=0.2)  # C0: the first colour of the fills' cycle
    good.fill_between(x, x - 1, x + 1, color="C3", alpha=0.2)
    assert len(plots.band_colour_problems(bad)) == 1 and "(a)" in plots.band_colour_problems(bad)[0]
    assert plots.band_colour_problems(good) == []
    assert any("band's colour" in p for p in plots.legibility_problems(fig))
    plt.close(fig)
    # seaborn's bands (line_with_ci) are in their lines' colours
    df = pd.DataFrame({"x": np.tile(np.arange(5), 6), "y": np.arange(30.0) % 7, "m": np.repeat(["p", "q"], 15),
                       "seed": np.tile(np.repeat([0, 1, 2], 5), 2)})
    ax = plots.line_with_ci(df, "x", "y", "m")
    assert plots.band_colour_problems(ax) == []
    plt.close("all")


def test_a_legend_entry_with_nothing_drawn_is_reported():
    """A key that promises what no axes draws (a hatch no bar has, a colour no line has) is
    reported; keys for what is drawn, and a grey key for a drawn dash pattern, are not."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    plots.set_style()
    fig, (lines, bars) = plt.subplots(1, 2)
    lines.plot([0, 1], [0, 1], color="C0")
    lines.plot([0, 1], [1, 0], color="C0", linestyle="--")
    lines.legend(handles=[Line2D([], [], color="C0", label="drawn"),
                          Line2D([], [], color="0.3", linestyle="--", label="dashed: control"),
                          Line2D([], [], color="C3", label="never drawn")])
    bars.bar(["a", "b"], [1, 2], color="C2")
    bars.legend(handles=[Patch(facecolor="C2", label="winner"),
                         Patch(facecolor="white", edgecolor="k", hatch="//", label="hatched: a tie")])
    for ax in (lines, bars):
        ax.set(title="t (simulated)", xlabel="x", ylabel="y")
    found = plots.absent_legend_entries(fig)
    assert found == ["legend entry 'never drawn' has nothing drawn in its colour or style",
                     "legend entry 'hatched: a tie' has nothing drawn in its colour or style"], found
    assert all(p in plots.legibility_problems(fig) for p in found)
    # a Rectangle given color=: its hatch takes the face's colour and does not show (the atlas's ties)
    hidden = bars.add_patch(plt.Rectangle((1.6, 0), 0.8, 1.5, color="C2", hatch="//"))
    assert "legend entry 'hatched: a tie' has nothing drawn in its colour or style" in plots.absent_legend_entries(fig)
    hidden.remove()
    bars.bar(["c"], [1.5], facecolor="C2", edgecolor="k", hatch="//")  # now a tie is drawn
    lines.plot([0, 1], [0.5, 0.5], color="C3")
    assert plots.absent_legend_entries(fig) == []
    plt.close(fig)


def test_a_legend_entry_for_a_line_out_of_view_is_reported():
    """A marker line drawn outside the axes' limits (pgc_regime's mark left of its range) is not
    drawn for a reader: its legend entry is reported."""
    plots.set_style()
    fig, ax = plt.subplots()
    ax.plot([1, 2], [1, 2], color="C0", label="data")
    ax.axvline(0.5, color="C1", ls="--", label="a mark")
    ax.set(xlim=(0.9, 2.1), title="t (simulated)", xlabel="x", ylabel="y")
    ax.legend()
    assert plots.absent_legend_entries(fig) == ["legend entry 'a mark' has nothing drawn in its colour or style"]
    ax.set_xlim(0.4, 2.1)
    assert plots.absent_legend_entries(fig) == []
    plt.close(fig)
