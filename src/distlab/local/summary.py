"""Run directories of the local-learning experiment -> tidy tables.

* steps table: every run's per-step rows, with ``group``, ``method``, ``seed``;
* runs table (the scorecard's input): one row per run with the held-out
  losses, the run's own measured tokens/s and training seconds, and the peak
  RSS of all of its processes summed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..runs import write_csv


def collect(run_dirs: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    steps, runs = [], []
    for d in run_dirs:
        d = Path(d)
        if d.name == "manifest.json":
            d = d.parent
        manifest = json.loads((d / "manifest.json").read_text())
        spec = manifest["spec"]
        metrics = pd.read_csv(d / "metrics.csv")
        keys = {"group": spec.get("group", ""), "method": manifest["method"], "seed": int(spec["seed"]),
                "n_layer": int(spec["model"]["n_layer"])}
        steps.append(metrics.assign(**{k: v for k, v in keys.items() if k != "method"}))
        runs.append({
            **keys,
            "final_val_loss": float(manifest["final"]["val_loss"]),
            "final_test_loss": float(manifest["final"]["test_loss"]),
            "final_train_loss": float(metrics["loss"].tail(max(1, len(metrics) // 10)).mean()),
            "tokens_per_s": float(manifest["tokens_per_s"]),
            "train_s": float(manifest["train_s"]),
            "peak_rss_mb": float(manifest["peak_rss_mb"]),
            "processes": int(manifest.get("processes", 1)),
            "steps": int(spec["steps"]),
            "tokens": int(metrics["tokens"].iloc[-1]),
        })
    if not runs:
        raise ValueError("local summarize: no runs given")
    runs_df = pd.DataFrame(runs).sort_values(["group", "method", "seed"]).reset_index(drop=True)
    dup = runs_df.duplicated(["group", "method", "seed"])
    if dup.any():
        raise ValueError(f"local summarize: duplicate runs {runs_df[dup][['group', 'method', 'seed']].to_dict('records')}")
    return pd.concat(steps, ignore_index=True), runs_df


def summarize(run_dirs: list[Path], steps_out: Path, summary_out: Path) -> None:
    steps, runs = collect(run_dirs)
    write_csv(steps, steps_out)
    write_csv(runs, summary_out)
