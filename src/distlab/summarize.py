"""Tidy tables from run directories: the only input of figures, tables and the scorecard.

``collect`` reads every run's ``metrics.csv`` and ``manifest.json`` and returns

* a per-step table (all runs stacked, with the run's settings as columns), and
* a run-level table, one row per run: mean time per step, final losses,
  bytes, steps and time to a loss threshold, wall time, peak RSS, the
  simulator's own overhead.

Settings columns come from the run spec: ``SETTING_KEYS`` at the top level,
plus the straggler model's ``model`` and ``mean`` as ``straggler`` and
``delay_mean``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from .runs import provenance

SETTING_KEYS = ("experiment", "group", "scheme", "method", "backend", "n", "n_workers", "s",
                "c", "seed", "batch_size", "lr")


def settings_of(spec: dict) -> dict:
    out = {k: spec[k] for k in SETTING_KEYS if k in spec}
    strag = spec.get("cluster", {}).get("straggler", {})
    out["straggler"] = strag.get("model", "none")
    out["delay_mean"] = float(strag.get("mean", 0.0))
    comp = spec.get("cluster", {}).get("compute", {})
    if comp:
        out["compute_mode"] = comp.get("mode")
        out["unit_seconds"] = float(comp.get("unit_seconds", np.nan))
    return out


def steps_to_threshold(loss: np.ndarray, threshold: float, repeat: int) -> int | None:
    """Steps taken until the loss has been <= threshold for ``repeat`` consecutive steps."""
    run = 0
    for i, v in enumerate(loss):
        run = run + 1 if v <= threshold else 0
        if run >= repeat:
            return i + 1
    return None


def summarize_run(metrics: pd.DataFrame, manifest: dict) -> dict:
    spec = manifest["spec"]
    m = metrics.sort_values("step")
    row = settings_of(spec)
    row.update(
        clock=manifest["clock"],
        run_backend=manifest["backend"],
        steps=int(len(m)),
        time_per_step=float(m["step_time"].mean()),
        total_time=float(m["time"].iloc[-1]),
        final_loss=float(m["loss"].tail(max(1, len(m) // 20)).mean()),
        bytes_per_step=float(m["bytes"].mean()),
        wall_s=float(manifest.get("wall_s", np.nan)),
        peak_rss_mb=float(manifest.get("peak_rss_mb", np.nan)),
        **provenance(manifest),
    )
    if "compute_max" in m:  # compute of the slowest worker the master used (s; simulated or measured)
        row["compute_per_step"] = float(m["compute_max"].mean())
    for k, v in manifest.get("final", {}).items():
        row[f"final_{k}"] = float(v)
    for k in ("simulator_overhead_s", "gradient_compute_s", "compute_measured_s",
              "units_per_worker_step",
              "params_max_abs_diff_across_ranks", "late_messages"):
        if k in manifest:
            row[k] = float(manifest[k])
    thr = spec.get("threshold")
    if thr is not None:
        k = steps_to_threshold(m["loss"].to_numpy(), float(thr["loss"]), int(thr.get("repeat", 3)))
        row["threshold"] = float(thr["loss"])
        row["reached"] = k is not None
        # a run that never reaches it is censored at its length (a lower bound)
        row["steps_to_threshold"] = float(k if k is not None else len(m))
        row["time_to_threshold"] = float(m["time"].iloc[(k or len(m)) - 1])
    return row


def collect(run_dirs: Iterable[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    steps, runs = [], []
    for d in run_dirs:
        d = Path(d)
        if d.name == "manifest.json":
            d = d.parent
        manifest = json.loads((d / "manifest.json").read_text())
        metrics = pd.read_csv(d / "metrics.csv")
        settings = settings_of(manifest["spec"])
        steps.append(metrics.assign(**{k: v for k, v in settings.items() if k not in metrics}))
        runs.append(summarize_run(metrics, manifest))
    if not runs:
        raise ValueError("no run directories given")
    return pd.concat(steps, ignore_index=True), pd.DataFrame(runs)
