"""``distlab atlas query``: the ranking on a user's own cluster, from the map's recordings.

The answer is (time per step) x (steps to target), asked apart: the time per step from the
clock (the replay of the recordings where the query is a measured size and worker count on
this machine, else :mod:`distlab.atlas.projection`), the steps to target as a step-efficiency
ratio against DDP (:mod:`distlab.atlas.efficiency`) times DDP's steps.  Nothing is ranked from
a partial atlas: :func:`check_complete` names the missing runs and refuses.

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
from .efficiency import FAR, Efficiency, efficiency_at, evidence_distance, fit_log_ratio, measured_ratios
from .cells import _finite, _fmt, _ratio_cell, overlaps_leader  # noqa: F401 (overlaps_leader: the query's API)
from .grid import simulated_cells
from .projection import ClockSettings, passes_per_step, pattern_of, step_interval, step_seconds
from .record import Recording
from ..techniques.catalogue import in_groups
from .spec import arrival_dependent, kind

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



def check_complete(a: dict, runs_dir) -> list[Recording]:
    """The atlas's recordings under ``runs_dir`` (the techniques' folder, or a pack of them:
    :mod:`distlab.atlas.pack`, e.g. the snapshot's ``paper/atlas/query_pack.json.gz``) if
    every run the ``atlas:`` section ``a`` asks for is there; else :class:`QueryError` naming the
    missing runs (a job still running, a config overlay whose runs were never made)."""
    import json
    from pathlib import Path

    from .pack import is_pack, read_pack
    from .profile import mode
    from .workflow import run_specs, techniques

    root = Path(runs_dir)
    missing, recs = [], []
    packed = None
    if is_pack(root):
        head, packed = read_pack(root)
        if head["compute"] != "measured" and mode(a) == "measured":
            raise QueryError(f"--runs: {root} keeps no measured compute seconds (packed for atlas.compute: "
                             f"{head['compute']}); query it with a config whose atlas.compute is stored")
    try:
        names = techniques(a)
        want_models = {json.dumps(m, sort_keys=True): k
                       for k, m in {**(a.get("trend") or {}).get("sizes", {}), **a["sizes"]}.items()}
    except (KeyError, TypeError, AttributeError) as e:
        raise QueryError(f"--config: the atlas section lacks or misstates {e}") from None
    for t in names:
        if packed is not None:
            if t not in packed:
                missing.append(f"{t} (not in the pack {root})")
                continue
            loaded = packed[t]
        else:
            done = root / t / "done.json"
            if not done.is_file():
                missing.append(f"{t} (no {done})")
                continue
            try:
                dirs = json.loads(done.read_text())["runs"]
            except (OSError, ValueError, KeyError, TypeError):
                missing.append(f"{t} (unreadable {done})")
                continue
            loaded = []
            for d in dirs:
                try:
                    loaded.append(Recording.load(d))
                except (OSError, ValueError, KeyError):
                    missing.append(f"{t}: {d} (no readable record)")
        have = set()
        for r in loaded:
            recs.append(r)
            size = want_models.get(json.dumps((r.spec or {}).get("model"), sort_keys=True))
            strag = r.straggler.get("model")
            have.add((size, r.n, r.seed, json.dumps(r.straggler, sort_keys=True) if strag != "none" else "none"))
        try:
            want = run_specs({**a, "compute": "measured"}, t, 1.0, None)  # which runs, not what they charge
        except (KeyError, TypeError) as e:
            raise QueryError(f"--config: the atlas section lacks or misstates {e}") from None
        for label, spec in want:
            size = want_models.get(json.dumps(spec["model"], sort_keys=True))
            st = spec["cluster"]["straggler"]
            key = (size, spec["n_workers"], spec["seed"],
                   "none" if st.get("model") == "none" else json.dumps(st, sort_keys=True))
            if key not in have:
                missing.append(f"{t}/{label}")
    if missing:
        more = f" and {len(missing) - 6} more" if len(missing) > 6 else ""
        raise QueryError(f"--runs: the atlas under {root} is partial ({len(missing)} missing: "
                         f"{'; '.join(missing[:6])}{more}); finish `snakemake atlas` (or query with the config "
                         f"the runs were made with) -- a partial set is not ranked")
    return recs


BE_GRID = np.geomspace(1e3, 1e13, 81)  # bytes/s: 8 kbit/s .. 80 Tbit/s, for the break-even bandwidths


def fmt_bits(x: float) -> str:
    """A rate in bit/s with its SI prefix, e.g. ``52 Gbit/s``."""
    for f, u in ((1e12, "Tbit/s"), (1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if x >= f * (1 - 1e-9):
            return f"{x / f:.3g} {u}"
    return f"{x:.3g} bit/s"


def break_even_phrase(faster, grid=BE_GRID) -> str:
    """One phrase for where ``faster`` (a bool per bandwidth of ``grid``, bytes/s ascending) holds:
    ``always faster in``/``never faster in`` the grid's span, else ``faster below X``, ``faster
    above X``, ``faster between X and Y`` (joined by ``and`` where it holds on several spans); a
    crossing is read at the geometric middle of the two grid points around it."""
    faster = np.asarray(faster, dtype=bool)
    span = f"{fmt_bits(grid[0] * 8)}..{fmt_bits(grid[-1] * 8)}"
    if faster.all():
        return f"always faster in {span}"
    if not faster.any():
        return f"never faster in {span}"

    def edge(i: int) -> str:  # between grid points i and i + 1
        return fmt_bits(float(np.sqrt(grid[i] * grid[i + 1])) * 8)

    d = np.diff(np.concatenate([[0], faster.astype(int), [0]]))
    parts = []
    for a, b in zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1) - 1):
        if a == 0:
            parts.append(f"below {edge(b)}")
        elif b == faster.size - 1:
            parts.append(f"above {edge(a - 1)}")
        else:
            parts.append(f"between {edge(a - 1)} and {edge(b)}")
    return "faster " + " and ".join(parts)


def _break_even(eff: dict[str, np.ndarray], grid=BE_GRID, per_step: frozenset = frozenset()) -> dict[str, str]:
    """Per technique, its phrase against DDP from its time to target on the bandwidth grid (of
    ``per_step``'s techniques, their time per step: at DDP's steps, said so)."""
    out = {}
    if "ddp" not in eff:
        return out
    d = eff["ddp"]
    for t, e in eff.items():
        if t == "ddp":
            continue
        if not (np.isfinite(e) | np.isfinite(d)).any():
            out[t] = "-"
            continue
        with np.errstate(invalid="ignore"):
            faster = ~np.isnan(e) & ~np.isnan(d) & (e < d)
        out[t] = ("at DDP's steps, " if t in per_step else "") + break_even_phrase(faster, grid)
    return out


def _projected_rows(recs, a, names, params, workers, bandwidth, latency, straggler, s, clock, K, cells, fits,
                    sizes, nws, user_eff, use_published, be_eff) -> list[dict]:
    """The rows of the projected clock: time per step and its interval over the clock's stated
    ranges, the ratio and what it rests on; a technique without a ratio is not ranked."""
    rows = []
    lat_grid = np.full(BE_GRID.size + 1, latency)
    for t in names:
        if kind(t) == "master" and in_groups(t) and workers % (s + 1):
            rows.append({"technique": t, "valid": False, "ranked": False, "label": "projected", "time_s": np.nan,
                         "basis": "-", "rests_on": "not run: N not divisible by s + 1", "ratio_spread": "-",
                         "note": f"needs N divisible by s + 1 = {s + 1}"})
            continue
        pat = pattern_of(recs, t, workers)
        per = step_seconds(pat, params, workers, s, clock, lat_grid, np.concatenate([[bandwidth], BE_GRID]), straggler)
        p_lo, p_hi = step_interval(pat, params, workers, s, clock, latency, bandwidth, straggler)
        e = efficiency_at(t, params, workers, cells, fits, sizes, nws, user_eff, use_published)
        ranked = e.basis != "none"
        r = e.ratio if ranked else np.nan
        r_lo = e.lo if np.isfinite(e.lo) else r
        r_hi = e.hi if np.isfinite(e.hi) else r
        be_eff[t] = per[1:] * (r if ranked else 1.0)
        note = []
        if arrival_dependent(t) and straggler.get("model") != "none":
            note.append("ratio from the no-straggler runs")
        if kind(t) == "master" and s != int(a.get("s", s)):
            note.append(f"ratio measured at s = {a.get('s')}")
        rows.append({"technique": t, "per_step_s": per[0], "per_step_lo_s": p_lo, "per_step_hi_s": p_hi,
                     "ratio": r, "ratio_lo": e.lo, "ratio_hi": e.hi, "ratio_spread": e.spread, "basis": e.basis,
                     "rests_on": e.detail, "time_s": per[0] * r * K, "lo_s": p_lo * r_lo * K,
                     "hi_s": p_hi * r_hi * K, "steps": r * K,
                     "compute_to_target_s": clock.compute_s(params, passes_per_step(t, s)) * r * K, "valid": True,
                     "ranked": ranked, "label": "projected", "note": "; ".join(note)})
    return rows


def _replay_rows(grid, params, workers, bandwidth, latency, straggler, target, cells, fits, sizes, nws, user_eff,
                 use_published, be_eff) -> list[dict]:
    """The rows of the replay at a measured size and N: the seeds' simulated time to target and
    its interval, the measured ratio and what it rests on."""
    rows = []
    sub = [r for r in grid if (r.n_params, r.n) == (int(params), workers)]
    bws = np.concatenate([[bandwidth], BE_GRID])
    with np.errstate(invalid="ignore"):
        sim = simulated_cells(sub, target, bws, [latency], {"query": straggler})
    if sim.empty:
        raise QueryError("--runs: no recordings at this size and N")
    for t, g in sim.groupby("technique", sort=True):
        g = g.reset_index(drop=True)
        valid = g["valid"].to_numpy()
        tt = np.where(valid, g["time_s"].to_numpy(), np.nan)
        be_eff[t] = tt[1:]
        e = efficiency_at(t, params, workers, cells, fits, sizes, nws, user_eff, use_published)
        own = [r for r in sub if r.technique == t and r.straggler.get("model") == "none"]
        ks = [r.steps_to_target(target) for r in own]
        k = float(np.mean(ks)) if ks and all(x is not None for x in ks) else np.nan
        # the compute no step can avoid: per step the least-charged worker's, summed to the target
        comp = (float(np.mean([r.compute()[:kk].min(axis=1).sum() for r, kk in zip(own, ks)]))
                if np.isfinite(k) else np.nan)
        rows.append({"technique": t, "per_step_s": g["time_s"].iloc[0] / k if np.isfinite(k) and k > 0 else np.nan,
                     "ratio": e.ratio, "ratio_lo": e.lo, "ratio_hi": e.hi, "ratio_spread": e.spread,
                     "basis": e.basis, "rests_on": e.detail, "ranked": e.basis != "none",
                     "time_s": g["time_s"].iloc[0], "lo_s": g["lo_s"].iloc[0], "hi_s": g["hi_s"].iloc[0],
                     "steps": k, "compute_to_target_s": comp, "valid": bool(valid[0]), "label": "simulated",
                     "note": "" if valid[0] else "trajectory differs on this cluster: not ranked"})
    return rows


def _order(df: pd.DataFrame, K: float, be_eff: dict, per_step: frozenset) -> pd.DataFrame:
    """Ranked rows first, fastest first (then the unranked by time per step), the tie flags, the
    step ratio each row would need to match the leader, the phrase against DDP."""
    df["time_s"] = df["time_s"].astype(float).where(np.isfinite(df["time_s"].astype(float)), np.inf)
    if "ranked" not in df:
        df["ranked"] = df["valid"]
    df["ranked"] = df["ranked"].fillna(False).astype(bool) & df["valid"].astype(bool)
    key = np.where(df["ranked"], df["time_s"], df.get("per_step_s", pd.Series(np.nan, index=df.index)).astype(float))
    df = df.assign(_key=np.where(np.isfinite(key), key, np.inf))
    df = df.sort_values(["ranked", "valid", "_key"], ascending=[False, False, True], kind="stable")
    df = df.drop(columns="_key").reset_index(drop=True)
    lead = df.iloc[0]
    df["tie"] = False
    df["break_even_ratio"] = np.nan
    if lead["ranked"] and np.isfinite(lead["time_s"]):
        if np.isfinite(lead.get("hi_s", np.nan)):
            df["tie"] = [bool(i > 0 and overlaps_leader(r, lead)) for i, r in df.iterrows()]
            if df["tie"].any():
                df.loc[0, "tie"] = True
        if "per_step_s" in df:
            df["break_even_ratio"] = lead["time_s"] / (df["per_step_s"].astype(float) * K)
    be = _break_even(be_eff, per_step=per_step)
    df["break_even"] = [be.get(t, "") for t in df["technique"]]
    return df


def rank(recs: list[Recording], a: dict, params: float, workers: int, bandwidth: float, latency: float,
         straggler: dict, s: int, clock: ClockSettings | None, user_eff: dict[str, float] | None = None,
         use_published: bool = False, ddp_steps: float | None = None) -> tuple[pd.DataFrame, dict]:
    """One row per technique, fastest first, and what the answer rests on.

    Besides the columns below, ``steps`` (steps to the target: the seeds' mean at a replayed cell,
    else ratio x DDP's steps) and ``compute_to_target_s`` (the compute no step can avoid, summed to
    the target: per step the least-charged worker's at a replayed cell, else the projected clock's
    compute per step x ``steps``).

    ``clock`` None: the replay of the recordings (only at a measured size and N); else the
    projected clock with these settings.  Columns: time per step, the ratio and its interval and
    basis, time to target (= per step x ratio x DDP's steps) with its interval, ``tie`` (the
    interval reaches the leader's), the break-even bandwidth against DDP, a note."""
    if not recs:
        raise QueryError("--runs: no recordings found")
    target = float(a["target_loss"])
    user_eff = user_eff or {}
    sizes = sorted({r.n_params for r in recs})
    nws = sorted({r.n for r in recs})
    if workers < 2:
        raise QueryError(f"--workers: need at least 2, got {workers}")
    if not 0 <= s < workers:
        raise QueryError(f"--s: the codes tolerate s stragglers of the workers, need 0 <= s < {workers}, got {s}")
    dP, dN = evidence_distance(params, workers, sizes, nws)
    if max(dP, dN) > FAR and not user_eff and not use_published:
        raise QueryError(f"--params/--workers: {params:g} parameters on {workers} workers is "
                         f"{10 ** dP:.3g}x outside the measured sizes {sizes[0]}..{sizes[-1]} and {10 ** dN:.3g}x "
                         f"outside the measured N {nws[0]}..{nws[-1]}; beyond {10 ** FAR:g}x the steps to target "
                         f"are not known here: give --efficiency (e.g. ddp=1,diloco=1.9, a YAML file, or 'published')")
    cells, obs = measured_ratios(recs, target)
    fits = {t: f for t, f in ((t, fit_log_ratio(t, o)) for t, o in obs.items()) if f is not None}
    # a measured cell is one of the full grid's (every technique ran there); a trend cell (atlas.trend,
    # a few techniques) informs the ratios' fit only
    grid = [r for r in recs if not r.trend]
    measured_cell = (int(params), workers) in {(r.n_params, r.n) for r in grid} and float(params) == int(params)
    ddp_cells = {(c.n_params, c.N): c.ddp_steps for c in cells if c.technique == "ddp"}
    if ddp_steps is not None:
        K, k_basis = float(ddp_steps), "given with --ddp-steps"
    elif ddp_cells:
        near = min(ddp_cells, key=lambda pn: (abs(np.log(pn[0] / params)) + abs(np.log(pn[1] / workers))))
        K = ddp_cells[near]
        k_basis = ("measured here" if near == (int(params), workers) else
                   f"DDP's measured steps at {near[0]} parameters, N = {near[1]} (a common scale: the ranking "
                   f"does not depend on it; --ddp-steps sets it)")
    else:
        raise QueryError("--runs: DDP never reaches the target in these runs: no steps to target to scale by")
    if ddp_steps is None:
        ks = [r.steps_to_target(target) for r in recs if r.technique == "ddp" and (r.n_params, r.n) == near
              and r.straggler.get("model") == "none"]
        k_basis += f"; over its {len(ks)} seeds {min(ks)}..{max(ks)} steps, a spread common to every row"
    rows = []
    be_eff: dict[str, np.ndarray] = {}
    names = sorted({r.technique for r in recs})
    if clock is None:
        if not measured_cell:
            raise QueryError("--flops-per-s/--device: a size or worker count that was not measured needs the "
                             "projected clock")
        rows = _replay_rows(grid, params, workers, bandwidth, latency, straggler, target, cells, fits, sizes,
                            nws, user_eff, use_published, be_eff)
    else:
        rows = _projected_rows(recs, a, names, params, workers, bandwidth, latency, straggler, s, clock, K, cells,
                               fits, sizes, nws, user_eff, use_published, be_eff)
    df = pd.DataFrame(rows)
    unknown = frozenset(df.loc[df["basis"] == "none", "technique"])
    df = _order(df, K, be_eff, unknown)
    info = {"K": K, "K_basis": k_basis, "sizes": sizes, "workers": nws, "dP": dP, "dN": dN, "target": target,
            "cells": cells, "clock": clock, "measured_cell": measured_cell and clock is None}
    return df, info


QUERY_COLUMNS = ("technique", "per_step_s", "per_step_lo_s", "per_step_hi_s", "ratio", "ratio_lo", "ratio_hi",
                 "ratio_spread", "basis", "steps", "compute_to_target_s", "time_s", "lo_s", "hi_s", "valid", "ranked",
                 "tie", "break_even_ratio", "label", "break_even", "note")


def ranking_csv(df: pd.DataFrame, info: dict) -> str:
    """The ranking as CSV (``--format csv``): :data:`QUERY_COLUMNS`, then DDP's steps ``ddp_steps``
    (the common scale) and how far the query is from the runs (``decades_outside_sizes``,
    ``decades_outside_workers``)."""
    out = df.reindex(columns=list(QUERY_COLUMNS)).copy()
    out["ddp_steps"] = info["K"]
    out["decades_outside_sizes"] = info["dP"]
    out["decades_outside_workers"] = info["dN"]
    return out.to_csv(index=False)


def _span(lo, hi, unit: str = "") -> str:
    if not (lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi)):
        return "-"
    return f"[{_fmt(lo)}, {_fmt(hi)}]{unit}"


