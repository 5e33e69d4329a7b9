"""DeMo's figures: validation loss against steps, wire bytes and simulated time, each method's
gap to AdamW-DDP, and real step times beside the simulator's prediction; from the tables of
:mod:`.analysis`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..scoring.stats import t_interval
from ..results.tables import read_table_checked
from ..techniques.catalogue import METHODS
from .analysis import LATE


def _plt():
    from ..plotting import plots

    plots.set_style()
    import matplotlib.pyplot as plt

    return plots, plt


def _band(ax, df: pd.DataFrame, x: str, y: str, label: str, color: str | None = None, band: bool = True) -> None:
    """Mean over seeds at each eval step, with a 95 % t band (x averaged too; ``band=False``: the
    mean only)."""
    pts = []
    for step, g in df.groupby("step"):
        vals = g[y].to_numpy(float)
        if len(vals) == 0 or np.isnan(vals).any():
            continue
        ci = t_interval(vals)
        pts.append((g[x].mean(), ci.estimate, ci.low, ci.high))
    if not pts:
        return
    a = np.array(pts)
    (line,) = ax.plot(a[:, 0], a[:, 1], marker="o", markersize=3, label=label, color=color)
    if band:
        ax.fill_between(a[:, 0], a[:, 2], a[:, 3], color=line.get_color(), alpha=0.2, linewidth=0)


def _eval_rows(steps: pd.DataFrame) -> pd.DataFrame:
    return steps[steps["val_loss"].notna()]


def _methods(steps: pd.DataFrame, methods) -> list[str]:
    """The methods in ``steps``, in plot order; one the registry does not know is refused by name
    (left out, the figure would look complete without it)."""
    for m in sorted(set(steps["method"])):
        methods[m]  # raises naming it and the methods known
    return [m for m in methods if m in set(steps["method"])]


def figure(kind: str, steps_csv, out, networks: dict, note: str = "", methods=METHODS) -> None:
    """``loss_steps``, ``loss_bytes`` or ``loss_time`` (validation loss against steps,
    cumulative wire bytes per worker, or simulated time under each network).

    One legend and one clock label for the whole figure, outside the panels: with six
    methods' bands a panel has no free corner for either, and panel-sized boxes moved
    the layout with the data (the tiny run's measured times put a title under a label)."""
    plots, plt = _plt()
    steps = _eval_rows(read_table_checked(steps_csv))
    ns = sorted(steps["n_workers"].unique())
    shown = _methods(steps, methods)
    rows = list(networks) if kind == "loss_time" else [None]
    # against steps the curves end within a few hundredths of each other: a second row zooms on the
    # last third, where they are told apart
    zoom = kind == "loss_steps" and len(steps) > 0
    if zoom:  # the first evaluation in the last third
        late = steps.loc[steps["step"] >= LATE * steps["step"].max(), "step"].min()
    if zoom:
        rows = [None, "zoom"]
    fig, axes = plt.subplots(len(rows), len(ns), figsize=(4.2 * len(ns), 3.2 * len(rows) + 0.6), squeeze=False,
                             sharey="row" if zoom else True, layout="constrained")
    for i, net in enumerate(rows):
        for j, n in enumerate(ns):
            ax = axes[i][j]
            for m in shown:
                d = steps[(steps["n_workers"] == n) & (steps["method"] == m)]
                if net == "zoom":
                    d = d[d["step"] >= late]
                x = {"loss_steps": "step", "loss_bytes": "cum_bytes"}.get(kind, f"time_{net}")
                _band(ax, d, x, "val_loss", methods.label(m), color=f"C{methods.position(m)}", band=net != "zoom")
            if kind == "loss_bytes":
                ax.set_xscale("log")
                ax.set_xlabel("cumulative bytes sent per worker (ring collectives)")
            elif kind == "loss_time":
                ax.set_xlabel("simulated time (s)")
            else:
                ax.set_xlabel("step")
            ax.set_ylabel("validation loss (nats/byte)")
            if net == "zoom":
                ax.set_title(f"N = {n}: zoom on steps {late:g}+ (means)", fontsize=9)
                z = steps[(steps["n_workers"] == n) & (steps["step"] >= late)].assign(
                    method=lambda t: t["method"].map(methods.label))
                plots.note_coinciding(ax, plots.coinciding(z, "step", "val_loss", "method"), "means", wrap=50)
            else:
                ax.set_title(f"N = {n} workers" + (f", {networks[net]['label']}" if net else ""), fontsize=9)
    drawn = {}  # each method once, from whichever panel drew it
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            drawn.setdefault(lab, h)
    handles, labels = list(drawn.values()), list(drawn)
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 3), fontsize=7)
    what = {"loss_steps": "steps", "loss_bytes": "wire bytes", "loss_time": "simulated time"}[kind]
    fig.suptitle(f"Validation loss against {what} ({plots.provenance_text('simulated', note)})", fontsize=9)
    plots.save(fig, out)


