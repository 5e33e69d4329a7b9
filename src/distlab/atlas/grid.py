"""The map: which technique reaches the target first on which cluster, with intervals.

Cells: bandwidth x latency x straggler model x workers N x model size.

* **simulated** — a (size, N) that was trained here: each seed's recording
  replayed on the cell (:mod:`distlab.atlas.replay`); the time to target is the
  mean over seeds with a 95 % t-interval.  An arrival-dependent technique uses
  the run trained under the cell's straggler model where there is one, else the
  no-straggler run, and the cell is *invalid* for it wherever the replayed
  fastest-set differs from the recorded one (its trajectory would differ there);
  invalid entries take no part in the ranking.
* **extrapolated** — any other (size, N): the step from FLOP and byte arithmetic
  (:func:`synthetic_time`: FLOPs per pass at a stated FLOP rate, the message
  pattern of the largest measured size scaled linearly in parameters) and the
  steps to target from a fitted trend ``log k = a + b log P + c log N`` per
  technique (:class:`Trend`), whose residual standard error gives the interval.

The winner of a cell is the lowest mean; ``tie`` when its interval overlaps the
runner-up's; ``ratio`` = runner-up / winner.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from .clock import Clock, tie_order
from .record import Recording
from .replay import straggler_model, time_to_target
from .spec import TECHNIQUES, arrival_dependent, kind

SYNTH_STEPS = 256  # steps the extrapolated clock simulates; the rest scale linearly


def interval(x: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and t-interval over seeds (inf when any seed never reaches the target)."""
    x = np.asarray(x, float)
    if not np.all(np.isfinite(x)):
        return np.inf, np.inf, np.inf
    m = float(x.mean())
    if x.size < 2:
        return m, m, m
    h = float(stats.t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))
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
                h = stats.t.ppf(0.975, T.shape[0] - 1) * np.where(fin, T.std(axis=0, ddof=1), 0) / np.sqrt(T.shape[0])
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


# ------------------------------------------------------------------ extrapolation

@dataclass
class Trend:
    """``log k = a + b log P + c log N`` fitted on one technique's measured steps-to-target."""

    technique: str
    coef: np.ndarray
    sigma: float          # residual standard error (log steps); nan with no residual dof
    points: int
    p_range: tuple[float, float]

    def predict(self, P: float, N: float) -> tuple[float, float, float]:
        x = np.array([1.0, np.log(P), np.log(N)])
        k = float(np.exp(x @ self.coef))
        s = self.sigma if np.isfinite(self.sigma) else np.inf
        return k, k * np.exp(-1.96 * s), k * np.exp(1.96 * s)


def fit_trends(recs: list[Recording], target: float) -> dict[str, Trend]:
    """One trend per technique from its no-straggler runs that reached the target on every seed."""
    idx = index_runs(recs)
    none = strag_key({"model": "none"})
    pts: dict[str, list] = {}
    for (t, P, N, sk), runs in idx.items():
        if sk != none:
            continue
        ks = [r.steps_to_target(target) for r in runs]
        if all(k is not None and k > 0 for k in ks):
            pts.setdefault(t, []).append((P, N, float(np.mean(ks))))
    out = {}
    for t, p in pts.items():
        p = np.array(p)
        X = np.column_stack([np.ones(len(p)), np.log(p[:, 0]), np.log(p[:, 1])])
        y = np.log(p[:, 2])
        if len(p) < 3 or np.linalg.matrix_rank(X) < 3:
            continue
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        dof = len(p) - 3
        sigma = float(np.sqrt(((X @ coef - y) ** 2).sum() / dof)) if dof > 0 else float("nan")
        out[t] = Trend(t, coef, sigma, len(p), (float(p[:, 0].min()), float(p[:, 0].max())))
    return out


def pattern_of(recs: list[Recording], technique: str, N: int) -> tuple[Recording, int]:
    """The largest measured size's recording of ``technique`` (same N if any), and its cycle."""
    cand = [r for r in recs if r.technique == technique and r.straggler.get("model") == "none"]
    same = [r for r in cand if r.n == N] or cand
    r = max(same, key=lambda r: (r.n_params, -abs(r.n - N)))
    cycle = int((r.spec or {}).get("diloco", {}).get("H", 10)) if technique.startswith("diloco") else 1
    return r, cycle


def passes_per_step(technique: str, s: int) -> int:
    return {"gc-fr": s + 1, "gc-cr": s + 1, "is-gc": 2}.get(technique, 1)


def synthetic_time(rec: Recording, cycle: int, P: float, N: int, s: int, steps: float, flops_per_s: float,
                   tokens: int, lat, bw, straggler: dict, seed: int = 0) -> np.ndarray:
    """Seconds for ``steps`` steps of ``rec.technique`` at P parameters on N workers (per cell):
    compute = passes x 6 P tokens / flops_per_s; bytes = the recording's pattern x P / its P."""
    t = rec.technique
    scale = P / rec.n_params
    comp = passes_per_step(t, s) * 6.0 * P * tokens / flops_per_s
    strag = straggler_model(straggler, seed)
    clock = Clock(N, lat, bw, strag.compute_factor(N))
    m = int(min(max(1, round(steps)), SYNTH_STEPS))
    compute = np.full(N, comp)
    for step in range(m):
        src = rec.steps[step % cycle]
        d = strag.delays(step, N)[None]
        if kind(t) == "sync":
            clock.sync(compute, d, [(k, b * scale) for k, b in src["colls"]])
        else:
            wait = N - s
            msg = src["msg_bytes"] * scale
            bcast = wait * msg if t == "is-demo" else src["bcast_bytes"] * scale
            clock.master(compute, d, msg, bcast, wait, 0.0, tie_order(seed, step, N))
    return clock.now * (steps / m)


def extrapolated(recs, trends, target, P, N, s, flops_per_s, tokens, lat, bw, straggler) -> pd.DataFrame:
    """Every technique with a trend at (P, N) on the cells (lat, bw arrays)."""
    rows = []
    for t, tr in sorted(trends.items()):
        if kind(t) == "master" and not 0 <= s < N:
            continue
        if t in ("gc-fr", "pgc-fr") and N % (s + 1):
            continue
        k, klo, khi = tr.predict(P, N)
        rec, cycle = pattern_of(recs, t, N)
        per = synthetic_time(rec, cycle, P, N, s, min(k, SYNTH_STEPS), flops_per_s, tokens, lat, bw, straggler) \
            / min(k, SYNTH_STEPS)
        shape = np.broadcast(np.atleast_1d(lat), np.atleast_1d(bw)).shape
        valid = np.ones(shape, dtype=bool)
        note = ("steps from the no-straggler runs" if arrival_dependent(t) and straggler["model"] != "none" else "")
        rows.append(pd.DataFrame({"technique": t, "n_params": P, "N": N, "time_s": per * k, "lo_s": per * klo,
                                  "hi_s": per * khi, "steps": k, "fit_sigma": tr.sigma,
                                  "bandwidth_Bps": np.broadcast_to(bw, valid.shape),
                                  "latency_s": np.broadcast_to(lat, valid.shape), "valid": valid, "note": note,
                                  "label": "extrapolated"}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def measured_flops_per_s(recs: list[Recording]) -> float:
    """This machine's FLOP rate: median over steps and workers of FLOPs / measured compute seconds."""
    r = [rec.flops() / np.maximum(rec.compute(), 1e-12) for rec in recs if rec.technique == "ddp"] or \
        [rec.flops() / np.maximum(rec.compute(), 1e-12) for rec in recs]
    return float(np.median(np.concatenate([x.ravel() for x in r])))


ALL = tuple(TECHNIQUES)
