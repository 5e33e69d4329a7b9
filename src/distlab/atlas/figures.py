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


def bit_rate(bits_per_s: float) -> str:
    """A round bit rate as a reader writes it: 10 Mbit/s, 1 Gbit/s, 100 Gbit/s."""
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits_per_s >= scale:
            return f"{bits_per_s / scale:g} {unit}"
    return f"{bits_per_s:g} bit/s"


def decade_ticks(bws) -> tuple[list[float], list[str]]:
    """Ticks at the round bit rates (powers of ten) within a grid of cells whose bandwidths
    (bytes a second, increasing) are log-spaced: each placed where it falls between the cells'
    centres on the log scale, so the labels read 10 Mbit/s .. 100 Gbit/s rather than the cells'
    own values (0.0909 Gbit/s)."""
    bits = np.log10(np.asarray(bws, dtype=float) * 8)
    centres = np.arange(len(bits)) + 0.5
    if len(bits) < 2:
        return list(centres), [bit_rate(10 ** b) for b in bits]
    decades = np.arange(np.ceil(bits[0] - 1e-9), np.floor(bits[-1] + 1e-9) + 1)
    return [float(np.interp(d, bits, centres)) for d in decades], [bit_rate(10 ** d) for d in decades]


def _true(v) -> bool:
    """A table's flag (True, "True", 1) as a bool."""
    return str(v).strip().lower() in ("true", "1", "1.0")


def _listed_apart(r) -> bool:
    """Whether a winners row lists techniques apart (no step ratio at the cell's distance)."""
    v = r.get("apart")
    return isinstance(v, str) and bool(v.strip())


def _winner_image(win: pd.DataFrame, rows: str, row_order, out: Path, title: str, ylabel: str) -> None:
    bws = np.sort(win["bandwidth_Bps"].unique())
    plots.set_style()
    fig, ax = plt.subplots(figsize=(plots.PAGE, 0.3 * len(row_order) + 1.6), layout="constrained")
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
    ticks, names = decade_ticks(bws)
    ax.set_xticks(ticks)
    ax.set_xticklabels(names)
    ax.grid(False)
    ax.set_xlabel("bandwidth (cells on a log grid)")
    ax.set_yticks(np.arange(len(row_order)) + 0.5)
    ax.set_yticklabels([str(r) for r in row_order])
    ax.set_ylabel(ylabel)
    present = [t for t in TECHNIQUES if t in drawn] + sorted(drawn - set(TECHNIQUES))  # plot order
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS.get(t, "grey")) for t in present]
    labels = [plots.name(t) for t in present]
    # the hatch keyed only where a drawn cell has it
    if ties:
        handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="0.1", hatch="//"))
        labels.append("hatched: a tie (the winner's\n95 % interval overlaps\nthe next)")
    if apart:
        handles.append(plt.Line2D([], [], ls="", marker="o", ms=4, color="white", mec="0.1", mew=0.8))
        labels.append("dot: techniques without\na step ratio there, not\nranked (listed apart)")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), title="winner", frameon=False)
    ax.set_title(title.split(": ")[0])
    extrapolated = "extrap" in title
    plots.label_provenance(fig, "simulated")
    if extrapolated:
        plots.label_provenance(fig, "extrapolated")
    plots.caption(fig, f"The technique that reaches the target loss first in each cell ({ylabel} against bandwidth); "
                  f"{title}", _seeds(win), "the winner's 95 % Student-t interval over seeds: hatched where it "
                  "overlaps the next technique's (a tie)", "simulated cluster (virtual clock)"
                  + ("; rows marked extrap. extrapolated from measurements" if extrapolated else ""))
    plots.save(fig, out)


def _seeds(df: pd.DataFrame) -> str:
    """The seeds a map's cells average, from its columns."""
    for col in ("seeds", "n_seeds"):
        if col in df and df[col].notna().any():
            lo, hi = int(df[col].min()), int(df[col].max())
            return f"{lo} seeds a cell" if lo == hi else f"{lo}-{hi} seeds a cell"
    return "the map's seeds (each cell's count in the map's table)"


