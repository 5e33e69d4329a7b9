"""The atlas's clock held against measured points, not only a simulated table.

``data/atlas/diloco_measured.csv`` holds the compute utilisation that Adnan082/diloco-measured
measured for DDP and DiLoCo on 4 L40S GPUs over tc-shaped TCP (its numbers, with their source
in the file's header).  :func:`compare` computes every point with the atlas's own clock
(:func:`distlab.atlas.projection.step_seconds`) from the settings that source states -- its
compute seconds per step, its bytes per synchronisation (30,846,720 parameters in fp32), its
shaped rate, no added latency (tc shapes the bandwidth only) -- over the same measurement window
(the run's steps after its warmup, a synchronisation after every H-th step), with no per-point
fitting, and reports each point's error and the link's achieved fraction that the measured
seconds imply.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..config.specs import SpecError
from .projection import LINK_RANGE, ClockSettings, Pattern, step_seconds

MEASURED_PATH = "data/atlas/diloco_measured.csv"
PARAMS = 30_846_720        # the source's model (configs/models/30m-realvocab.toml)
BYTES_PER_PARAM = 4.0      # synchronised in fp32 (the source's methods/wire_model.md)
COLUMNS = ("run", "algorithm", "H", "workers", "bandwidth_bps", "iperf_bps", "steps", "warmup", "compute_s",
           "sync_blocked_s", "total_s", "cu_measured", "repeat")


def load_points(path=None) -> pd.DataFrame:
    """The measured points, checked: :class:`SpecError` naming the file and the first bad row."""
    from .profile import ROOT

    p = Path(path) if path is not None else ROOT / MEASURED_PATH
    try:
        df = pd.read_csv(p, comment="#")
    except (OSError, ValueError) as e:
        raise SpecError(f"{p}: cannot read the measured points ({type(e).__name__})") from None
    if tuple(df.columns) != COLUMNS:
        raise SpecError(f"{p}: columns must be {', '.join(COLUMNS)}")
    for i, r in df.iterrows():
        where = f"{p}: row {i + 1} ({r['run']})"
        if r["algorithm"] not in ("ddp", "diloco") or (r["algorithm"] == "ddp" and r["H"] != 1):
            raise SpecError(f"{where}: algorithm must be ddp (H = 1) or diloco")
        nums = [r[c] for c in ("bandwidth_bps", "compute_s", "sync_blocked_s", "total_s", "cu_measured")]
        if not all(np.isfinite(v) and v > 0 for v in nums):
            raise SpecError(f"{where}: rates, seconds and utilisation must be positive")
        if not (r["H"] >= 1 and r["workers"] >= 2 and 0 <= r["warmup"] < r["steps"]):
            raise SpecError(f"{where}: need H >= 1, workers >= 2, 0 <= warmup < steps")
        if not np.isclose(r["cu_measured"], r["compute_s"] / r["total_s"], rtol=1e-6):
            raise SpecError(f"{where}: cu_measured must be compute_s / total_s")
        if syncs_in_window(r["H"], r["steps"], r["warmup"]) < 1:
            raise SpecError(f"{where}: no synchronisation in the measurement window")
    return df


def syncs_in_window(H: int, steps: int, warmup: int) -> int:
    """Synchronisations in the window (steps ``warmup`` .. ``steps - 1``; one after every H-th step)."""
    return sum(1 for s in range(int(warmup), int(steps)) if (s + 1) % int(H) == 0)


def holds_first_sync(H: int, warmup: int) -> bool:
    """Whether the window holds the run's first synchronisation (after step H - 1)."""
    return int(H) - 1 >= int(warmup)


