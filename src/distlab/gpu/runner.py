"""The GPU tier without Snakemake: calibrate on the device, re-plan, run the jobs that fit a slice.

What :func:`run_tier` writes under ``out``:

* ``machine.json`` — GPUs, torch, CUDA runtime, NVIDIA driver, cores (:func:`distlab.runtime.device.machine`);
* ``calibration.json`` — one worker's step, measured on the device for every model the tier
  trains (an atlas DDP run at N = 2; the median after its warm-up steps);
* ``plan_assumed.txt``, ``plan_measured.txt`` — the plan before and after the calibration;
* ``jobs.csv`` — every job: ran / failed / not run (the slice's time), its wall seconds
  (measured) against its estimate, and the final validation loss where the run reports one;
* ``runs/<job>/`` — each run's own record and manifest, as the workflow writes them;
* ``README.md`` — the machine and the table, the shape of a ``paper/gpu/`` snapshot.

GPU jobs are trained in this process one after another (torch imported once); CPU jobs (real
multi-process runs, the P3 benchmark) are ``python -m distlab`` subprocesses, run after the GPU
jobs so their timings do not share the host's cores with a training run.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

from .plan import Job, format_plan, model_key, models, plan, totals

NO_CHECKPOINT = {"checkpoint": {"every_s": 0, "every_steps": 0}}


def prepare_data(cfg: dict, names: set[str], root: Path) -> dict[str, Path]:
    from ..data import prepare_dataset

    out = {}
    for name in sorted(names):
        d = root / name
        if not (d / "manifest.json").exists():
            prepare_dataset({"name": name, **cfg["datasets"][name]}, d, seed=int(cfg.get("data_seed", 0)))
        out[name] = d
    return out


def calibrate(cfg: dict, data_dir: Path, out: Path, steps: int = 12, warm: int = 4) -> dict:
    """One worker's step (forward, backward, its share of the update) measured on the tier's device
    for each (model, batch) the GPU jobs train: an atlas DDP run at N = 2, the median of the
    per-worker compute seconds after ``warm`` steps."""
    from ..atlas import train as atlas_train

    a = cfg["atlas"]
    warm = min(warm, steps // 2)
    res = {"worker_step_s": {}, "steps": steps, "warm": warm, "how": "atlas ddp, N = 2, median worker compute"}
    for m, b in models(cfg):
        spec = {"experiment": "atlas", "technique": "ddp", "backend": "simulated", "seed": 0,
                "model": dict(m), "n_workers": 2, "batch_size": int(b), "lr": 1e-3, "steps": steps,
                "eval_every": steps, "eval_batches": 1, "s": 1, "demo": dict(a["demo"]),
                "diloco": dict(a["diloco"]), "powersgd": dict(a["powersgd"]),
                "cluster": {"compute": {"mode": "measured", "unit_seconds": 0.0, "scale": 1.0},
                            "network": dict(a["cluster"]["network"]), "straggler": {"model": "none"}},
                "device": a.get("device", "auto")}
        d = out / "calibration" / model_key(m, b)
        atlas_train.run_simulated(spec, data_dir, d)
        rec = json.loads((d / "record.json").read_text())
        secs = [s for row in rec["steps"][warm:] for s in row["compute_s"]]
        res["worker_step_s"][model_key(m, b)] = statistics.median(secs)
    return res


def _final_loss(run: Path) -> float | None:
    man = run / "manifest.json"
    if not man.exists():
        return None
    m = json.loads(man.read_text())
    v = m.get("final_val_loss", (m.get("final") or {}).get("val_loss") if isinstance(m.get("final"), dict) else None)
    return float(v) if v is not None else None


def _trainer(experiment: str):
    """The simulated trainers the tier's GPU jobs run (those of `distlab train --experiment`)."""
    if experiment == "atlas":
        from ..atlas import train
    elif experiment == "demo":
        from ..demo import train
    else:
        raise ValueError(f"the GPU tier runs no simulated {experiment!r} job")
    return train


def _to_target(run: Path, target: float) -> tuple[int | None, float | None]:
    """An atlas run's first evaluated step whose validation loss is at or below ``target``, and the
    simulated clock there (None, None where it never is)."""
    rec = run / "record.json"
    if not rec.exists():
        return None, None
    for row in json.loads(rec.read_text())["steps"]:
        if row["val_loss"] is not None and row["val_loss"] <= target:
            return int(row["step"]), float(row["time"])
    return None, None


def _run_gpu(job: Job, data: Path, run_dir: Path) -> None:
    from ..config.specs import validate_spec

    experiment = job.command[job.command.index("--experiment") + 1]
    spec = json.loads(job.command[job.command.index("--spec") + 1])
    module = _trainer(experiment)
    spec = validate_spec(spec, module.SPEC_SCHEMA, experiment)
    module.run_simulated(spec, data, run_dir, NO_CHECKPOINT)