def param_count(p: float) -> str:
    """A parameter count as a reader writes it: 7,920; 22,000; 1 M; 100 M; 1 B (three figures)."""
    p = float(p)
    if p >= 1e9:
        return f"{p / 1e9:.3g} B"
    if p >= 1e6:
        return f"{p / 1e6:.3g} M"
    return f"{float(f'{p:.3g}'):,.0f}"


def straggler_label(name: str, model: dict | None) -> str:
    """A straggler model as a reader names it (the config's definition), not its key."""
    m = dict(model or {})
    kind = m.get("model")
    ms = (lambda s: f"{float(s) * 1e3:g} ms")
    if kind == "none":
        return "none"
    if kind in ("exponential", "pareto") and "mean" in m:
        return f"{kind}, mean {ms(m['mean'])}" + (f", shape {m['shape']:g}" if kind == "pareto" and "shape" in m else "")
    if kind == "persistent" and "slowdown" in m:
        return f"one worker {float(m['slowdown']):g}x slower"
    if kind == "dead":
        return "one worker dead"
    return name


def winner_maps(winners_csv: Path, axis_order, out_strag: Path, out_size: Path) -> None:
    """``axis_order``: the straggler models in order of severity, their names or a mapping of name
    to definition (then labelled by :func:`straggler_label`)."""
    defs = dict(axis_order) if isinstance(axis_order, dict) else {}
    axis_order = list(axis_order)
    win = pd.read_csv(winners_csv)
    lat = np.sort(win["latency_s"].unique())
    lat = lat[len(lat) // 2]
    w = win[np.isclose(win["latency_s"], lat)]
    meas = w[w["label"] == "simulated"]
    P = meas["n_params"].max()
    N = meas["N"].max()
    sub = meas[(meas["n_params"] == P) & (meas["N"] == N)]
    sub = sub.assign(straggler=sub["straggler"].map(lambda s: straggler_label(s, defs.get(s)) if s in defs else s))
    order = [straggler_label(s, defs[s]) if s in defs else s for s in axis_order]
    _winner_image(sub, "straggler", [s for s in order if s in set(sub["straggler"])], out_strag,
                  f"Winner by straggler model and bandwidth (simulated): {int(P):,} parameters, N = {N}, latency "
                  f"{lat:g} s", "straggler model (severity up)")
    sz = w[(w["N"] == N) & (w["straggler"] == axis_order[0])].copy()
    sz["size"] = sz["n_params"].map(param_count) + np.where(sz["label"] == "extrapolated", " (extrap.)", " (sim.)")
    order = [param_count(p) + (" (extrap.)" if lab == "extrapolated" else " (sim.)")
             for p, lab in sorted(set(zip(sz["n_params"], sz["label"])))]
    _winner_image(sz, "size", order, out_size, f"Winner by model size and bandwidth: N = {N}, no stragglers, latency "
                  f"{lat:g} s; sizes simulated (sim.) or extrapolated (extrap.)", "parameters")


def _panels() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The panels of time_vs_bandwidth, from the techniques registry: the synchronous ones, the
    gradient codes (a coding scheme that is not an ignore-stragglers one) and those that ignore
    stragglers (the rest of the master kind); DDP, the reference, in every panel (at most six
    lines a panel with today's registry)."""
    from ..techniques.catalogue import CODED, TECHNIQUES

    ref = next(iter(TECHNIQUES))
    coded = tuple(n for n in TECHNIQUES if n in CODED and not CODED[n].startswith("is-"))
    groups = (("synchronous", tuple(n for n, s in TECHNIQUES.items() if s.kind == "sync")),
              ("gradient coding", coded),
              ("ignoring stragglers", tuple(n for n, s in TECHNIQUES.items() if s.kind == "master" and n not in coded)))
    return tuple((title, (ref, *(n for n in names if n != ref))) for title, names in groups)


PANELS = _panels()


def _bandwidth_panel(ax, c: pd.DataFrame, techniques, lowest: float) -> list[pd.DataFrame]:
    """One panel's techniques: simulated time to target against bandwidth, mean and band."""
    curves = []
    for t in techniques:
        g = c[(c["technique"] == t) & np.isfinite(c["time_s"])].sort_values("bandwidth_Bps")
        if g.empty:
            continue
        name = plots.name(t)
        if g["bandwidth_Bps"].iloc[0] > lowest * 1.01:  # a series that starts late: its first point marked
            name = f"{name} (from {g['bandwidth_Bps'].iloc[0] * 8:.2g} bit/s)"
            ax.plot(g["bandwidth_Bps"].iloc[:1] * 8, g["time_s"].iloc[:1], "o", ms=4, color=COLORS.get(t))
        ax.plot(g["bandwidth_Bps"] * 8, g["time_s"], label=name, color=COLORS.get(t), lw=1.2)
        ax.fill_between(g["bandwidth_Bps"] * 8, g["lo_s"], g["hi_s"], color=COLORS.get(t), alpha=0.2, lw=0)
        curves.append(g.assign(name=name))
    return curves


def time_vs_bandwidth(cells_csv: Path, crossovers_csv: Path, out: Path) -> None:
    c = pd.read_csv(cells_csv)
    c = c[(c["label"] == "simulated") & c["valid"]]
    lat = np.sort(c["latency_s"].unique())
    lat = lat[len(lat) // 2]
    P, N = c["n_params"].max(), c["N"].max()
    c = c[(c["n_params"] == P) & (c["N"] == N) & np.isclose(c["latency_s"], lat) & (c["straggler"] == "none")]
    known = {t for _, ts in PANELS for t in ts}
    panels = [(title, ts) for title, ts in PANELS] + [("others", tuple(sorted(set(c["technique"]) - known)))]
    panels = [(title, ts) for title, ts in panels if set(ts) & set(c["technique"]) - {"ddp"}]
    fig, axes = plt.subplots(len(panels), 1, figsize=(plots.PAGE, 2.1 * len(panels) + 0.6), squeeze=False,
                             sharex=True, sharey=True, layout="constrained")
    x = pd.read_csv(crossovers_csv)
    x = x[(x["n_params"] == P) & (x["N"] == N) & np.isclose(x["latency_s"], lat) & (x["straggler"] == "none")]
    lowest = c["bandwidth_Bps"].min()
    for ax, (title, techniques) in zip(axes[:, 0], panels):
        curves = _bandwidth_panel(ax, c, techniques, lowest)
        for _, r in x[x["a"].isin(techniques) & x["b"].isin(techniques)].iterrows():
            ax.axvline(np.sqrt(r["bw_lo_Bps"] * r["bw_hi_Bps"]) * 8, color="k", ls=":", lw=0.8)
        ax.set(xscale="log", yscale="log", ylabel="time to target (s)", title=title)
        if curves:  # lines hidden under others are named (in log time: the axis they are read on)
            plots.note_coinciding(ax, plots.coinciding(pd.concat(curves), "bandwidth_Bps", "time_s", "name", log=True),
                                  wrap=90)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    axes[-1, 0].set_xlabel("bandwidth (bit/s)")
    fig.suptitle(f"Time to target against bandwidth (simulated): {int(P):,} parameters, N = {N}")
    crossings = "; ".join(f"{plots.name(r['a'])}/{plots.name(r['b'])} at {np.sqrt(r['bw_lo_Bps'] * r['bw_hi_Bps']) * 8:.2g}"
                          for _, r in x.iterrows())
    plots.label_provenance(fig, "simulated")
    plots.caption(fig, f"Simulated time to the target loss against bandwidth, {int(P):,} parameters, N = {N}, latency "
                  f"{lat:g} s, no stragglers, a panel per family (AdamW (DDP), the reference, in each); dotted: the "
                  f"crossovers within a panel (bit/s: {crossings or 'none'}); a dot marks a series' first valid "
                  f"replay (its recorded arrivals do not hold on a slower network)", _seeds(c),
                  plots.BAND, "simulated cluster (virtual clock) replaying measured compute")
    plots.save(fig, out)
