"""Trace-driven stragglers: a recorded delay trace and how well synthetic models fit it.

A real-backend PGC run writes ``delays.csv`` beside its metrics: for every
worker message the master received (used or late), the *response delay*

    arrival - model sent - compute - encoding - injected sleep

i.e. whatever a worker lost to the machine (scheduling, queueing behind its
own backlog, the transport), in seconds.  ``data/traces/gloo_delays.csv`` is
one such trace, recorded on this project's 2-core machine with no injected
delay; the straggler model ``trace`` replays it (see
:mod:`distlab.runtime.stragglers`).

:func:`fit` fits the two synthetic models of the simulator to a trace by
maximum likelihood — exponential (mean) and Pareto II / Lomax (shape, scale;
the model ``pareto`` with that shape and mean) — and reports their
log-likelihood, AIC and the Kolmogorov–Smirnov distance to the trace's
empirical distribution.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd


def fit(delays: np.ndarray) -> pd.DataFrame:
    from scipy import stats

    x = np.asarray(delays, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) < 10:
        raise ValueError(f"trace: need at least 10 finite delays to fit, got {len(x)}")
    x = np.clip(x, 0.0, None)
    rows = []
    mean = float(x.mean())
    ll = float(stats.expon.logpdf(x, scale=mean).sum())
    ks = stats.kstest(x, "expon", args=(0, mean))
    rows.append({"model": "exponential", "params": f"mean = {mean:.4g} s", "mean_s": mean,
                 "shape": np.nan, "loglik": ll, "aic": 2 * 1 - 2 * ll, "ks_distance": float(ks.statistic),
                 "ks_p": float(ks.pvalue)})
    c, loc, scale = stats.lomax.fit(x + 1e-12, floc=0)
    ll = float(stats.lomax.logpdf(x + 1e-12, c, 0, scale).sum())
    ks = stats.kstest(x + 1e-12, "lomax", args=(c, 0, scale))
    pmean = scale / (c - 1) if c > 1 else np.inf
    rows.append({"model": "pareto (Lomax)", "params": f"shape = {c:.3g}, scale = {scale:.4g} s",
                 "mean_s": float(pmean), "shape": float(c), "loglik": ll, "aic": 2 * 2 - 2 * ll,
                 "ks_distance": float(ks.statistic), "ks_p": float(ks.pvalue)})
    out = pd.DataFrame(rows)
    out.insert(0, "samples", len(x))
    out.insert(1, "trace_mean_s", mean)
    out.insert(2, "trace_p99_s", float(np.quantile(x, 0.99)))
    return out


def load(path: str | Path) -> pd.DataFrame:
    df = pd.read_csv(path)
    missing = {"step", "worker", "delay"} - set(df.columns)
    if missing:
        raise ValueError(f"trace {path}: lacks columns {sorted(missing)}")
    return df


def main_fit(trace: Path, csv: Path, md: Path, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy import stats

    from ..plotting import plots
    from ..results.tables import write_table

    df = load(trace)
    table = fit(df["delay"].to_numpy())
    write_table(table, csv, md)
    plots.set_style()
    x = np.sort(np.clip(df["delay"].to_numpy(dtype=float), 0, None))
    ecdf = np.arange(1, len(x) + 1) / len(x)
    fig, axes = plt.subplots(1, 2, figsize=(plots.PAGE, 3.4), layout="constrained")
    axes[0].step(x, 1 - ecdf, where="post", label="trace (gloo, this machine)", color="k")
    grid = np.linspace(0, x.max(), 200)
    e, p = table.iloc[0], table.iloc[1]
    axes[0].plot(grid, stats.expon.sf(grid, scale=e["mean_s"]), label=f"exponential ({e['params']})")
    pscale = float(p["params"].split("scale = ")[1].split()[0])
    axes[0].plot(grid, stats.lomax.sf(grid, p["shape"], 0, pscale), label=f"Pareto II ({p['params']})")
    axes[0].set_yscale("log")
    axes[0].set_ylim(0.5 / len(x), 1.5)
    axes[0].set_xlabel("response delay beyond compute (s)")
    axes[0].set_ylabel("P(delay > x)")
    axes[0].legend(loc="upper left", bbox_to_anchor=(0, -0.28), frameon=False)
    w = df.pivot_table(index="step", columns="worker", values="delay", aggfunc="mean")
    # a line per worker would be one a worker (twelve on the paper's cluster): the spread instead
    axes[1].fill_between(w.index, w.min(axis=1), w.max(axis=1), color="C0", alpha=0.25, lw=0,
                         label=f"fastest to slowest of {w.shape[1]} workers")
    axes[1].plot(w.index, w.median(axis=1), color="C0", lw=1.0, label="median worker")
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("delay (s)")
    axes[1].legend(loc="upper left", bbox_to_anchor=(0, -0.28), frameon=False)
    axes[0].set_title("survival of the delays")
    axes[1].set_title("delays by step")
    plots.label_provenance(fig, "gloo")
    plots.caption(fig, f"Left: the survival function of {len(x)} recorded worker response delays beside the "
                  f"exponential and Pareto II fits (maximum likelihood; KS distance {e['ks_distance']:.2f} and "
                  f"{p['ks_distance']:.2f}); right: the median worker's delay by step and the range from the fastest "
                  f"worker to the slowest (shaded)", "one recorded trace",
                  "none drawn: one trace, every message shown", "measured (wall clock, gloo)")
    fig.suptitle("Recorded straggler delays and the simulator's models")
    plots.save(fig, png)