def _run_cpu(job: Job, data: Path, run_dir: Path, timeout: float) -> None:
    out = run_dir / "throughput.csv" if job.command[0] == "local-bench" else run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "distlab", *job.command, "--data", str(data), "--out", str(out)]
    with open(run_dir / "log.txt", "w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=True)


def run_jobs(jobs: list[Job], data: dict[str, Path], out: Path, slice_s: float, only_slice: bool = True,
             target: float | None = None) -> list[dict]:
    """Run the jobs in order (GPU jobs first, then CPU jobs) while the slice's time allows: a job
    whose estimate does not fit what is left is recorded as not run.  Returns one row a job."""
    rows = []
    t_start = time.perf_counter()
    ordered = [j for j in jobs if j.resource == "gpu"] + [j for j in jobs if j.resource == "cpu"]
    for job in ordered:
        row = {"job": job.name, "section": job.section, "resource": job.resource, "est_s": round(job.est_s, 3),
               "label": job.label, "status": "", "wall_s": "", "final_val_loss": "", "steps_to_target": "",
               "simulated_s_to_target": "", "error": ""}
        left = slice_s - (time.perf_counter() - t_start)
        if only_slice and job.priority != 0:
            row["status"] = "not run: outside the slice"
        elif job.est_s > left:
            row["status"] = "not run: the slice's time"
        else:
            run_dir = out / "runs" / job.name
            t0 = time.perf_counter()
            try:
                if job.resource == "gpu":
                    _run_gpu(job, data[job.data], run_dir)
                else:
                    _run_cpu(job, data[job.data], run_dir, timeout=max(30.0, left))
                row["status"] = "ran"
            except Exception as e:  # noqa: BLE001 -- one failed job is recorded and the tier goes on
                row["status"] = "failed"
                row["error"] = " ".join(f"{type(e).__name__}: {e}".split())[:300]
                (out / "errors").mkdir(parents=True, exist_ok=True)
                (out / "errors" / (job.name.replace("/", "_") + ".txt")).write_text(traceback.format_exc())
            row["wall_s"] = round(time.perf_counter() - t0, 3)
            loss = _final_loss(run_dir)
            row["final_val_loss"] = "" if loss is None else round(loss, 5)
            if job.section == "atlas" and target is not None:
                k, t = _to_target(run_dir, target)
                row["steps_to_target"] = "" if k is None else k
                row["simulated_s_to_target"] = "" if t is None else round(t, 4)
        rows.append(row)
        print(f"{row['status']:28} {job.name} {row['wall_s'] or ''}", flush=True)
    return rows


def write_rows(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def readme(machine: dict, cal: dict | None, rows: list[dict], plan_text: str) -> str:
    ran = [r for r in rows if r["status"] == "ran"]
    lines = ["# GPU tier results", "",
             "Written by scripts/gpu/run_tier.py (docs/gpu.md).  Wall seconds are measured on this machine; "
             "the simulated clock inside each run is simulated; estimates are labelled.", "",
             f"Machine: GPUs {', '.join(machine.get('gpus') or ['none'])}; torch {machine['torch']}; "
             f"CUDA runtime {machine.get('cuda_runtime')}; driver {machine.get('driver')}; "
             f"{machine.get('cpu_cores')} cores.", ""]
    if cal:
        lines += ["One worker-step, measured on this device (median; atlas DDP at N = 2):", ""]
        lines += [f"- {k}: {v * 1e3:.3f} ms" for k, v in cal["worker_step_s"].items()] + [""]
    lines += ["```", plan_text, "```", "",
              f"{len(ran)} of {len(rows)} jobs ran; {sum(r['status'] == 'failed' for r in rows)} failed.", "",
              "Steps to the atlas's target loss: the first evaluated step at or below it (simulated clock there).", "",
              "| job | status | wall s (measured) | estimate s | final val loss | steps to target | simulated s |",
              "|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['job']} | {r['status']} | {r['wall_s']} | {r['est_s']} ({r['label']}) | {r['final_val_loss']} | "
              f"{r['steps_to_target']} | {r['simulated_s_to_target']} |"
              for r in rows if r["status"] in ("ran", "failed")]
    return "\n".join(lines) + "\n"


def run_tier(cfg: dict, out: Path, slice_s: float, only_slice: bool = True, calibration_steps: int = 12,
             data_root: Path | None = None) -> dict:
    from ..runtime import device as devices

    out.mkdir(parents=True, exist_ok=True)
    machine = devices.machine()
    (out / "machine.json").write_text(json.dumps(machine, indent=2) + "\n")
    print(json.dumps(machine), flush=True)
    jobs0 = plan(cfg)
    text0 = format_plan(jobs0, cfg)
    (out / "plan_assumed.txt").write_text(text0 + "\n")
    names = {j.data for j in jobs0} | {cfg["atlas"]["dataset"]}
    data = prepare_data(cfg, names, data_root or out / "data")  # prepared there before: used as they are
    t0 = time.perf_counter()
    cal = calibrate(cfg, data[cfg["atlas"]["dataset"]], out, steps=calibration_steps)
    cal["wall_s"] = round(time.perf_counter() - t0, 2)
    cal["machine"] = machine
    (out / "calibration.json").write_text(json.dumps(cal, indent=2) + "\n")
    jobs = plan(cfg, cal)
    text = format_plan(jobs, cfg, cal)
    (out / "plan_measured.txt").write_text(text + "\n")
    print(text, flush=True)
    rows = run_jobs(jobs, data, out, slice_s - cal["wall_s"], only_slice, float(cfg["atlas"]["target_loss"]))
    write_rows(rows, out / "jobs.csv")
    (out / "README.md").write_text(readme(machine, cal, rows, text))
    return {"machine": machine, "calibration": cal, "rows": rows, "totals": totals(jobs)}


def environment_note() -> dict:
    """What the runner ran under (PYTHONPATH carries pure-Python packages: docs/gpu.md)."""
    return {"python": sys.version.split()[0], "pythonpath": os.environ.get("PYTHONPATH", "")}
