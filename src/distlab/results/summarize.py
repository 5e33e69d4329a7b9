"""Tidy tables from run directories: the only input of figures, tables and the scorecard.

``collect`` reads every run's ``metrics.csv`` and ``manifest.json`` and returns

* a per-step table (all runs stacked, with the run's settings as columns), and
* a run-level table, one row per run: mean time per step, final losses,
  bytes, steps and time to a loss threshold, wall time, peak RSS, the
  simulator's own overhead.

Settings columns come from the run spec: ``SETTING_KEYS`` at the top level,
plus the straggler model's ``model`` and ``mean`` as ``straggler`` and
``delay_mean``.

Large per-step tables are written as parquet, small summaries as CSV: the
format follows the file's suffix on both sides (:func:`write_table_file`,
:func:`read_table_file`).

Two loss-threshold rules, both declared in a run's ``threshold`` spec:
``steps_to_threshold`` (the paper's: ``repeat`` consecutive mini-batch
losses at or below ``loss``) and ``steps_to_threshold_ma`` (the moving
average of the last ``window`` mini-batch losses at or below ``loss``, less
noisy).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from ..data.errors import DataError, one_line
from .runs import RunEdited, check_sealed, provenance
from .tables import ResultError  # noqa: F401 (part of this module's interface)

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


def write_table_file(df: pd.DataFrame, path: str | Path) -> None:
    """Write ``df`` atomically as parquet (``.parquet``/``.pq``) or CSV, by suffix."""
    from .tables import atomic_output

    suffix = Path(path).suffix.lower()
    with atomic_output(path) as tmp:
        if suffix in (".parquet", ".pq"):
            df.to_parquet(tmp, index=False)
        elif suffix == ".csv":
            df.to_csv(tmp, index=False)
        else:
            raise ValueError(f"cannot write {path}: expected .csv or .parquet")


def read_table_file(path: str | Path) -> pd.DataFrame:
    """A table by suffix, checked as :func:`distlab.results.tables.read_table_checked` checks it (a
    truncated CSV, or one that no longer matches its record, is a one-line error)."""
    from .tables import read_table_checked

    return read_table_checked(path)


def steps_to_threshold_ma(loss: np.ndarray, threshold: float, window: int) -> int | None:
    """Steps taken until the mean of the last ``window`` losses is <= threshold
    (only full windows count: at least ``window`` steps)."""
    ma = pd.Series(np.asarray(loss, dtype=float)).rolling(window, min_periods=window).mean().to_numpy()
    hit = np.flatnonzero(ma <= threshold)
    return int(hit[0]) + 1 if len(hit) else None


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
    if "lost_workers" in manifest:
        row["lost_workers"] = float(len(manifest["lost_workers"]))
    if "compute_max" in m:  # compute of the slowest worker the master used (s; simulated or measured)
        row["compute_per_step"] = float(m["compute_max"].mean())
    for k, v in manifest.get("final", {}).items():
        row[f"final_{k}"] = float(v)
    for k in ("simulator_overhead_s", "gradient_compute_s", "compute_measured_s",
              "compute_charged_measured_s", "units_per_worker_step", "encode_s", "decode_s",
              "unit_seconds_charged", "unit_compute_s",
              "params_max_abs_diff_across_ranks", "late_messages"):
        if manifest.get(k) is not None:
            row[k] = float(manifest[k])
    if "train_loss_full" in m:  # the whole-split loss at the eval step nearest 3/4 of the run, and its
        # drop from there to the end: a comparison's horizon (the gap's change over the last quarter)
        ev = m[m["train_loss_full"].notna()]
        if len(ev) >= 2:
            at = ev.iloc[int(np.argmin(np.abs(ev["step"].to_numpy(float) - 0.75 * (len(m) - 1))))]
            row["train_loss_full_3q"] = float(at["train_loss_full"])
            row["late_drop_train_loss_full"] = float(at["train_loss_full"]) - float(ev["train_loss_full"].iloc[-1])
    thr = spec.get("threshold")
    if thr is not None:
        k = steps_to_threshold(m["loss"].to_numpy(), float(thr["loss"]), int(thr.get("repeat", 3)))
        row["threshold"] = float(thr["loss"])
        row["reached"] = k is not None
        # a run that never reaches it is censored at its length (a lower bound)
        row["steps_to_threshold"] = float(k if k is not None else len(m))
        row["time_to_threshold"] = float(m["time"].iloc[(k or len(m)) - 1])
        window = int(thr.get("window", 10))
        k2 = steps_to_threshold_ma(m["loss"].to_numpy(), float(thr["loss"]), window)
        row["reached_ma"] = k2 is not None
        row["steps_to_threshold_ma"] = float(k2 if k2 is not None else len(m))
        row["time_to_threshold_ma"] = float(m["time"].iloc[(k2 or len(m)) - 1])
    return row


METRICS_COLUMNS = ("step", "time", "step_time", "loss", "bytes")


def read_run(d: str | Path) -> tuple[dict, pd.DataFrame]:
    """A finished run's manifest and metrics, checked: both files there, the manifest a JSON
    object with its spec, the metrics complete (ending in a newline: a file cut mid-line is
    refused, not read with its last row half empty) with their columns and at least one row.
    Raises :class:`ResultError` naming the file."""
    d = Path(d)
    if d.name == "manifest.json":
        d = d.parent
    fix = f"rerun the run (snakemake --forcerun the rule that writes {d})"
    mpath, cpath = d / "manifest.json", d / "metrics.csv"
    if not d.is_dir():
        raise ResultError(f"{d}: the run folder is missing (deleted?); {fix}")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultError(f"{mpath}: missing: the run did not finish (a run writes its manifest last); "
                          f"{fix}") from None
    except (OSError, ValueError) as e:
        raise ResultError(f"{mpath}: unreadable ({one_line(e)[:120]}); {fix}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("spec"), dict) \
            or "clock" not in manifest or "backend" not in manifest:
        raise ResultError(f"{mpath}: not a run manifest (no spec, clock or backend); {fix}")
    try:
        raw = cpath.read_bytes()
    except FileNotFoundError:
        raise ResultError(f"{cpath}: missing beside its manifest; {fix}") from None
    if not raw.endswith(b"\n"):
        raise ResultError(f"{cpath}: truncated ({len(raw)} bytes, its last line unfinished); {fix}")
    try:
        metrics = pd.read_csv(cpath, dtype={"received": str})
    except (ValueError, pd.errors.ParserError) as e:
        raise ResultError(f"{cpath}: unreadable ({one_line(e)[:120]}); {fix}") from None
    missing = [c for c in METRICS_COLUMNS if c not in metrics.columns]
    if missing:
        raise ResultError(f"{cpath}: no column(s) {', '.join(missing)}; {fix}")
    if metrics.empty:
        raise ResultError(f"{cpath}: no rows; {fix}")
    try:
        check_sealed(d, manifest)  # neither file edited since the run finished
    except RunEdited as e:
        raise ResultError(str(e)) from None
    return manifest, metrics


def collect(run_dirs: Iterable[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    steps, runs = [], []
    for d in run_dirs:
        manifest, metrics = read_run(d)
        settings = settings_of(manifest["spec"])
        steps.append(metrics.assign(**{k: v for k, v in settings.items() if k not in metrics}))
        runs.append(summarize_run(metrics, manifest))
    if not runs:
        raise ResultError("no run directories given")
    return pd.concat(steps, ignore_index=True), pd.DataFrame(runs)
