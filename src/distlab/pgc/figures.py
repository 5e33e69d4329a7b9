"""Pipelined Gradient Coding: the paper's Figs. 3, 7-10, the time-to-target
table, and the real backend against the simulator's prediction."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ..plotting import plots  # noqa: E402
from ..results.tables import write_table  # noqa: E402
from ..plotting.util import ci_cell, on_grid  # noqa: E402
from ..techniques.gradient_codes import SCHEMES  # noqa: E402

ORDER = list(SCHEMES)  # the schemes in their declared order


# the schemes a line figure draws (at most six lines a panel); the rest are in the tables
HEADLINE = ["dgd", "gc-fr", "gc-cr", "pgc-fr", "pgc-cr", "is-sgd"]


def _label(s: str) -> str:
    return plots.name(s)


def _headline(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["scheme"].isin(HEADLINE)]


def _order(df: pd.DataFrame) -> list[str]:
    present = set(df["scheme"])
    return [_label(s) for s in ORDER if s in present]


def _regime(opts: dict, mu: float | None = None) -> str:
    if opts.get("compute_mode") == "calibrated":
        c = float(opts["unit_seconds"])
        text = f"c = {c:g} s per partition"
        return text + (f", c/mu = {c / mu:.2g}" if mu else "")
    return "compute measured on this CPU"


def _with_label(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(Scheme=df["scheme"].map(_label))


def fig3(summary: pd.DataFrame, out: Path, opts: dict) -> None:
    d = _with_label(summary)
    d["config"] = [("DGD (c=1)" if sc == "dgd" else f"{sc.upper()} c={int(s) + 1}")
                   for sc, s in zip(d["scheme"], d["s"])]
    order = ["DGD (c=1)"] + [f"{sc} c={c}" for sc in ("GC-FR", "GC-CR")
                            for c in sorted({int(s) + 1 for s in d["s"] if s > 0})]
    order = [o for o in order if o in set(d["config"])]
    fig, axes = plt.subplots(1, 2, figsize=(plots.PAGE, 2.8))
    for ax, col, title in [(axes[0], "total_time", "training time (simulated s)"),
                           (axes[1], "final_train_loss_full", "final training loss")]:
        plots.bar_with_ci(d, x="config", y=col, hue=None, ax=ax, order=order, positive=True)
        ax.tick_params(axis="x", labelrotation=30)
        ax.set_xlabel("")
        ax.set_ylabel(title)
    mu = float(d["delay_mean"].iloc[0])
    plots.label_provenance(fig, "simulated")
    plots.caption(fig, f"Training time and final training loss of DGD against gradient coding with c partitions "
                  f"per worker; exponential delays of mean {mu:g} s, {_regime(opts, mu)}", int(d["seed"].nunique()),
                  plots.BARS_POSITIVE, "simulated cluster (virtual clock)")
    fig.suptitle("DGD vs GC with c partitions per worker")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    plots.save(fig, out)


def _expand_dgd(summary: pd.DataFrame, s_values) -> pd.DataFrame:
    """DGD waits for every worker and holds one partition, so it does not depend
    on s: its runs (stored once, at s = 0) stand as the baseline of every s."""
    dgd = summary[summary["scheme"] == "dgd"]
    rest = summary[summary["scheme"] != "dgd"]
    return pd.concat([rest] + [dgd.assign(s=s) for s in s_values], ignore_index=True)


def _s_values(df: pd.DataFrame) -> list[int]:
    return sorted(int(s) for s in df["s"].unique() if s > 0)


def _finish(fig, out: Path, title: str, what: str, seeds: int, interval: str) -> None:
    """The figure's simulated clock, its title and caption, its layout, and the file."""
    plots.label_provenance(fig, "simulated")
    plots.caption(fig, what, seeds, interval, "simulated cluster (virtual clock)")
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    plots.save(fig, out)