def format_ranking(df: pd.DataFrame, info: dict | None = None) -> str:
    """The ranked techniques (each naming its basis), then those whose steps to target are not
    known here, apart, with their time per step and the step ratio each would need to match the
    leader; then what the numbers rest on."""
    head = (f"{'rank':>4}  {'technique':<12} {'s/step':>9} {'[interval]':>19} x {'steps/DDP':>9} {'[interval]':>13} "
            f"{'basis':<9} = {'time to target':>14} {'[interval]':>21}  tie  break-even against DDP")
    lines = [head]
    ranked = df[df["ranked"]] if "ranked" in df else df
    for i, r in ranked.iterrows():
        ratio, riv = _ratio_cell(r)
        tie = "tie" if r.get("tie") else ""
        note = r.get("note", "") or ""
        lines.append(f"{i + 1:>4}  {r['technique']:<12} {_fmt(r.get('per_step_s', np.nan), ' s'):>9} "
                     f"{_span(r.get('per_step_lo_s'), r.get('per_step_hi_s'), ' s'):>19} x {ratio:>9} {riv:>13} "
                     f"{str(r.get('basis', '')):<9} = {_fmt(r['time_s'], ' s', 4):>14} "
                     f"{_span(r.get('lo_s'), r.get('hi_s'), ' s'):>21}  {tie:<3}  {r.get('break_even', '')}"
                     + (f"  ({note})" if note else ""))
    rest = df[~df.index.isin(ranked.index)]
    lead = df.iloc[0] if len(ranked) else None
    if len(rest):
        lines.append("")
        lines.append("not ranked: " + ("steps to target unknown this far from the runs (no measured, fitted, "
                                       "published or given ratio: --efficiency gives one), or not run here"))
        for _, r in rest.iterrows():
            need = r.get("break_even_ratio", np.nan)
            beat = (f"matches {lead['technique']} if its steps/DDP <= {_fmt(need)}"
                    if lead is not None and np.isfinite(need) else "")
            why = r.get("note", "") or ("" if r.get("valid", True) else "not ranked")
            lines.append(f"      {r['technique']:<12} {_fmt(r.get('per_step_s', np.nan), ' s'):>9} "
                         f"{_span(r.get('per_step_lo_s'), r.get('per_step_hi_s'), ' s'):>19} per step"
                         + (f"; {beat}" if beat else "") + (f"; {r['break_even']}" if r.get("break_even") else "")
                         + (f"  ({why})" if why else ""))
    if info is not None:
        lines += _footer(df, info)
    return "\n".join(lines)


