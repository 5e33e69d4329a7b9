"""Memory of a run's processes, with each page counted once.

Summing every process's peak RSS counts a page that several processes map
(the torch libraries every interpreter loads, the pages a forked section
shares with the coordinator until it writes them) once per process.  The
kernel's proportional set size (PSS, ``/proc/<pid>/smaps_rollup``) charges a
shared page to each of the ``n`` processes that map it by ``1/n``, so PSS
summed over processes counts every page once; the unique set size (USS:
private clean + private dirty) counts only the pages no other process maps.
Both are read at a moment (the kernel keeps no peak of them); a run reads
them at the end of training, when every buffer, gradient and optimizer state
exists.  Beside them: the peak RSS of the largest process (``ru_maxrss``, a
true peak, of one process).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

FIELDS = ("Rss", "Pss", "Private_Clean", "Private_Dirty")


def rollup(pid: int | None = None) -> dict[str, float]:
    """``{"rss_mb", "pss_mb", "uss_mb"}`` of process ``pid`` (this one by default), now.
    Where the kernel has no ``smaps_rollup`` (not Linux, or before 4.14) the values are NaN."""
    path = Path(f"/proc/{pid or os.getpid()}/smaps_rollup")
    got: dict[str, float] = {}
    try:
        for line in path.read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in FIELDS:
                got[key] = float(rest.split()[0]) / 1024.0  # kB -> MB
    except OSError:
        return {"rss_mb": float("nan"), "pss_mb": float("nan"), "uss_mb": float("nan")}
    return {"rss_mb": got.get("Rss", float("nan")), "pss_mb": got.get("Pss", float("nan")),
            "uss_mb": got.get("Private_Clean", 0.0) + got.get("Private_Dirty", 0.0)}


def peak_rss_self_mb() -> float:
    """This process's peak resident set (Linux reports ``ru_maxrss`` in kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def snapshot() -> dict[str, float]:
    """What one process reports about itself: its rollup now and its peak RSS so far."""
    return {**rollup(), "peak_rss_mb": peak_rss_self_mb()}


def combine(per_process: list[dict[str, float]]) -> dict[str, float]:
    """A run's memory from its processes' snapshots: PSS and USS summed (each page once),
    the largest process's peak RSS, and the old upper bound (peak RSS summed)."""
    if not per_process:
        raise ValueError("memory: no process snapshots")
    return {"pss_mb": sum(p["pss_mb"] for p in per_process),
            "uss_mb": sum(p["uss_mb"] for p in per_process),
            "max_rss_mb": max(p["peak_rss_mb"] for p in per_process),
            "rss_sum_mb": sum(p["peak_rss_mb"] for p in per_process)}
