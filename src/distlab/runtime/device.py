"""Where a simulated run's workers compute: ``device: auto | cpu | cuda`` in its spec.

The simulated cluster runs its N workers in one process, one after another; the
device only says where their tensors live and their arithmetic runs.  The clock
is unchanged: each worker's compute is measured on the device, and on CUDA the
measurement waits for the device's queued work (:func:`synchronize`) before and
after, so a worker is charged its own kernels and not the previous worker's.

* ``cpu`` — as every run before this key: the CPU.
* ``cuda`` — this process's current CUDA device; a spec asking for it where torch
  finds none is a mistake (one line, no traceback).
* ``auto`` — CUDA when torch finds it, else the CPU.

A spec without the key keeps its trainer's old choice (its paper's ``device_default``,
:class:`distlab.pipeline.paper.Paper`: DeMo's simulated jobs took the process's GPU when it had
one, the atlas and PGC always pinned the CPU), so no existing run's spec, hash or numbers change.
"""

from __future__ import annotations

import os
import subprocess
import time

import torch

from ..config.specs import SpecError
from ..pipeline.paper import find

DEVICES = ("auto", "cpu", "cuda")
SCHEMA = {"enum": list(DEVICES)}


def cuda_available() -> bool:
    return bool(torch.cuda.is_available())


def resolve(name: str | None, experiment: str = "atlas") -> torch.device:
    """The torch device of ``device: name`` (None: the experiment's old default)."""
    if name is None:
        paper = find(experiment)
        name = paper.device_default if paper is not None else "cpu"
    if name not in DEVICES:
        raise SpecError(f"{experiment} spec: key 'device': must be one of {', '.join(DEVICES)}, got {name!r}")
    if name == "cpu" or (name == "auto" and not cuda_available()):
        return torch.device("cpu")
    if not cuda_available():
        raise SpecError(f"{experiment} spec: key 'device': cuda, but torch finds no CUDA device here "
                        f"(torch {torch.__version__}); use device: auto or cpu")
    return torch.device("cuda")  # the process's current CUDA device


def of_spec(spec: dict, experiment: str) -> torch.device:
    return resolve(spec.get("device"), experiment)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU, whose torch calls return done)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timer(device: torch.device) -> float:
    """``time.perf_counter()`` once the device's queued work is done: two of them around a
    worker's compute measure that worker's kernels on the device."""
    synchronize(device)
    return time.perf_counter()


def describe(device: torch.device) -> dict:
    """What a run's manifest records of its device."""
    out = {"device": str(device)}
    if device.type == "cuda":
        out["device_name"] = torch.cuda.get_device_name(device)
    return out


def nvidia_driver() -> str | None:
    """The NVIDIA driver's version (``nvidia-smi``), None where there is none."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]
    return lines[0] if r.returncode == 0 and lines else None


def machine() -> dict:
    """The machine a GPU-tier run measured on: GPUs, torch, CUDA, driver, cores."""
    info = {"torch": torch.__version__, "cuda_available": cuda_available(),
            "cuda_runtime": torch.version.cuda, "cpu_cores": os.cpu_count(),
            "driver": nvidia_driver()}
    if cuda_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        props = torch.cuda.get_device_properties(0)
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
    else:
        info["gpus"] = []
    return info
