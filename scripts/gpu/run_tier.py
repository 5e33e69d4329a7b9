#!/usr/bin/env python3
"""Run the GPU tier (config/gpu.yaml) on a lent GPU machine without Snakemake (docs/gpu.md).

    PYTHONPATH=$PWD/src python scripts/gpu/run_tier.py --out "$OUT"              # the ~5-minute slice
    PYTHONPATH=$PWD/src python scripts/gpu/run_tier.py --out "$OUT" --all        # every job, to the budget
    PYTHONPATH=$PWD/src python scripts/gpu/run_tier.py --out /tmp/t --tiny       # toy size on the CPU (a check)

It records the machine (GPU, torch, driver), measures one worker-step of every model the tier
trains on the device, re-plans with those measurements, then runs the jobs that fit the slice
(--slice-s, default gpu_tier.slice_s) and writes jobs.csv and README.md under --out.
Exit 0 when every job it started ran, 1 when one failed; a mistake is one line and exit 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
# what distlab's trainers import besides torch (scikit-learn only to prepare the digits: --data)
REQUIRED = ("numpy", "pandas", "yaml", "jsonschema", "tqdm", "psutil")


SNAPSHOT_FILES = ("README.md", "jobs.csv", "machine.json", "calibration.json", "plan_assumed.txt", "plan_measured.txt")


def snapshot(run: Path, dest: Path) -> int:
    """The GPU tier's results as a snapshot of their own: the record files of a run, not its run folders."""
    import json
    import shutil

    missing = [f for f in SNAPSHOT_FILES if not (run / f).is_file()]
    if missing:
        print(f"run_tier: --snapshot {run}: not a finished tier run (missing {', '.join(missing)})", file=sys.stderr)
        return 2
    if not json.loads((run / "machine.json").read_text()).get("gpus"):
        print(f"run_tier: --snapshot {run}: that run had no GPU (machine.json); the GPU tier's snapshot "
              "holds GPU runs only", file=sys.stderr)
        return 2
    dest.mkdir(parents=True, exist_ok=True)
    for f in SNAPSHOT_FILES:
        shutil.copy2(run / f, dest / f)
    print(f"{dest}: {', '.join(SNAPSHOT_FILES)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT"), help="output folder (default: $OUT)")
    p.add_argument("--configfile", nargs="+", default=[str(ROOT / "config" / "gpu.yaml")])
    p.add_argument("--slice-s", type=float, default=None, help="seconds for the jobs (default gpu_tier.slice_s)")
    p.add_argument("--all", action="store_true", help="every job of the plan, not only the slice's")
    p.add_argument("--tiny", action="store_true", help="the tier shrunk to toy size on the CPU (checks the runner)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None, help="override the sections' device")
    p.add_argument("--data", default=None, help="prepared data sets (<dir>/<name>/manifest.json); default OUT/data")
    p.add_argument("--prepare-only", action="store_true", help="only prepare the data sets into --data (to carry)")
    p.add_argument("--snapshot", metavar="RUN", default=None,
                   help="copy a finished tier run's record (README, jobs, machine, calibration, plans) to "
                        "paper/gpu/ and stop")
    a = p.parse_args(argv)
    if a.snapshot:
        return snapshot(Path(a.snapshot), ROOT / "paper" / "gpu")
    missing = [m for m in REQUIRED if importlib.util.find_spec(m) is None]
    if missing:
        print(f"run_tier: missing Python packages {', '.join(missing)}: carry them on PYTHONPATH (docs/gpu.md)",
              file=sys.stderr)
        return 2
    from distlab.gpu.plan import load_config, shrink
    from distlab.gpu.runner import run_tier
    from distlab.config.specs import SpecError

    if not a.out and not (a.prepare_only and a.data):
        print("run_tier: --out DIR (or $OUT) is required", file=sys.stderr)
        return 2
    try:
        cfg = load_config(a.configfile, ROOT)
    except SpecError as e:
        print(f"run_tier: {e}", file=sys.stderr)
        return 2
    if a.tiny:
        cfg = shrink(cfg)
    if a.prepare_only:
        from distlab.gpu.plan import plan
        from distlab.gpu.runner import prepare_data

        names = {j.data for j in plan(cfg)} | {cfg["atlas"]["dataset"]}
        for name, d in prepare_data(cfg, names, Path(a.data or Path(a.out) / "data")).items():
            print(f"{name}: {d}")
        return 0
    if a.device:  # the sections whose simulated jobs the tier runs on the device (Paper.gpu_tier_device)
        from distlab.papers import papers

        for p in papers():
            if p.gpu_tier_device:
                cfg[p.section]["device"] = a.device
    if a.device == "cuda" or (a.device is None and not a.tiny):
        import torch

        if not torch.cuda.is_available():
            print("run_tier: torch finds no CUDA device here; run with --tiny (CPU) or --device cpu", file=sys.stderr)
            return 2
    slice_s = a.slice_s if a.slice_s is not None else float(cfg["gpu_tier"].get("slice_s", 300))
    if a.all and a.slice_s is None:
        slice_s = float(cfg["gpu_tier"]["budget_s"])
    res = run_tier(cfg, Path(a.out), slice_s, only_slice=not a.all, calibration_steps=4 if a.tiny else 12,
                   data_root=Path(a.data) if a.data else None)
    failed = [r for r in res["rows"] if r["status"] == "failed"]
    for r in failed:
        print(f"failed: {r['job']}: {r['error']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