def _footer(df: pd.DataFrame, info: dict) -> list[str]:
    lines = ["", f"steps to target = ratio x DDP's steps, DDP's steps = {info['K']:.4g} ({info['K_basis']})"]
    clock = info.get("clock")
    if clock is None:
        lines.append("intervals: the replay's over the seeds; the ratio's 95 % prediction interval against DDP "
                     "(paired by seed; DDP's own is exact by definition)")
    else:
        lines.append(f"intervals: the time per step over {clock.assumptions()}; times the ratio's interval where it "
                     f"has one")
    if (df.get("ratio_spread", pd.Series(dtype=str)) == "none: a published ratio from one run").any():
        lines.append("(one run): a published ratio taken from one run has no interval of its own; its time "
                     "interval carries the clock's spread only")
    if (df.get("ratio_spread", pd.Series(dtype=str)) == "none: given without one").any():
        lines.append("(given): a ratio given with --efficiency carries no interval; its time interval is the clock's")
    lines.append(f"evidence: measured sizes {info['sizes']} parameters, N {info['workers']}; the query is "
                 f"{10 ** info['dP']:.3g}x outside the sizes and {10 ** info['dN']:.3g}x outside N (1x = inside)")
    for t, g in sorted(df.groupby("basis")):
        lines.append(f"basis {t}: " + "; ".join(f"{x.technique}: {x.rests_on}" for x in g.itertuples()))
    lines.append("against DDP: where the technique's time to target beats DDP's on 8 kbit/s..80 Tbit/s at this "
                 "latency, by the same clock (central values)")
    if df["tie"].any():
        lines.append("tie: the interval reaches the leader's (for the projected clock, at the same MFU and link "
                     "fraction: those are the cluster's); the order among the tied is not decided")
    return lines