def sync_seconds(r, link_fraction: float = 1.0, latency: float = 0.0, overlap: bool = True) -> float:
    """The clock's seconds one synchronisation adds to its H steps (an all-reduce of the
    parameters over ``workers`` at ``link_fraction`` x the shaped rate), by ``step_seconds``."""
    W = int(r["steps"]) - int(r["warmup"])
    t = float(r["compute_s"]) / W
    H = int(r["H"])
    tech = "ddp" if r["algorithm"] == "ddp" else "diloco"
    pat = Pattern(tech, H, [[] for _ in range(H - 1)] + [[("all_reduce", BYTES_PER_PARAM)]])
    # compute_s(P) = 6 P x 1 token / (6 P / t) = t: the source's compute seconds per step
    cs = ClockSettings(flops_per_s=6.0 * PARAMS / t, tokens=1, overlap=overlap)
    per = step_seconds(pat, PARAMS, int(r["workers"]), 0, cs, [latency],
                       [float(r["bandwidth_bps"]) / 8 * link_fraction], steps=H)[0]
    return H * (per - t)


def clock_cu(r, link_fraction: float = 1.0, latency: float = 0.0, overlap: bool = True) -> float:
    """The clock's compute utilisation over the point's window: compute / (compute + its syncs)."""
    n = syncs_in_window(r["H"], r["steps"], r["warmup"])
    return float(r["compute_s"]) / (float(r["compute_s"]) + n * sync_seconds(r, link_fraction, latency, overlap))


def compare(points: pd.DataFrame, link_range=LINK_RANGE, latency: float = 0.0) -> pd.DataFrame:
    """Per point: the measured and the clock's utilisation (at the nominal rate, and over the
    link's stated achieved fraction ``link_range``), the error (clock / measured), the achieved
    fraction the measured seconds imply (the clock's seconds of a sync at the nominal rate / the
    measured seconds blocked per sync), whether the window holds the run's first sync, whether the
    measured value lies inside the clock's interval."""
    rows = []
    for _, r in points.iterrows():
        n = syncs_in_window(r["H"], r["steps"], r["warmup"])
        cu = clock_cu(r, 1.0, latency)
        lo, hi = clock_cu(r, link_range[0], latency), clock_cu(r, link_range[1], latency)
        rows.append({"run": r["run"], "algorithm": r["algorithm"], "H": int(r["H"]),
                     "bandwidth_bps": float(r["bandwidth_bps"]), "syncs": n, "cu_measured": float(r["cu_measured"]),
                     "cu_clock": cu, "cu_clock_lo": lo, "cu_clock_hi": hi, "error": cu / float(r["cu_measured"]),
                     "achieved_fraction": sync_seconds(r, 1.0, latency) / (float(r["sync_blocked_s"]) / n),
                     "first_sync": holds_first_sync(r["H"], r["warmup"]),
                     "inside": bool(lo * (1 - 1e-9) <= r["cu_measured"] <= hi * (1 + 1e-9))})
    return pd.DataFrame(rows)


def summary(cmp: pd.DataFrame) -> pd.DataFrame:
    """One row per (algorithm, H, bandwidth): medians over the repeats (the source's own summary)."""
    g = cmp.groupby(["algorithm", "H", "bandwidth_bps"], sort=True)
    out = g[["cu_measured", "cu_clock", "cu_clock_lo", "cu_clock_hi", "error", "achieved_fraction"]].median()
    out["repeats"] = g.size()
    out["inside"] = g["inside"].all()
    out["first_sync"] = g["first_sync"].all()
    return out.reset_index()


def markdown(cmp: pd.DataFrame) -> str:
    """The summary as the docs print it (``python -m distlab atlas measured``)."""
    from .query import fmt_bits

    lines = ["| technique | H | shaped rate | runs | measured CU | clock CU at the shaped rate | clock over "
             f"{LINK_RANGE[0]:g}..{LINK_RANGE[1]:g} of it | clock / measured | achieved fraction | inside |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary(cmp).itertuples():
        lines.append(f"| {'DDP' if r.algorithm == 'ddp' else 'DiLoCo'} | {r.H} | {fmt_bits(r.bandwidth_bps)} | "
                     f"{r.repeats} | {100 * r.cu_measured:.3g} % | {100 * r.cu_clock:.3g} % | "
                     f"[{100 * r.cu_clock_lo:.3g}, {100 * r.cu_clock_hi:.3g}] % | {r.error:.2f}x | "
                     f"{r.achieved_fraction:.2f} | {'yes' if r.inside else 'no'}"
                     + (" (window holds the first sync)" if r.first_sync else "") + " |")
    return "\n".join(lines)