def fig7(summary: pd.DataFrame, out: Path, opts: dict) -> None:
    s_values = _s_values(summary)
    d = _with_label(_expand_dgd(_headline(summary), s_values))
    means = sorted(d["delay_mean"].unique())
    fig, axes = plt.subplots(1, len(means), figsize=(plots.PAGE, 3.2), squeeze=False, sharey=True)
    for ax, mu in zip(axes[0], means):
        sub = d[d["delay_mean"] == mu]
        plots.bar_with_ci(sub, x="s", y="time_per_step", hue="Scheme", ax=ax,
                          hue_order=_order(sub), positive=True)
        ax.set_title(f"delay mean {mu:g} s")
        ax.set_ylabel("time per step (simulated s)")
        ax.set_xlabel("s (stragglers tolerated)")
        ax.legend(ncol=2)
    _finish(fig, out, "Time per step against s",
            f"Time per step against s, the stragglers tolerated (each worker holds s + 1 partitions; DGD has "
            f"no s and its bar repeats); n = {opts.get('n')} workers, exponential delays, {_regime(opts)}; "
            f"IS-GC-FR and IS-GC-CR are in the P1 tables", int(d["seed"].nunique()), plots.BARS_POSITIVE)


def fig8(steps: pd.DataFrame, out: Path, opts: dict) -> None:
    s_values = _s_values(steps)
    ev = _headline(steps[steps["train_loss_full"].notna()])
    d = _with_label(_expand_dgd(ev, s_values))
    means = sorted(d["delay_mean"].unique())
    fig, axes = plt.subplots(len(s_values), len(means), figsize=(plots.PAGE, 2.3 * len(s_values) + 0.8),
                             squeeze=False, sharex=True)
    for i, s in enumerate(s_values):
        for j, mu in enumerate(means):
            ax = axes[i][j]
            sub = d[(d["s"] == s) & (d["delay_mean"] == mu)]
            # eight schemes: each its own colour, dashes and marker; schemes whose curves lie
            # on top of each other (those that recover the full gradient train as DGD does)
            # are named in the title
            plots.line_with_ci(sub, x="step", y="train_loss_full", hue="Scheme", ax=ax,
                               hue_order=_order(sub), distinct=True)
            ax.set_yscale("log")
            plots.log_ticks(ax)
            ax.set_title(f"s = {s}, delay mean {mu:g} s")
            plots.note_coinciding(ax, plots.coinciding(sub, "step", "train_loss_full", "Scheme", log=True),
                                  "losses")
            ax.set_ylabel("training loss (full train set)")
            if (i, j) != (0, 0):
                ax.get_legend().remove()
            else:
                ax.legend(ncol=2)
    _finish(fig, out, "Training loss against steps",
            "Training loss on the full train set against steps, per s and delay mean; IS-GC-FR and IS-GC-CR "
            "are in the P1 tables", int(d["seed"].nunique()), plots.BAND)


def fig9(summary: pd.DataFrame, out: Path, opts: dict) -> None:
    d = _with_label(summary)
    order = _order(d)
    thr = opts.get("threshold", {})
    fig, axes = plt.subplots(1, 3, figsize=(plots.PAGE, 2.9))
    plots.bar_with_ci(d, x="Scheme", y="time_per_step", hue=None, ax=axes[0], order=order, positive=True)
    axes[0].set_ylabel("time per step (simulated s)")
    plots.bar_with_ci(d, x="Scheme", y="steps_to_threshold", hue=None, ax=axes[1], order=order, positive=True)
    axes[1].set_ylabel(f"steps to loss <= {thr.get('loss')}\n({thr.get('repeat', 3)} batches in a row)")
    plots.bar_with_ci(d, x="Scheme", y="steps_to_threshold_ma", hue=None, ax=axes[2], order=order,
                      positive=True)
    axes[2].set_ylabel(f"steps to loss <= {thr.get('loss')}\n(mean of last {thr.get('window', 10)} batches)")
    for ax in axes:
        ax.tick_params(axis="x", labelrotation=30)
        ax.set_xlabel("")
    mu = float(d["delay_mean"].iloc[0])
    _finish(fig, out, "Time per step and steps to the loss threshold",
            f"Time per step and steps to the loss threshold (as the paper: {thr.get('repeat', 3)} mini-batches in a "
            f"row; and the mean of the last {thr.get('window', 10)}), s = {opts.get('cloud_s')}, exponential delays "
            f"of mean {mu:g} s, {_regime(opts, mu)}", int(d["seed"].nunique()), plots.BARS_POSITIVE)


