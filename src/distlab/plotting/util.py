"""Small helpers the figure modules share."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..scoring.stats import t_interval
from ..results.tables import fmt_ci


def ci_cell(values, seed: int = 0) -> tuple[str, float, float, float]:
    """Mean [95 % t interval over seeds] of per-seed values, formatted, plus the
    numbers (``seed`` is kept for callers; the interval needs no resampling)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return "n/a", np.nan, np.nan, np.nan
    ci = t_interval(v)
    return fmt_ci(ci.estimate, ci.low, ci.high), ci.estimate, ci.low, ci.high


def on_grid(df: pd.DataFrame, x: str, y: str, keys: list[str], points: int = 100) -> pd.DataFrame:
    """Each run's ``y`` interpolated onto a common ``x`` grid per group of ``keys``
    (minus ``seed``), over the span every run of the group covers (from the latest first
    point to the earliest last one), so curves over a continuous x (time) can be averaged
    across seeds.  Nothing is extrapolated: a group whose runs share no span (a run with a
    single point, e.g. one evaluated only at its end) keeps that one point; one whose
    runs do not overlap is left out."""
    out = []
    group_keys = [k for k in keys if k != "seed"]
    for gkey, g in df.groupby(group_keys, dropna=False):
        xmin = g.groupby("seed")[x].min().max()
        xmax = g.groupby("seed")[x].max().min()
        if xmax < xmin:  # runs with no common span: no point of the group is shown
            continue
        grid = np.linspace(xmin, xmax, points) if xmax > xmin else np.array([xmax])
        for seed, r in g.groupby("seed"):
            r = r.sort_values(x)
            vals = np.interp(grid, r[x].to_numpy(), r[y].to_numpy())
            row = dict(zip(group_keys, gkey if isinstance(gkey, tuple) else (gkey,)))
            out.append(pd.DataFrame({**row, "seed": seed, x: grid, y: vals}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=[*group_keys, "seed", x, y])