def gap_figure(steps_csv, out, note: str = "", methods=METHODS) -> None:
    """Each method's validation-loss gap to AdamW-DDP (paired by seed, same N) against steps."""
    plots, plt = _plt()
    steps = _eval_rows(read_table_checked(steps_csv))
    keys = ["n_workers", "backend", "seed", "step"]
    base = steps[steps["method"] == "adamw"][keys + ["val_loss"]].drop_duplicates(subset=keys)
    d = steps[steps["method"] != "adamw"].merge(base.rename(columns={"val_loss": "_a"}), on=keys, how="inner")
    d["gap"] = d["val_loss"] - d["_a"]
    ns = sorted(d["n_workers"].unique())
    fig, axes = plt.subplots(1, max(1, len(ns)), figsize=(4.2 * max(1, len(ns)), 3.2), squeeze=False, sharey=True)
    for j, n in enumerate(ns):
        ax = axes[0][j]
        for m in _methods(d, methods):
            sel = d[(d["n_workers"] == n) & (d["method"] == m)]
            if len(sel):  # one colour per method in every panel
                _band(ax, sel, "step", "gap", methods.label(m), color=f"C{methods.position(m)}")
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.axvline(LATE * d["step"].max(), color="grey", linewidth=0.8, linestyle=":")
        ax.set_xlabel("step (dotted: start of the last third)")
        ax.set_ylabel("validation loss - AdamW-DDP's (nats/byte)")
        ax.set_title(f"N = {n} workers")
    axes[0][0].legend(fontsize=7)
    # one label for the figure: a box in a panel full of bands found no free corner
    fig.suptitle(f"Validation-loss gap to AdamW-DDP against steps ({plots.provenance_text('simulated', note)})",
                 fontsize=9)
    plots.save(fig, out)


def real_figure(real_summary, sim_summary, out, methods=METHODS) -> None:
    """Measured step time of each method on real processes, with the simulated prediction of the
    same runs (``sim_summary``: the real settings' simulated twins, same seeds, steps and lr)."""
    plots, plt = _plt()
    r = read_table_checked(real_summary).assign(source="measured (wall clock)", t=lambda d: d["step_time_median"])
    s = read_table_checked(sim_summary)
    s = s[s["method"].isin(r["method"]) & s["n_workers"].isin(r["n_workers"]) & s["seed"].isin(r["seed"])]
    s = s.assign(source="simulated prediction", t=s["step_time_median"])  # the same statistic both sides
    d = pd.concat([r, s], ignore_index=True)
    d["setting"] = d["method"].map(methods.label) + ", N=" + d["n_workers"].astype(str)
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    plots.bar_with_ci(d, "setting", "t", "source", ax=ax, positive=True)
    ax.set_ylabel("time per step (s)")
    ax.set_xlabel("")
    ax.set_title("Time per step: real processes vs the simulator's prediction")
    ax.tick_params(axis="x", rotation=20)
    plots.label_provenance(ax, str(r["backend"].iloc[0]),
                           f"bars: measured, and simulated twins of the same runs; {plots.POSITIVE_NOTE}")
    plots.save(fig, out)