def fig10(steps: pd.DataFrame, out: Path, opts: dict) -> None:
    d = steps.sort_values("step").copy()
    # the per-step loss of the messages used, smoothed over 10 steps
    d["loss_smooth"] = d.groupby(["scheme", "seed"])["loss"].transform(
        lambda v: v.rolling(10, min_periods=1).mean())
    g = _with_label(on_grid(_headline(d), "time", "loss_smooth", ["scheme", "seed"]))
    fig, ax = plt.subplots(figsize=(plots.COLUMN, 2.8))
    plots.line_with_ci(g, x="time", y="loss_smooth", hue="Scheme", ax=ax, hue_order=_order(g))
    for line in ax.lines:
        line.set_marker("")
    thr = opts.get("threshold", {}).get("loss")
    if thr is not None:
        ax.axhline(thr, color="grey", ls="--", lw=1)
    ax.set_yscale("log")
    plots.log_ticks(ax)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("training loss (10-step mean)")
    plots.label_provenance(fig, "simulated")
    plots.caption(fig, "Training loss (10-step running mean of the mini-batch loss) against simulated time; "
                  "dashed: the loss threshold; IS-GC-FR and IS-GC-CR are in the P1 tables",
                  int(d["seed"].nunique()), plots.BAND + " (each run put on a common time grid)",
                  "simulated cluster (virtual clock)")
    ax.set_title("Training loss against time")
    fig.tight_layout()
    plots.save(fig, out)


def time_to_target(summary: pd.DataFrame, out_csv: Path, out_md: Path) -> pd.DataFrame:
    """Time and steps to the loss threshold per scheme, with paired speed-ups."""
    rows = []
    by = {s: g.set_index("seed") for s, g in summary.groupby("scheme")}
    for scheme in [s for s in ORDER if s in by]:
        g = by[scheme]
        row = {"scheme": _label(scheme), "seeds": len(g), "reached": int(g["reached"].sum()),
               "time_to_target_s": ci_cell(g["time_to_threshold"])[0],
               "steps_to_target": ci_cell(g["steps_to_threshold"])[0],
               "reached_ma": int(g["reached_ma"].sum()),
               "time_to_target_ma_s": ci_cell(g["time_to_threshold_ma"])[0],
               "steps_to_target_ma": ci_cell(g["steps_to_threshold_ma"])[0],
               "time_per_step_s": ci_cell(g["time_per_step"])[0]}
        for ref in ("dgd", "gc-fr", "gc-cr"):
            if ref in by:
                r = by[ref]["time_to_threshold"] / g["time_to_threshold"]
                row[f"speedup_vs_{ref}"] = ci_cell(r.dropna())[0]
        rows.append(row)
    table = pd.DataFrame(rows)
    write_table(table, out_csv, out_md)
    return table


def compute_table(summary: pd.DataFrame, out_csv: Path, out_md: Path) -> None:
    """Work per worker-step of each scheme against DGD's, and the simulator's own
    overhead as a share of the gradient compute it drives."""
    d = summary
    dgd_units = float(d.loc[d["scheme"] == "dgd", "units_per_worker_step"].mean())
    rows = []
    for (scheme, s), g in d.groupby(["scheme", "s"]):
        share = g["simulator_overhead_s"] / g["gradient_compute_s"]
        rows.append({"scheme": _label(scheme), "s": int(s),
                     "partitions_per_worker_step": float(g["units_per_worker_step"].mean()),
                     "relative_to_dgd": float(g["units_per_worker_step"].mean()) / dgd_units,
                     "simulator_overhead_share": ci_cell(share)[0], "runs": len(g)})
    order = {v: i for i, v in enumerate(_label(x) for x in ORDER)}
    t = pd.DataFrame(rows).sort_values(
        ["s", "scheme"], key=lambda c: c.map(order) if c.name == "scheme" else c)
    write_table(t, out_csv, out_md)


