"""Job time of the simulated drivers with the N workers' passes batched against the per-worker loop.

Interleaved A/B in one process, one torch thread: each repeat runs every job once with the
batched passes (:mod:`distlab.techniques.batched`) and once with ``batched.LOOP = True`` (the
per-worker loop the drivers ran before), alternating which arm goes first, and the ratio of the
two (batched / loop) is taken per repeat, of the job's wall time and of the process's CPU time (on a
machine shared with other work far less disturbed).  Prints each job's median ratio with its min
and max over the repeats, and a JSON line of every time and the load average before and after.

    PYTHONPATH=src python scripts/bench_batched.py --data <pydoc data dir> [--steps 60 --repeats 5]

The atlas jobs are run specs of config/config.yaml's atlas section (stored compute profile, as the
workflow runs them).  The DeMo jobs are the demo section's simulated specs at N = 2 with
``cluster.compute.mode: calibrated``: under the section's measured compute the driver keeps the
per-worker timed loop, so both arms would be the loop.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from distlab.atlas import train as atlas_train  # noqa: E402
from distlab.atlas.workflow import base_spec  # noqa: E402
from distlab.config.yamlio import load_yaml_strict  # noqa: E402
from distlab.demo import train as demo_train  # noqa: E402
from distlab.demo.workflow import DemoWorkflow  # noqa: E402
from distlab.techniques import batched  # noqa: E402

ATLAS_JOBS = [("ddp", "small", 2), ("demo", "small", 2), ("diloco", "large", 4), ("pgc-fr", "large", 4),
              ("powersgd", "large", 4), ("is-demo", "large", 4)]
DEMO_JOBS = ["adamw", "demo"]


def jobs(cfg: dict, steps: int) -> list[tuple[str, object]]:
    a = cfg["atlas"]
    out = []
    for t, size, n in ATLAS_JOBS:
        spec = base_spec(a, t, size, n, 0, 0.01, {"model": "none"}, steps=steps)
        out.append((f"atlas {t} {size} N={n}", lambda d, spec=spec: atlas_train.run_simulated(spec, d[0], d[1])))
    wf = DemoWorkflow(cfg)
    for m in DEMO_JOBS:
        spec = json.loads(wf.spec(m, 2, 0, "simulated", lr=0.003, steps=steps))
        spec["cluster"]["compute"] = {"mode": "calibrated", "unit_seconds": 0.1, "scale": 1.0}
        rt = {"checkpoint": {"every_s": 0, "every_steps": 0}}
        out.append((f"demo {m} N=2 calibrated",
                    lambda d, spec=spec, rt=rt: demo_train.run_simulated(spec, d[0], d[1], rt)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="the prepared pydoc text data set")
    ap.add_argument("--config", default=str(ROOT / "config/config.yaml"))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_yaml_strict(args.config)
    todo = jobs(cfg, args.steps)
    times = {name: {"batched": [], "loop": []} for name, _ in todo}
    cpu = {name: {"batched": [], "loop": []} for name, _ in todo}
    load0 = list(os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(-1, args.repeats):  # repeat -1 warms up (first calls, caches) and is not kept
            for name, run in todo:
                arms = ["batched", "loop"] if r % 2 == 0 else ["loop", "batched"]
                for arm in arms:
                    batched.LOOP = arm == "loop"
                    out = Path(tmp) / f"r{r}" / name.replace(" ", "_") / arm
                    t0, c0 = time.perf_counter(), time.process_time()
                    run((args.data, out))
                    if r >= 0:
                        times[name][arm].append(time.perf_counter() - t0)
                        cpu[name][arm].append(time.process_time() - c0)
    batched.LOOP = False
    for what, tab in (("wall", times), ("cpu", cpu)):
        for name, t in tab.items():
            ratio = np.array(t["batched"]) / np.array(t["loop"])
            print(f"{what:4s} {name:30s} loop {np.median(t['loop']):6.2f} s  batched {np.median(t['batched']):6.2f} s"
                  f"  ratio median {np.median(ratio):.2f} (min {ratio.min():.2f}, max {ratio.max():.2f})")
    print(json.dumps({"steps": args.steps, "repeats": args.repeats, "loadavg_before": load0,
                      "loadavg_after": list(os.getloadavg()), "wall_s": times, "cpu_s": cpu}))


if __name__ == "__main__":
    main()
