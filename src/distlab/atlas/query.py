"""``distlab atlas query``: the ranking on a user's own cluster, from the map's recordings.

Units: bandwidth ``<number><unit>`` with unit one of b/s, kb/s, Mb/s, Gb/s, Tb/s
(bits; ``bit`` = ``b``) or B/s, kB/s, MB/s, GB/s (bytes); latency ``<number>``
with s, ms, us, ns; stragglers ``none``, ``exp:MEAN_S``, ``pareto:MEAN_S[:SHAPE]``,
``persistent:SLOWDOWN[:K]`` (K workers that much slower), ``dead:K`` (K workers
never answer).  A bad value raises :class:`QueryError` naming the option.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..config.specs import SpecError
from .grid import extrapolated, fit_trends, measured_flops_per_s, simulated_cells
from .record import Recording

_BW = {"b/s": 1 / 8, "kb/s": 1e3 / 8, "mb/s": 1e6 / 8, "gb/s": 1e9 / 8, "tb/s": 1e12 / 8}
_BWB = {"B/s": 1.0, "kB/s": 1e3, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12}
_LAT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"


class QueryError(SpecError):
    """A bad query option; the message names it."""


def parse_bandwidth(text: str) -> float:
    """Bytes per second."""
    m = re.fullmatch(_NUM + r"\s*([A-Za-z/]+)", text.strip())
    if not m:
        raise QueryError(f"--bandwidth: cannot read {text!r}; write e.g. 1Gbit/s, 10Mb/s or 125MB/s")
    v, unit = float(m.group(1)), m.group(2)
    unit_b = unit.replace("bit/s", "b/s").replace("bps", "b/s")
    if unit in _BWB:
        f = _BWB[unit]
    elif unit_b.lower() in _BW and unit_b[-3] != "B":
        f = _BW[unit_b.lower()]
    else:
        raise QueryError(f"--bandwidth: unknown unit {unit!r}; use b/s, kb/s, Mb/s, Gb/s, Tb/s (bits) "
                         f"or B/s, kB/s, MB/s, GB/s (bytes)")
    if not (v > 0 and np.isfinite(v)):
        raise QueryError(f"--bandwidth: must be a positive number, got {text!r}")
    return v * f


def parse_latency(text: str) -> float:
    m = re.fullmatch(_NUM + r"\s*([a-zµ]+)", text.strip())
    if not m:
        raise QueryError(f"--latency: cannot read {text!r}; write e.g. 30ms, 10us or 0.1s")
    v, unit = float(m.group(1)), m.group(2)
    if unit not in _LAT:
        raise QueryError(f"--latency: unknown unit {unit!r}; use s, ms, us or ns")
    if not (v >= 0 and np.isfinite(v)):
        raise QueryError(f"--latency: must be >= 0, got {text!r}")
    return v * _LAT[unit]


def parse_stragglers(text: str, n: int) -> dict:
    parts = text.strip().split(":")
    name, args = parts[0], parts[1:]
    try:
        vals = [float(a) for a in args]
    except ValueError:
        raise QueryError(f"--stragglers: cannot read the numbers in {text!r}") from None
    if any(not np.isfinite(v) or v < 0 for v in vals):
        raise QueryError(f"--stragglers: numbers must be finite and >= 0 in {text!r}")
    if name == "none" and not vals:
        return {"model": "none"}
    if name in ("exp", "exponential") and len(vals) == 1:
        return {"model": "exponential", "mean": vals[0]}
    if name == "pareto" and len(vals) in (1, 2):
        shape = vals[1] if len(vals) == 2 else 2.5
        if shape <= 1:
            raise QueryError(f"--stragglers: the Pareto shape must be > 1, got {shape:g}")
        return {"model": "pareto", "mean": vals[0], "shape": shape}
    if name == "persistent" and len(vals) in (1, 2):
        k = int(vals[1]) if len(vals) == 2 else 1
        if vals[0] < 1 or not 1 <= k < n:
            raise QueryError(f"--stragglers: persistent needs SLOWDOWN >= 1 and 1 <= K < workers, got {text!r}")
        return {"model": "persistent", "slowdown": vals[0], "slow_workers": list(range(n - k, n))}
    if name == "dead" and len(vals) == 1:
        k = int(vals[0])
        if not 1 <= k < n:
            raise QueryError(f"--stragglers: dead needs 1 <= K < workers, got {text!r}")
        return {"model": "dead", "slow_workers": list(range(n - k, n))}
    raise QueryError(f"--stragglers: cannot read {text!r}; write none, exp:MEAN, pareto:MEAN[:SHAPE], "
                     f"persistent:SLOWDOWN[:K] or dead:K")


def rank(recs: list[Recording], target: float, params: float, workers: int, bandwidth: float, latency: float,
         straggler: dict, s: int, flops_per_s: float | None, tokens: int, max_ratio: float) -> pd.DataFrame:
    """One row per technique, fastest first: predicted time, interval, label."""
    if not recs:
        raise QueryError("--runs: no recordings found")
    sizes = sorted({r.n_params for r in recs})
    lo, hi = sizes[0] / 10, sizes[-1] * max_ratio
    if not (lo <= params <= hi):
        raise QueryError(f"--params: {params:g} is outside every fit (measured {sizes[0]}..{sizes[-1]} parameters; "
                         f"extrapolation allowed {lo:g}..{hi:g})")
    if workers < 2:
        raise QueryError(f"--workers: need at least 2, got {workers}")
    measured = {(r.n_params, r.n) for r in recs}
    rate = flops_per_s or measured_flops_per_s(recs)
    if (int(params), workers) in measured:
        cells = simulated_cells([r for r in recs if (r.n_params, r.n) == (int(params), workers)], target,
                                [bandwidth], [latency], {"query": straggler})
        cells["note"] = np.where(cells["valid"], "", "trajectory differs on this cluster: not ranked")
    else:
        trends = fit_trends(recs, target)
        cells = extrapolated(recs, trends, target, float(params), workers, s, rate, tokens,
                             np.array([latency]), np.array([bandwidth]), straggler)
    cells["flops_per_s"] = rate
    return cells.sort_values(["valid", "time_s"], ascending=[False, True], kind="stable").reset_index(drop=True)


def format_ranking(df: pd.DataFrame) -> str:
    lines = [f"{'rank':>4}  {'technique':<12} {'time to target':>16}  {'95 % interval':>27}  label"]
    for i, r in df.iterrows():
        t = "never" if not np.isfinite(r["time_s"]) else f"{r['time_s']:.4g} s"
        iv = "-" if not np.isfinite(r["lo_s"]) or not np.isfinite(r["hi_s"]) else f"[{r['lo_s']:.4g}, {r['hi_s']:.4g}] s"
        note = r.get("note", "") or ""
        extra = f" (fit error {r['fit_sigma']:.3g} log-steps)" if r["label"] == "extrapolated" else ""
        lines.append(f"{i + 1:>4}  {r['technique']:<12} {t:>16}  {iv:>27}  {r['label']}{extra}"
                     + (f"; {note}" if note else ""))
    return "\n".join(lines)
