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
  trend of the steps themselves); a technique without a ratio there is listed apart,
  not ranked.

The winner of a cell is the lowest mean of its ranked entries; ``tie`` when the
runner-up's interval reaches the winner's; ``ratio`` = runner-up / winner.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
# Student's t quantile as scipy.stats.t.ppf computes it (stdtrit), without importing scipy.stats
# (about a second of the query's start)
from scipy.special import stdtrit

from .cells import _ratio_cell, overlaps_leader
from .record import Recording
from .replay import time_to_target
from ..techniques.catalogue import in_groups
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


def ranked_mask(cells: pd.DataFrame) -> pd.Series:
    """Which rows take part in a cell's ranking: a simulated row (its steps are its run's own) and
    a projected row with a step ratio (``ranked``); a projected row without one is listed apart."""
    if "ranked" not in cells:
        return pd.Series(True, index=cells.index)
    unset = cells["ranked"].isna()
    return unset | cells["ranked"].where(~unset, True).astype(bool)


def _apart(rows: list[dict], lead: dict) -> str:
    """The techniques of a cell listed apart (no step ratio at its distance), fastest per step
    first, each with its break-even step ratio: the steps/DDP at or under which it would match the
    leader (the leader's time to target / (its time per step x DDP's steps))."""
    out = []
    for r in sorted(rows, key=lambda r: r["per_step_s"]):
        need = lead["time_s"] / (r["per_step_s"] * r["ddp_steps"])
        out.append(f"{r['technique']} (matches {lead['technique']} if steps/DDP <= {need:.3g})")
    return "; ".join(out)


def _steps_ratio(r: dict) -> str:
    """A projected leader's step ratio and its interval as the query prints them (``exact``,
    ``(one run)``, ``(given)`` where there is no interval); empty for a simulated cell."""

    if r.get("label") != "extrapolated":
        return ""
    ratio, spread = _ratio_cell(r)
    return f"{ratio} {spread}"


def winners(cells: pd.DataFrame, keys=("n_params", "N", "straggler", "bandwidth_Bps", "latency_s")) -> pd.DataFrame:
    """Per cell, among its ranked valid entries (:func:`ranked_mask`): the winner, its time and
    interval, what its steps rest on (``basis``: ``replay`` for a simulated cell, else the ratio's:
    reference, measured, fit, published, user) and its step ratio (``steps_ratio``), the runner-up
    and ratio (runner-up / winner), ``tie`` where the runner-up's interval reaches the winner's (for
    projected cells at the same MFU and link fraction, the query's rule), and the techniques
    listed apart (``apart``: no step ratio there, each with its break-even step ratio)."""

    c = cells[cells["valid"].astype(bool)].copy()
    c["ranked"] = ranked_mask(c)
    out = []
    for k, g in c.groupby(list(keys), sort=True):
        recs = g.to_dict("records")
        ranked = sorted((r for r in recs if r["ranked"] and np.isfinite(r["time_s"])), key=lambda r: r["time_s"])
        if not ranked:
            continue
        lead = ranked[0]
        second = ranked[1] if len(ranked) > 1 else None
        apart = [r for r in recs if not r["ranked"] and np.isfinite(r.get("per_step_s", np.nan))]
        basis = lead.get("basis")
        out.append({**dict(zip(keys, k)), "winner": lead["technique"], "time_s": lead["time_s"],
                    "lo_s": lead["lo_s"], "hi_s": lead["hi_s"], "label": lead["label"],
                    "runner_up": second["technique"] if second else np.nan,
                    "ratio": second["time_s"] / lead["time_s"] if second else np.nan,
                    "tie": bool(second is not None and overlaps_leader(second, lead)),
                    "basis": basis if isinstance(basis, str) else "replay", "steps_ratio": _steps_ratio(lead),
                    "apart": _apart(apart, lead)})
    cols = list(keys) + ["winner", "time_s", "lo_s", "hi_s", "label", "runner_up", "ratio", "tie", "basis",
                         "steps_ratio", "apart"]
    return pd.DataFrame(out, columns=cols)