def real_vs_sim(summary: pd.DataFrame, out_png: Path, out_md: Path, opts: dict) -> None:
    d = _with_label(summary)
    d["clock"] = d["backend"].map(lambda b: "simulated prediction" if b == "simulated"
                                  else f"measured ({b})")
    fig, ax = plt.subplots(figsize=(plots.PAGE, 2.8))
    plots.bar_with_ci(d, x="Scheme", y="time_per_step", hue="clock", ax=ax, order=_order(d), positive=True)
    ax.set_ylabel("time per step (s)")
    n = int(d["n"].iloc[0])
    mu = float(d["delay_mean"].iloc[0])
    plots.label_provenance(fig, "gloo")
    plots.caption(fig, f"Time per step of real processes (torchrun, gloo) beside the simulator's prediction for the "
                  f"same runs; n = {n} workers, exponential delays of mean {mu:g} s", int(d["seed"].nunique()),
                  plots.BARS_POSITIVE, "each bar's basis is in its key: measured (wall clock, gloo) or simulated "
                  "(virtual clock)")
    ax.set_title("Real processes (gloo) vs the simulated cluster")
    fig.tight_layout()
    plots.save(fig, out_png)
    rows = []
    for scheme, g in d.groupby("scheme"):
        real = g[g["backend"] != "simulated"].set_index("seed")["time_per_step"]
        sim = g[g["backend"] == "simulated"].set_index("seed")["time_per_step"]
        ratio = (real / sim).dropna()
        rows.append({"scheme": _label(scheme), "measured_s": ci_cell(real)[0],
                     "simulated_s": ci_cell(sim)[0], "ratio_measured_to_simulated": ci_cell(ratio)[0],
                     "measured_compute_per_step_s": ci_cell(
                         g.loc[g["backend"] != "simulated", "compute_per_step"])[0],
                     "measured_encode_s": ci_cell(g.loc[g["backend"] != "simulated", "encode_s"])[0]
                     if "encode_s" in g else "",
                     "measured_decode_s": ci_cell(g.loc[g["backend"] != "simulated", "decode_s"])[0]
                     if "decode_s" in g else "",
                     "seeds": len(ratio)})
    order = {s: i for i, s in enumerate(_label(s) for s in ORDER)}
    write_table(pd.DataFrame(rows).sort_values("scheme", key=lambda c: c.map(order)),
                out_md.with_suffix(".csv"), out_md)


def _read(path) -> pd.DataFrame:
    from ..results.summarize import read_table_file

    return read_table_file(path)


def make_one(name: str, inputs: dict, outs: list[Path], opts: dict) -> None:
    """One figure or table: ``name`` is fig3, fig7, fig8, fig9, fig10,
    time_to_target, compute or real_vs_sim; it reads only its own inputs."""
    plots.set_style()
    read = {k: _read(v) for k, v in inputs.items()}
    if name in ("fig3", "fig7", "fig8", "fig9", "fig10"):
        fn = {"fig3": fig3, "fig7": fig7, "fig8": fig8, "fig9": fig9, "fig10": fig10}[name]
        (table,) = read.values()
        fn(table, outs[0], opts)
    elif name == "time_to_target":
        time_to_target(read["summary"], *outs[:2])
    elif name == "compute":
        compute_table(read["summary"], *outs[:2])
    elif name == "real_vs_sim":
        real_vs_sim(read["summary"], outs[0], outs[1], opts)
    else:
        raise ValueError(f"unknown PGC figure {name!r}")


def make(inputs: dict, out_dir: Path, opts: dict) -> None:
    """Every figure and table at once (kept for ``distlab figures --experiment pgc``)."""
    plots.set_style()
    read = {k: _read(v) for k, v in inputs.items()}
    fig3(read["motivating_summary"], out_dir / "figures/pgc_fig3.png", opts)
    fig7(read["simulation_summary"], out_dir / "figures/pgc_fig7.png", opts)
    fig8(read["simulation_steps"], out_dir / "figures/pgc_fig8.png", opts)
    fig9(read["cloud_summary"], out_dir / "figures/pgc_fig9.png", opts)
    fig10(read["cloud_steps"], out_dir / "figures/pgc_fig10.png", opts)
    time_to_target(read["cloud_summary"], out_dir / "tables/pgc_time_to_target.csv",
                   out_dir / "tables/pgc_time_to_target.md")
    compute_table(read["simulation_summary"], out_dir / "tables/pgc_compute.csv",
                  out_dir / "tables/pgc_compute.md")
    if "real_summary" in read:
        real_vs_sim(read["real_summary"], out_dir / "figures/pgc_real_vs_sim.png",
                    out_dir / "tables/pgc_real_vs_sim.md", opts)
