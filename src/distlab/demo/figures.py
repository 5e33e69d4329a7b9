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
    fig, axes = plt.subplots(len(rows), len(ns), figsize=(plots.PAGE, 2.4 * len(rows) + 0.9), squeeze=False,
                             sharey="row" if zoom else True, layout="constrained")
    for i, net in enumerate(rows):
        for j, n in enumerate(ns):
            ax = axes[i][j]
            for m in shown:
                d = steps[(steps["n_workers"] == n) & (steps["method"] == m)]
                if net == "zoom":
                    d = d[d["step"] >= late]
                x = {"loss_steps": "step", "loss_bytes": "cum_bytes"}.get(kind, f"time_{net}")
                _band(ax, d, x, "val_loss", plots.name(m), color=f"C{methods.position(m)}")
            if kind == "loss_bytes":  # linear up to the first bytes sent: the 0-byte start stays on the axis
                sent = steps.loc[steps["cum_bytes"] > 0, "cum_bytes"]
                ax.set_xscale("symlog", linthresh=float(sent.min()) if len(sent) else 1.0, linscale=0.5)
                ax.set_xlabel("cumulative bytes sent per worker\n(symlog: linear below the first step's bytes)")
            elif kind == "loss_time":
                ax.set_xlabel("simulated time (s)")
            else:
                ax.set_xlabel("step")
            ax.set_ylabel("validation loss (nats/byte)")
            if net == "zoom":
                ax.set_title(f"N = {n}: zoom on steps {late:g}+")
                z = steps[(steps["n_workers"] == n) & (steps["step"] >= late)].assign(
                    method=lambda t: t["method"].map(plots.name))
                plots.note_coinciding(ax, plots.coinciding(z, "step", "val_loss", "method"), "means", wrap=50)
            else:
                ax.set_title(f"N = {n} workers" + (f", {networks[net]['label']}" if net else ""))
    drawn = {}  # each method once, from whichever panel drew it
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            drawn.setdefault(lab, h)
    handles, labels = list(drawn.values()), list(drawn)
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 3))
    what = {"loss_steps": "steps", "loss_bytes": "wire bytes", "loss_time": "simulated time"}[kind]
    fig.suptitle(f"Validation loss against {what} (simulated)")
    plots.label_provenance(fig, "simulated")
    extra = {"loss_steps": "; the lower row zooms on the last third, where the claim is decided",
             "loss_bytes": "; the x axis is linear below the first step's bytes, so the 0-byte start is drawn",
             "loss_time": "; compute time measured, communication on the simulated network"}[kind]
    plots.caption(fig, f"Validation loss against {what}, per worker count N{extra}; {note}".rstrip("; "),
                  int(steps["seed"].nunique()), plots.BAND, "simulated cluster (virtual clock)")
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
    fig, axes = plt.subplots(1, max(1, len(ns)), figsize=(plots.PAGE, 2.8), squeeze=False, sharey=True,
                             layout="constrained")
    for j, n in enumerate(ns):
        ax = axes[0][j]
        for m in _methods(d, methods):
            sel = d[(d["n_workers"] == n) & (d["method"] == m)]
            if len(sel):  # one colour per method in every panel
                _band(ax, sel, "step", "gap", plots.name(m), color=f"C{methods.position(m)}")
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.axvline(LATE * d["step"].max(), color="grey", linewidth=0.8, linestyle=":")
        ax.set_xlabel("step")
        ax.set_title(f"N = {n} workers")
    axes[0][0].set_ylabel(f"val. loss - {plots.name('adamw')}'s\n(nats/byte)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3)
    fig.suptitle(f"Validation-loss gap to {plots.name('adamw')} against steps (simulated)")
    plots.label_provenance(fig, "simulated")
    plots.caption(fig, f"Each method's validation-loss gap to {plots.name('adamw')} (paired by seed at the same N) "
                  f"against steps; dotted: the start of the last third; {note}".rstrip("; "),
                  int(d["seed"].nunique()), plots.BAND + " of the paired gaps", "simulated cluster (virtual clock)")
    plots.save(fig, out)


def real_figure(real_summary, sim_summary, out, methods=METHODS) -> None:
    """Measured step time of each method on real processes, with the simulated prediction of the
    same runs (``sim_summary``: the real settings' simulated twins, same seeds, steps and lr)."""
    plots, plt = _plt()
    r = read_table_checked(real_summary)
    backend = str(r["backend"].iloc[0])
    r = r.assign(source=f"measured (wall clock, {backend})", t=lambda d: d["step_time_median"])
    s = read_table_checked(sim_summary)
    s = s[s["method"].isin(r["method"]) & s["n_workers"].isin(r["n_workers"]) & s["seed"].isin(r["seed"])]
    s = s.assign(source="simulated (virtual clock)", t=s["step_time_median"])  # the same statistic both sides
    d = pd.concat([r, s], ignore_index=True)
    d["setting"] = d["method"].map(plots.name) + ", N=" + d["n_workers"].astype(str)
    fig, ax = plt.subplots(figsize=(plots.COLUMN, 3.0))
    plots.bar_with_ci(d, "setting", "t", "source", ax=ax, positive=True)
    ax.set_ylabel("time per step (s)")
    ax.set_xlabel("")
    ax.set_title("Time per step: real vs simulated")
    ax.tick_params(axis="x", rotation=20)
    ax.legend(title="each bar's basis", loc="upper left", bbox_to_anchor=(0, -0.45), frameon=False)
    plots.label_provenance(ax, backend)
    plots.label_provenance(ax, "simulated")
    plots.caption(fig, "Median time per step of each method on real processes beside the simulator's prediction "
                  "for the same runs (same seeds, steps and learning rate)", int(r["seed"].nunique()),
                  plots.BARS_POSITIVE, f"per bar, in its key: measured (wall clock, {backend}) or simulated "
                  "(virtual clock)")
    plots.save(fig, out)