# ------------------------------------------------------------------ projection

def _projected_frame(t: str, P: float, N: int, K: float, e, per, p_lo, p_hi, lat, bw, note: str) -> pd.DataFrame:
    """One technique's projected rows: ranked with its ratio (time = per step x ratio x K, the
    interval the clock's corners x the ratio's), or, without one (basis none), its time per step
    only, listed apart (no time to target)."""
    ranked = e.basis != "none"
    r = e.ratio if ranked else np.nan
    r_lo = e.lo if np.isfinite(e.lo) else r
    r_hi = e.hi if np.isfinite(e.hi) else r
    if not ranked:
        note = "; ".join(x for x in ("steps to target unknown here: listed apart", note) if x)
    return pd.DataFrame({"technique": t, "n_params": P, "N": N, "time_s": per * r * K, "lo_s": p_lo * r_lo * K,
                         "hi_s": p_hi * r_hi * K, "per_step_s": per, "per_step_lo_s": p_lo, "per_step_hi_s": p_hi,
                         "ratio": r, "ratio_lo": e.lo if ranked else np.nan, "ratio_hi": e.hi if ranked else np.nan,
                         "ratio_spread": e.spread, "basis": e.basis, "ranked": ranked, "ddp_steps": K,
                         "bandwidth_Bps": bw, "latency_s": lat, "valid": np.ones(bw.shape, dtype=bool),
                         "note": note, "label": "extrapolated"})


def projected_cells(recs: list[Recording], target: float, P: float, N: int, s: int, clock, lat, bw,
                    straggler: dict) -> pd.DataFrame:
    """Every technique at an unmeasured (P, N) on the cells (lat, bw arrays): time per step from the
    projected clock (:mod:`distlab.atlas.projection`) over its stated ranges (``clock.bounds()``:
    MFU and the link's achieved fraction, as the query's) x the step-efficiency ratio against DDP
    (:mod:`distlab.atlas.efficiency`: measured, fitted within 10x of the runs, published) x DDP's
    steps at the nearest measured cell (a common scale).  A technique without a ratio there (basis
    none) is not ranked (``ranked`` False, no time to target): :func:`winners` lists it apart.
    Label ``extrapolated``."""
    from .efficiency import efficiency_at, fit_log_ratio, measured_ratios
    from .projection import pattern_of, step_seconds

    cells, obs = measured_ratios(recs, target)
    fits = {t: f for t, f in ((t, fit_log_ratio(t, o)) for t, o in obs.items()) if f is not None}
    sizes, nws = sorted({r.n_params for r in recs}), sorted({r.n for r in recs})
    ddp = {(c.n_params, c.N): c.ddp_steps for c in cells if c.technique == "ddp"}
    if not ddp:
        return pd.DataFrame()
    K = ddp[min(ddp, key=lambda pn: abs(np.log(pn[0] / P)) + abs(np.log(pn[1] / N)))]
    lat, bw = (np.array(x, dtype=float) for x in np.broadcast_arrays(np.atleast_1d(lat), np.atleast_1d(bw)))
    (fast, f_hi), (slow, f_lo) = clock.bounds()
    rows = []
    for t in sorted({r.technique for r in recs}):
        if kind(t) == "master" and not 0 <= s < N:
            continue
        if in_groups(t) and N % (s + 1):
            continue
        e = efficiency_at(t, P, N, cells, fits, sizes, nws, {}, use_published=True)
        pat = pattern_of(recs, t, N)
        per = step_seconds(pat, P, N, s, clock, lat, bw, straggler)
        p_lo = step_seconds(pat, P, N, s, fast, lat, bw * f_hi, straggler)
        p_hi = step_seconds(pat, P, N, s, slow, lat, bw * f_lo, straggler)
        note = ("steps from the no-straggler runs" if arrival_dependent(t) and straggler["model"] != "none" else "")
        rows.append(_projected_frame(t, P, N, K, e, per, p_lo, p_hi, lat, bw, note))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


ALL = tuple(TECHNIQUES)
