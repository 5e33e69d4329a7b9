"""Where the paper's Fig. 7 orderings hold: a map over c/mu and s from the clock alone.

The simulated clock of a scheme depends only on how many partitions each
worker evaluates a step (``units``), how many messages the master waits for,
and the straggler delays; no gradient is needed.  With per-partition compute
``c`` and exponential delays of mean ``mu``, time scales with ``mu`` at a
fixed ratio ``c/mu``, so one sweep of ``c/mu`` (``mu = 1``) covers every
setting.  For each ``c/mu`` on a grid and each ``s`` we run the very
:class:`~distlab.runtime.sim.SimulatedCluster` the training runs use (same
seeds, hence the same delays and tie-breaks), charge each scheme's units, and
record the time per step:

* ``dgd``: 1 unit, waits for all ``n``;
* ``gc``: ``s+1`` units (FR and CR alike on the clock: no coding cost here);
* ``pgc``: ``s+1`` units at the first step, 1 afterwards;
* ``is-sgd``: 1 unit; ``is-gc``: 2 units (c = 2); all wait for ``n - s``.

The orderings of Fig. 7 are then checked point by point on the seed means
(the scorecard tests some of them, paired by seed, at stated c/mu).  The
default config's c/mu and the c/mu of ResNet-18 (a partition's gradient timed
on this CPU, one thread) are marked on the map.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ..runtime.compute import ComputeModel
from ..runtime.network import NetworkModel
from ..runtime.sim import SimulatedCluster
from ..runtime.stragglers import StragglerModel

SCHEMES = ("dgd", "gc", "pgc", "is-sgd", "is-gc")

# (id, statement, predicate on {scheme: mean time} at one s, and the other s values' means)
ORDERINGS = (
    ("gc_grows_with_s", "GC time per step grows with s"),
    ("gc_slowest", "GC is the slowest scheme (DGD included)"),
    ("is_gc_faster_as_s_grows", "IS-GC gets faster as s grows"),
    ("is_sgd_faster_as_s_grows", "IS-SGD gets faster as s grows"),
    ("is_sgd_fastest", "IS-SGD is the fastest scheme"),
    ("pgc_faster_than_is_gc", "PGC is faster than IS-GC"),
    ("pgc_close_to_is_sgd", "PGC is within 10 % of IS-SGD"),
)


def units(scheme: str, s: int, step: int) -> int:
    if scheme == "dgd" or scheme == "is-sgd":
        return 1
    if scheme == "gc":
        return s + 1
    if scheme == "pgc":
        return s + 1 if step == 0 else 1
    if scheme == "is-gc":
        return 2
    raise ValueError(f"unknown scheme {scheme!r}")


def clock_time_per_step(scheme: str, n: int, s: int, c: float, mu: float, seed: int, steps: int,
                        network: dict | None = None) -> float:
    """Mean simulated time per step of ``scheme`` (no training)."""
    net = NetworkModel(**(network or {"latency_s": 0.0, "bandwidth_Bps": 1e18}))
    cl = SimulatedCluster(n, ComputeModel("calibrated", unit_seconds=c), net,
                          StragglerModel("exponential", mean=mu, seed=seed))
    wait = n if scheme == "dgd" else n - s
    ready = (lambda r: len(r) >= wait)
    total = 0.0
    for step in range(steps):
        u = units(scheme, s, step)
        for w in range(n):
            cl.charge(w, u, 0.0)
        total += cl.master_step(step, 0.0, 0.0, ready).step_time
    return total / steps


def sweep(n: int, s_values, ratios, seeds, steps: int) -> pd.DataFrame:
    rows = []
    for ratio in ratios:
        for s in s_values:
            for scheme in SCHEMES:
                if scheme == "dgd" and s != s_values[0]:
                    continue  # dgd does not depend on s: computed once, copied below
                for seed in seeds:
                    t = clock_time_per_step(scheme, n, s, float(ratio), 1.0, int(seed), steps)
                    rows.append({"c_over_mu": float(ratio), "s": int(s), "scheme": scheme,
                                 "seed": int(seed), "time_per_step": t})
    df = pd.DataFrame(rows)
    dgd = df[df["scheme"] == "dgd"]
    extra = [dgd.assign(s=int(s)) for s in s_values[1:]]
    return pd.concat([df, *extra], ignore_index=True)


def orderings(df: pd.DataFrame) -> pd.DataFrame:
    """Whether each ordering holds (on seed means) at each (c/mu, s)."""
    m = df.groupby(["c_over_mu", "s", "scheme"])["time_per_step"].mean()
    s_values = sorted(df["s"].unique())
    rows = []
    for ratio in sorted(df["c_over_mu"].unique()):
        for i, s in enumerate(s_values):
            t = {sc: float(m[(ratio, s, sc)]) for sc in SCHEMES}
            prev = {sc: float(m[(ratio, s_values[i - 1], sc)]) for sc in SCHEMES} if i else None
            holds = {
                "gc_grows_with_s": None if prev is None else t["gc"] > prev["gc"],
                "gc_slowest": all(t["gc"] > t[o] for o in SCHEMES if o != "gc"),
                "is_gc_faster_as_s_grows": None if prev is None else t["is-gc"] < prev["is-gc"],
                "is_sgd_faster_as_s_grows": None if prev is None else t["is-sgd"] < prev["is-sgd"],
                "is_sgd_fastest": all(t["is-sgd"] <= t[o] for o in SCHEMES),
                "pgc_faster_than_is_gc": t["pgc"] < t["is-gc"],
                "pgc_close_to_is_sgd": t["pgc"] <= 1.1 * t["is-sgd"],
            }
            for oid, _ in ORDERINGS:
                rows.append({"c_over_mu": ratio, "s": int(s), "ordering": oid, "holds": holds[oid]})
    return pd.DataFrame(rows)


def resnet18_unit_seconds(batch: int, dtype: str = "float64", image: int = 32, reps: int = 2) -> float:
    """Seconds of one partition's gradient of ResNet-18 (torchvision, 10 classes) on
    ``batch`` images of 3 x image x image, one thread, on this CPU (median)."""
    import torch
    import torch.nn.functional as F

    from ..models import build_model

    torch.set_num_threads(1)
    dt = {"float32": torch.float32, "float64": torch.float64}[dtype]
    model = build_model("resnet18", num_classes=10, in_channels=3).to(dt)
    x = torch.randn(batch, 3, image, image, dtype=dt)
    y = torch.randint(0, 10, (batch,))
    secs = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        torch.autograd.grad(loss, [p for p in model.parameters()])
        secs.append(time.perf_counter() - t0)
    return float(np.median(secs[1:]))  # the first pass warms up


def plot(ord_df: pd.DataFrame, marks: dict[str, float], png: Path, caption: str, seeds: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plotting import plots

    from matplotlib.colors import ListedColormap
    from matplotlib.ticker import LogLocator, NullFormatter, StrMethodFormatter

    plots.set_style()
    cmap = ListedColormap(["#b2182b", "#1a9850"])  # does not hold, holds
    cmap.set_bad("0.88")  # not defined
    s_values = sorted(ord_df["s"].unique())
    ratios = sorted(ord_df["c_over_mu"].unique())
    fig, axes = plt.subplots(len(s_values), 1, figsize=(plots.PAGE, 1.55 * len(s_values) + 1.3), sharex=True,
                             squeeze=False, layout="constrained")
    axes = axes.T
    labels = [text for _, text in ORDERINGS]
    for ax, s in zip(axes[0], s_values):
        sub = ord_df[ord_df["s"] == s]
        grid = np.full((len(ORDERINGS), len(ratios)), np.nan)
        for i, (oid, _) in enumerate(ORDERINGS):
            for j, r in enumerate(ratios):
                v = sub[(sub["ordering"] == oid) & (sub["c_over_mu"] == r)]["holds"].iloc[0]
                grid[i, j] = np.nan if v is None or (isinstance(v, float) and np.isnan(v)) else float(v)
        # cells on a log axis of c/mu (the sweep's points, with the claims' points put in, are not
        # evenly spaced): each cell spans the geometric midpoints to its neighbours
        r = np.asarray(ratios, float)
        mids = np.sqrt(r[1:] * r[:-1])
        edges = np.concatenate([[r[0] ** 2 / mids[0]], mids, [r[-1] ** 2 / mids[-1]]]) if len(r) > 1 else \
            np.array([r[0] / 1.5, r[0] * 1.5])
        ax.pcolormesh(edges, np.arange(len(ORDERINGS) + 1) - 0.5, np.ma.masked_invalid(grid), cmap=cmap,
                      vmin=0, vmax=1, shading="flat")
        ax.set_ylim(len(ORDERINGS) - 0.5, -0.5)
        ax.set_xscale("log")
        shown = [v for v in marks.values() if v and np.isfinite(v)]  # every mark's line in view
        ax.set_xlim(min([edges[0]] + [v / 1.3 for v in shown]), max([edges[-1]] + [v * 1.3 for v in shown]))
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 3.0)))
        ax.xaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(False)
        if s == s_values[-1]:
            ax.set_xlabel("c / mu (per-partition compute / mean delay), log scale")
        ax.set_title(f"s = {s}" + (" (trends: s-1 -> s)" if s != s_values[0] else " (trends: no s-1, grey)"))
        ax.set_yticks(range(len(ORDERINGS)))
        ax.set_yticklabels(labels)
        for k, (name, val) in enumerate(marks.items()):
            if val and np.isfinite(val):
                ax.axvline(val, color=f"C{k}", ls=("--", ":", "-.")[k % 3], lw=1.5,
                           label=f"{name}: c/mu = {val:.2g}" if ax is axes[0][0] else None)
    # a key for every colour of the cells, beside the marks' lines
    from matplotlib.patches import Patch

    key = [Patch(facecolor=cmap(1.0), label="the ordering holds"), Patch(facecolor=cmap(0.0), label="it does not"),
           Patch(facecolor=cmap.get_bad(), edgecolor="0.6", label="not defined (a trend at the first s)")]
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles=key + handles, labels=[p.get_label() for p in key] + names, loc="outside lower center",
               ncol=2, frameon=False)
    plots.label_provenance(fig, "simulated")
    plots.caption(fig, f"Regime map: for each of the orderings the paper's Fig. 7 shows, whether it holds (green) "
                  f"or not (red) against c / mu, per s; the lines mark where this project's configs and runs sit; "
                  f"{caption}", seeds,
                  "none drawn: a cell is whether the ordering holds between the means over seeds",
                  "simulated cluster (virtual clock), no training")
    fig.suptitle("Where the paper's Fig. 7 orderings hold, from the clock alone")
    plots.save(fig, png)


def main_regime(opts: dict, csv: Path, png: Path, md: Path, unit_cost: list[str]) -> None:
    from ..results.tables import write_checked_table, write_table

    ratios = np.geomspace(float(opts.get("c_over_mu_min", 0.01)), float(opts.get("c_over_mu_max", 4.0)),
                          int(opts.get("points", 20)))
    ratios = np.unique(np.concatenate([ratios, [float(x) for x in opts.get("claim_points", [])]]))
    s_values = [int(s) for s in opts.get("s", [1, 2, 3])]
    n = int(opts["n"])
    seeds = [int(x) for x in opts.get("seeds", [0, 1, 2])]
    df = sweep(n, s_values, ratios, seeds, int(opts.get("steps", 300)))
    write_checked_table(df, csv, [Path(p) for p in unit_cost])  # the runs that mark it: the gloo ones
    ords = orderings(df)
    marks = {}
    c_def = float(opts.get("default_unit_seconds", 0.5))
    for mu in opts.get("default_delay_means", []):
        marks[f"default config, mu = {float(mu):g} s"] = c_def / float(mu)
    rn = opts.get("resnet18")
    if rn:
        c_rn = resnet18_unit_seconds(int(rn.get("batch", 21)), rn.get("dtype", "float64"))
        for mu in opts.get("default_delay_means", [1.0]):
            marks[f"ResNet-18 here ({c_rn:.2g} s), mu = {float(mu):g} s"] = c_rn / float(mu)
    for path in unit_cost:
        man = json.loads(Path(path).read_text())
        mu = float(man["spec"]["cluster"]["straggler"].get("mean", 0.0))
        if mu > 0 and man.get("unit_compute_s"):
            marks.setdefault(f"real gloo runs (mu = {mu:g} s)", float(man["unit_compute_s"]) / mu)
    summary = []
    for (oid, s), g in ords.groupby(["ordering", "s"]):
        g = g.dropna(subset=["holds"])
        if g.empty:
            continue
        held = g[g["holds"].astype(bool)]["c_over_mu"]
        summary.append({"ordering": oid, "s": int(s), "points_holding": f"{len(held)}/{len(g)}",
                        "holds_for_c_over_mu": _span(held.to_numpy(), g["c_over_mu"].to_numpy())})
    mdf = pd.DataFrame(summary)
    marks_df = pd.DataFrame([{"ordering": f"(mark) {k}", "s": "", "points_holding": "",
                              "holds_for_c_over_mu": f"c/mu = {v:.3g}"} for k, v in marks.items()])
    write_table(pd.concat([mdf, marks_df], ignore_index=True), md.with_suffix(".csv"), md)
    plot(ords, marks, png, f"n = {n}, exponential delays (mu = 1), {len(seeds)} seeds x "
                           f"{int(opts.get('steps', 300))} steps a point", len(seeds))


def _span(held: np.ndarray, grid: np.ndarray) -> str:
    """Contiguous c/mu intervals of the grid where an ordering holds, as text."""
    if len(held) == 0:
        return "nowhere"
    grid = np.sort(grid)
    on = np.isin(grid, held)
    parts, i = [], 0
    while i < len(grid):
        if on[i]:
            j = i
            while j + 1 < len(grid) and on[j + 1]:
                j += 1
            parts.append(f"{grid[i]:.3g}-{grid[j]:.3g}" if j > i else f"{grid[i]:.3g}")
            i = j + 1
        else:
            i += 1
    return ", ".join(parts)


CLOCK_NAME = {"dgd": "dgd", "gc-fr": "gc", "gc-cr": "gc", "pgc-fr": "pgc", "pgc-cr": "pgc",
              "is-sgd": "is-sgd", "is-gc-fr": "is-gc", "is-gc-cr": "is-gc"}


def crosscheck(summary: pd.DataFrame, network: dict | None, steps: int) -> pd.DataFrame:
    """The clock-only time per step beside the trained runs' (table pgc_simulation),
    seed by seed at the trained runs' own settings; the difference should be the
    coding time the trained runs charge (encode + decode) and the message bytes on
    the network."""
    rows = []
    for (scheme, s, mu), g in summary.groupby(["scheme", "s", "delay_mean"]):
        c = float(g["unit_seconds"].iloc[0])
        n = int(g["n"].iloc[0])
        clock = [clock_time_per_step(CLOCK_NAME[scheme], n, int(s), c, float(mu), int(seed), steps, network)
                 for seed in g["seed"]]
        trained = g["time_per_step"].to_numpy()
        coding = (g["encode_s"].fillna(0) + g["decode_s"].fillna(0)).to_numpy() if "encode_s" in g else 0.0
        diff = trained - np.asarray(clock)
        rows.append({"scheme": scheme, "s": int(s), "c_over_mu": c / float(mu), "seeds": len(g),
                     "clock_only_s": float(np.mean(clock)), "trained_s": float(np.mean(trained)),
                     "trained_minus_clock_s": float(np.mean(diff)),
                     "max_abs_diff_minus_coding_s": float(np.max(np.abs(diff - coding)))})
    return pd.DataFrame(rows)


def main_crosscheck(summary_path: Path, opts: dict, md: Path) -> None:
    from ..results.summarize import read_table_file
    from ..results.tables import write_table

    summary = read_table_file(summary_path)
    t = crosscheck(summary, opts.get("network"), int(opts["steps"]))
    write_table(t, md.with_suffix(".csv"), md)
