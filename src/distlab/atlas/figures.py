"""The atlas figures: winner maps and time to target against bandwidth (labels say simulated/extrapolated)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ..plotting import plots  # noqa: E402
from .spec import TECHNIQUES  # noqa: E402

# one colour per technique, each told apart at a glance (tab20's light/dark pairs were not):
# tab10's ten, then navy, gold and dark red, taken in the catalogue's plot order
PALETTE = list(plt.get_cmap("tab10").colors) + ["#000080", "#ffd700", "#8b0000"]
COLORS = {t: PALETTE[TECHNIQUES.position(t) % len(PALETTE)] for t in TECHNIQUES}


def _true(v) -> bool:
    """A table's flag (True, "True", 1) as a bool."""
    return str(v).strip().lower() in ("true", "1", "1.0")


def _listed_apart(r) -> bool:
    """Whether a winners row lists techniques apart (no step ratio at the cell's distance)."""
    v = r.get("apart")
    return isinstance(v, str) and bool(v.strip())


def _winner_image(win: pd.DataFrame, rows: str, row_order, out: Path, title: str, ylabel: str) -> None:
    bws = np.sort(win["bandwidth_Bps"].unique())
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(row_order) + 2))
    drawn, ties, apart = set(), False, False  # the key names what the cells show, no more
    for i, rv in enumerate(row_order):
        g = win[win[rows] == rv].set_index("bandwidth_Bps")
        for j, b in enumerate(bws):
            if b not in g.index:
                continue
            r = g.loc[b]
            # facecolor, not color: with color= the hatch takes the face's colour and never shows
            cell = plt.Rectangle((j, i), 1, 1, facecolor=COLORS.get(r["winner"], "grey"), edgecolor="white",
                                 hatch="//" if _true(r["tie"]) else None)
            if _true(r["tie"]) and hasattr(cell, "set_hatchcolor"):
                dark = np.dot(matplotlib.colors.to_rgb(cell.get_facecolor()), (0.299, 0.587, 0.114)) < 0.35
                cell.set_hatchcolor("white" if dark else "0.1")
            ax.add_patch(cell)
            drawn.add(r["winner"])
            ties |= _true(r["tie"])
            if _listed_apart(r):  # techniques without a step ratio here: not ranked, named in winners.csv
                ax.plot(j + 0.5, i + 0.5, "o", ms=3, color="white", mec="0.1", mew=0.8)
                apart = True
    ax.set_xlim(0, len(bws))
    ax.set_ylim(0, len(row_order))
    ax.set_xticks(np.arange(len(bws))[:: max(1, len(bws) // 8)] + 0.5)
    ax.set_xticklabels([f"{b * 8 / 1e9:.3g}" for b in bws[:: max(1, len(bws) // 8)]])
    ax.set_xlabel("bandwidth (Gbit/s)")
    ax.set_yticks(np.arange(len(row_order)) + 0.5)
    ax.set_yticklabels([str(r) for r in row_order])
    ax.set_ylabel(ylabel)
    present = [t for t in TECHNIQUES if t in drawn] + sorted(drawn - set(TECHNIQUES))  # plot order
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS.get(t, "grey")) for t in present]
    labels = list(present)
    # the hatch keyed only where a drawn cell has it
    if ties:
        handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="0.1", hatch="//"))
        labels.append("hatched: a tie (the winner's\n95 % interval overlaps the next)")
    if apart:
        handles.append(plt.Line2D([], [], ls="", marker="o", ms=4, color="white", mec="0.1", mew=0.8))
        labels.append("dot: techniques without a step\nratio there, not ranked (listed\napart in winners.csv)")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, title="winner")
    ax.set_title(title, fontsize=9)
    plots.save(fig, out)


def winner_maps(winners_csv: Path, axis_order, out_strag: Path, out_size: Path) -> None:
    win = pd.read_csv(winners_csv)
    lat = np.sort(win["latency_s"].unique())
    lat = lat[len(lat) // 2]
    w = win[np.isclose(win["latency_s"], lat)]
    meas = w[w["label"] == "simulated"]
    P = meas["n_params"].max()
    N = meas["N"].max()
    sub = meas[(meas["n_params"] == P) & (meas["N"] == N)]
    _winner_image(sub, "straggler", [s for s in axis_order if s in set(sub["straggler"])], out_strag,
                  f"simulated: {int(P):,} parameters, N = {N}, latency {lat:g} s", "straggler model (severity up)")
    sz = w[(w["N"] == N) & (w["straggler"] == axis_order[0])].copy()
    sz["size"] = sz["n_params"].map(lambda p: f"{p:.3g}") + np.where(sz["label"] == "extrapolated", " (extrap.)", " (sim.)")
    order = [f"{p:.3g}" + (" (extrap.)" if lab == "extrapolated" else " (sim.)")
             for p, lab in sorted(set(zip(sz["n_params"], sz["label"])))]
    _winner_image(sz, "size", order, out_size, f"simulated (measured sizes) and extrapolated: N = {N}, no stragglers, latency {lat:g} s",
                  "parameters (sim. or extrap.)")


def time_vs_bandwidth(cells_csv: Path, crossovers_csv: Path, out: Path) -> None:
    c = pd.read_csv(cells_csv)
    c = c[(c["label"] == "simulated") & c["valid"]]
    lat = np.sort(c["latency_s"].unique())
    lat = lat[len(lat) // 2]
    P, N = c["n_params"].max(), c["N"].max()
    c = c[(c["n_params"] == P) & (c["N"] == N) & np.isclose(c["latency_s"], lat) & (c["straggler"] == "none")]
    fig, ax = plt.subplots(figsize=(9.5, 5))
    lowest = c["bandwidth_Bps"].min()
    late, curves = [], []
    for t, g in c.groupby("technique"):
        g = g[np.isfinite(g["time_s"])].sort_values("bandwidth_Bps")
        if g.empty:
            continue
        name = t
        if g["bandwidth_Bps"].iloc[0] > lowest * 1.01:  # a series that starts late says why
            late.append(t)
            name = f"{t} (from {g['bandwidth_Bps'].iloc[0] * 8:.2g} bit/s)"
        ax.plot(g["bandwidth_Bps"] * 8, g["time_s"], label=name, color=COLORS.get(t), lw=1.4)
        if late and late[-1] == t:  # its first point marked
            ax.plot(g["bandwidth_Bps"].iloc[:1] * 8, g["time_s"].iloc[:1], "o", ms=4, color=COLORS.get(t))
        ax.fill_between(g["bandwidth_Bps"] * 8, g["lo_s"], g["hi_s"], color=COLORS.get(t), alpha=0.08, lw=0)
        curves.append(g.assign(name=name))
    x = pd.read_csv(crossovers_csv)
    x = x[(x["n_params"] == P) & (x["N"] == N) & np.isclose(x["latency_s"], lat) & (x["straggler"] == "none")]
    for _, r in x.iterrows():
        ax.axvline(np.sqrt(r["bw_lo_Bps"] * r["bw_hi_Bps"]) * 8, color="k", ls=":", lw=0.8)
        ax.annotate(f"{r['a']}/{r['b']}", (np.sqrt(r["bw_lo_Bps"] * r["bw_hi_Bps"]) * 8, ax.get_ylim()[1]),
                    fontsize=7, rotation=90, va="top")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bandwidth (bit/s)")
    ax.set_ylabel("simulated time to target (s), mean and 95 % interval over seeds")
    title = f"simulated: {int(P):,} parameters, N = {N}, latency {lat:g} s, no stragglers; dotted: crossovers"
    if late:
        their = "their" if len(late) > 1 else "its"
        title += (f"\n{', '.join(late)}: no valid replay below {their} first point (dot): {their} recorded "
                  "arrivals do not hold on a slower network")
    ax.set_title(title, fontsize=9)
    if curves:  # lines hidden under others are named (in log time: the axis they are read on)
        plots.note_coinciding(ax, plots.coinciding(pd.concat(curves), "bandwidth_Bps", "time_s", "name", log=True),
                              wrap=110)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1),
              title="technique (band: 95 % interval\nover seeds, in its colour)", title_fontsize=7)
    plots.save(fig, out)
