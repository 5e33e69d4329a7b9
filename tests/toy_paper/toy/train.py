"""The toy's trainer: noisy gradient descent on f(x) = x^2 / 2 from x = 1 (no torch)."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

from .spec import SPEC_SCHEMA  # noqa: F401 (the Trainer contract)

NEEDS_DATA = False   # its spec is all it reads
SETS_THREADS = True  # no torch: no threads to set


def run_simulated(spec: dict, data_dir, out_dir, runtime: dict) -> None:
    rng = random.Random(spec["seed"])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    x, rows = 1.0, []
    for step in range(1, spec["steps"] + 1):
        x -= spec["lr"] * (x + 0.01 * rng.gauss(0.0, 1.0))
        rows.append({"step": step, "loss": 0.5 * x * x})
    with open(out / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["step", "loss"])
        w.writeheader()
        w.writerows(rows)
    (out / "manifest.json").write_text(json.dumps({"spec": spec, "final_loss": rows[-1]["loss"]}, sort_keys=True))
