"""The map: which technique reaches the target first on which cluster, with intervals.

Cells: bandwidth x latency x straggler model x workers N x model size.

* **simulated** — a (size, N) that was trained here: each seed's recording
  replayed on the cell (:mod:`distlab.atlas.replay`); the time to target is the
  mean over seeds with a 95 % t-interval.  An arrival-dependent technique uses
  the run trained under the cell's straggler model where there is one, else the
  no-straggler run, and the cell is *invalid* for it wherever the replayed
  fastest-set differs from the recorded one (its trajectory would differ there);
  invalid entries take no part in the ranking.
* **extrapolated** — any other (size, N): :func:`projected_cells`, time per step
  from the projected clock x the step-efficiency ratio against DDP (no per-technique
  trend of the steps themselves).

The winner of a cell is the lowest mean; ``tie`` when its interval overlaps the
runner-up's; ``ratio`` = runner-up / winner.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
# Student's t quantile as scipy.stats.t.ppf computes it (stdtrit), without importing scipy.stats
# (about a second of the query's start)
from scipy.special import stdtrit

from .record import Recording
from .replay import time_to_target
from .spec import TECHNIQUES, arrival_dependent, kind


def interval(x: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and t-interval over seeds (inf when any seed never reaches the target)."""
    x = np.asarray(x, float)
    if not np.all(np.isfinite(x)):
        return np.inf, np.inf, np.inf
    m = float(x.mean())
    if x.size < 2:
        return m, m, m
    h = float(stdtrit(x.size - 1, 0.5 + confidence / 2) * x.std(ddof=1) / np.sqrt(x.size))
    return m, m - h, m + h


def strag_key(cfg: dict) -> str:
    return ",".join(f"{k}={cfg[k]}" for k in sorted(cfg))


def index_runs(recs: list[Recording]) -> dict:
    """(technique, n_params, N, straggler key) -> recordings (one per seed)."""
    out: dict = {}
    for r in recs:
        out.setdefault((r.technique, r.n_params, r.n, strag_key(r.straggler)), []).append(r)
    return out


def simulated_cells(recs: list[Recording], target: float, bws, lats, stragglers: dict[str, dict]) -> pd.DataFrame:
    """Every measured (size, N) x network x straggler cell, per technique (long table)."""
    idx = index_runs(recs)
    none = strag_key({"model": "none"})
    B, L = np.meshgrid(np.asarray(bws, float), np.asarray(lats, float), indexing="ij")
    bw, lat = B.ravel(), L.ravel()
    rows = []
    for (t, P, N, sk) in sorted({(k[0], k[1], k[2], k[3]) for k in idx}):
        if sk != none:
            continue
        for sname, scfg in stragglers.items():
            runs = idx.get((t, P, N, strag_key(scfg))) if arrival_dependent(t) else None
            trained = runs is not None
            runs = runs or idx[(t, P, N, none)]
            times, valid = [], np.ones(bw.size, dtype=bool)
            for r in runs:
                tt, v = time_to_target(r, target, lat, bw, scfg)
                times.append(tt)
                valid &= v
            T = np.array(times)  # (seeds, cells)
            fin = np.all(np.isfinite(T), axis=0)
            m = np.where(fin, T.mean(axis=0), np.inf)
            if T.shape[0] > 1:
                h = stdtrit(T.shape[0] - 1, 0.975) * np.where(fin, T.std(axis=0, ddof=1), 0) / np.sqrt(T.shape[0])
            else:
                h = np.zeros_like(m)
            rows.append(pd.DataFrame({
                "technique": t, "n_params": P, "N": N, "straggler": sname, "bandwidth_Bps": bw, "latency_s": lat,
                "time_s": m, "lo_s": m - h, "hi_s": m + h, "seeds": T.shape[0], "valid": valid,
                "trained_under_straggler": trained, "label": "simulated"}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def winners(cells: pd.DataFrame, keys=("n_params", "N", "straggler", "bandwidth_Bps", "latency_s")) -> pd.DataFrame:
    """Winner, its time and interval, runner-up and ratio, tie flag per cell (valid entries only)."""
    ok = cells[cells["valid"] & np.isfinite(cells["time_s"])].sort_values("time_s", kind="stable")
    g = ok.groupby(list(keys), sort=True)
    first = g.nth(0).set_index(list(keys))
    second = g.nth(1).set_index(list(keys))
    out = first[["technique", "time_s", "lo_s", "hi_s", "label"]].rename(columns={"technique": "winner"})
    out["runner_up"] = second["technique"].reindex(out.index)
    out["ratio"] = (second["time_s"].reindex(out.index) / out["time_s"])
    out["tie"] = (second["lo_s"].reindex(out.index) <= out["hi_s"]).fillna(False)
    return out.reset_index()


# ------------------------------------------------------------------ projection

def projected_cells(recs: list[Recording], target: float, P: float, N: int, s: int, clock, lat, bw,
                    straggler: dict) -> pd.DataFrame:
    """Every technique at an unmeasured (P, N) on the cells (lat, bw arrays): time per step from the
    projected clock (:mod:`distlab.atlas.projection`) x the step-efficiency ratio against DDP
    (:mod:`distlab.atlas.efficiency`; beyond 10x from the runs a published ratio or none -- then
    ranked by time per step alone, ``basis`` none) x DDP's steps at the nearest measured cell (a
    common scale).  Label ``extrapolated``."""
    from .efficiency import efficiency_at, fit_log_ratio, measured_ratios
    from .projection import pattern_of, step_seconds

    cells, obs = measured_ratios(recs, target)
    fits = {t: f for t, f in ((t, fit_log_ratio(t, o)) for t, o in obs.items()) if f is not None}
    sizes, nws = sorted({r.n_params for r in recs}), sorted({r.n for r in recs})
    ddp = {(c.n_params, c.N): c.ddp_steps for c in cells if c.technique == "ddp"}
    if not ddp:
        return pd.DataFrame()
    K = ddp[min(ddp, key=lambda pn: abs(np.log(pn[0] / P)) + abs(np.log(pn[1] / N)))]
    shape = np.broadcast(np.atleast_1d(lat), np.atleast_1d(bw)).shape
    rows = []
    for t in sorted({r.technique for r in recs}):
        if kind(t) == "master" and not 0 <= s < N:
            continue
        if t in ("gc-fr", "pgc-fr") and N % (s + 1):
            continue
        e = efficiency_at(t, P, N, cells, fits, sizes, nws, {}, use_published=True)
        per = step_seconds(pattern_of(recs, t, N), P, N, s, clock, lat, bw, straggler)
        note = ("steps from the no-straggler runs" if arrival_dependent(t) and straggler["model"] != "none" else "")
        rows.append(pd.DataFrame({"technique": t, "n_params": P, "N": N, "time_s": per * e.ratio * K,
                                  "lo_s": per * e.lo * K, "hi_s": per * e.hi * K, "per_step_s": per,
                                  "ratio": e.ratio, "basis": e.basis,
                                  "bandwidth_Bps": np.broadcast_to(bw, shape), "latency_s": np.broadcast_to(lat, shape),
                                  "valid": np.ones(shape, dtype=bool), "note": note, "label": "extrapolated"}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


ALL = tuple(TECHNIQUES)
