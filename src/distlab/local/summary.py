"""Run directories of the local-learning experiment -> tidy tables.

* steps table: every run's per-step rows, with ``group``, ``method``, ``seed``;
* runs table (the scorecard's input): one row per run with the held-out
  losses, the run's own measured tokens/s and training seconds, and its memory:
  PSS and USS summed over its processes (each page once), the peak RSS of its
  largest process, and the old upper bound (peak RSS summed);
* staleness table: one row per section of every asynchronous run (readout
  staleness of the applied reports, reports dropped, activation age).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..runs import write_csv


def collect(run_dirs: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    steps, runs, _ = collect_all(run_dirs)
    return steps, runs


def collect_all(run_dirs: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    steps, runs, stale = [], [], []
    for d in run_dirs:
        d = Path(d)
        if d.name == "manifest.json":
            d = d.parent
        manifest = json.loads((d / "manifest.json").read_text())
        spec = manifest["spec"]
        metrics = pd.read_csv(d / "metrics.csv")
        keys = {"group": spec.get("group", ""), "method": manifest["method"], "seed": int(spec["seed"]),
                "n_layer": int(spec["model"]["n_layer"])}
        timed = bool(spec.get("timed", False))  # a run whose clock is compared
        steps.append(metrics.assign(**{k: v for k, v in keys.items() if k != "method"}, timed=timed))
        runs.append({
            **keys,
            "final_val_loss": float(manifest["final"]["val_loss"]),
            "final_test_loss": float(manifest["final"]["test_loss"]),
            "final_train_loss": float(metrics["loss"].tail(max(1, len(metrics) // 10)).mean()),
            "tokens_per_s": float(manifest["tokens_per_s"]),
            "train_s": float(manifest["train_s"]),
            **{k: float(v) for k, v in manifest["memory"].items()},
            "processes": int(manifest.get("processes", 1)),
            "timed": timed,
            "feedback_T": int(spec["feedback"]["T"]) if "feedback" in spec else -1,
            "steps": int(spec["steps"]),
            "tokens": int(metrics["tokens"].iloc[-1]),
            "late_val_drop": late_val_drop(metrics),
        })
        for st in manifest.get("staleness") or []:
            stale.append({**keys, **st})
    if not runs:
        raise ValueError("local summarize: no runs given")
    runs_df = pd.DataFrame(runs).sort_values(["group", "method", "seed"]).reset_index(drop=True)
    dup = runs_df.duplicated(["group", "method", "seed"])
    if dup.any():
        raise ValueError(f"local summarize: duplicate runs {runs_df[dup][['group', 'method', 'seed']].to_dict('records')}")
    runs_df["gap_shrink_late"] = gap_shrink_late(runs_df)
    stale_df = pd.DataFrame(stale, columns=["group", "method", "seed", "n_layer", "section", "bound",
                                            "applied", "dropped", "readout_staleness_mean",
                                            "readout_staleness_max", "activation_age_mean",
                                            "activation_age_max", "updates"])
    return pd.concat(steps, ignore_index=True), runs_df, stale_df


LATE = 2 / 3  # the horizon check looks at the last third of training, as DeMo's does


def late_val_drop(metrics: pd.DataFrame) -> float:
    """How much the validation loss still fell over the last third: its value at the first
    evaluation at or after 2/3 of the steps minus the last one (NaN without two evaluations)."""
    ev = metrics[metrics["val_loss"].notna()].sort_values("step") if "val_loss" in metrics else metrics.iloc[:0]
    late = ev[ev["step"] >= LATE * ev["step"].max()] if len(ev) else ev
    return float(late["val_loss"].iloc[0] - late["val_loss"].iloc[-1]) if len(late) >= 2 else float("nan")


def gap_shrink_late(runs: pd.DataFrame) -> pd.Series:
    """How much a run's gap to BP (same group and seed) shrank over the last third: its
    ``late_val_drop`` minus BP's (0 for BP itself; NaN where the group has no BP run)."""
    bp = runs[runs["method"] == "bp"].set_index(["group", "seed"])["late_val_drop"]
    keys = pd.MultiIndex.from_frame(runs[["group", "seed"]])
    return pd.Series(runs["late_val_drop"].to_numpy() - bp.reindex(keys).to_numpy(), index=runs.index)


def summarize(run_dirs: list[Path], steps_out: Path, summary_out: Path,
              staleness_out: Path | None = None) -> None:
    steps, runs, stale = collect_all(run_dirs)
    write_csv(steps, steps_out)
    write_csv(runs, summary_out)
    if staleness_out is not None:
        write_csv(stale, staleness_out)
