"""Benchmark: what one unit of gradient-coding work costs on this machine.

A unit is one partition's mini-batch gradient (forward + backward).  This
measures it for the paper's model (ResNet-18, 32x32 inputs, floor(256/12) = 21
images, float64 as the authors train, one thread as their workers ran) and for
the embedded default's model, so that ``cluster.compute.unit_seconds`` can be
set to a measured figure (times a scale to a reference device).  Median of
repeats after warm-up.  A benchmark, not a test: shared machines are noisy.

    python -m distlab calibrate --out results/bench/calibration.csv
"""

from __future__ import annotations

import statistics
import time

import pandas as pd
import torch
import torch.nn.functional as F

from ..models import build_model
from ..results.runs import write_csv

CASES = [
    # name, model kwargs, input shape (C, H, W), per-partition batch, dtype
    ("resnet18 32x32 (paper)", {"name": "resnet18", "num_classes": 10}, (3, 32, 32), 21, torch.float64),
    ("resnet18 32x32 float32", {"name": "resnet18", "num_classes": 10}, (3, 32, 32), 21, torch.float32),
    ("cnn 8x8 (default)", {"name": "cnn", "in_channels": 1, "num_classes": 10, "image_size": 8},
     (1, 8, 8), 8, torch.float32),
]


def time_unit(model_kw: dict, shape: tuple, batch: int, dtype: torch.dtype, repeats: int,
              warmup: int) -> float:
    kw = dict(model_kw)
    model = build_model(kw.pop("name"), **kw).to(dtype)
    x = torch.rand(batch, *shape, dtype=dtype)
    y = torch.randint(0, 10, (batch,))
    times = []
    for i in range(warmup + repeats):
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        torch.autograd.grad(loss, [p for p in model.parameters()])
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def calibrate(out: str, repeats: int = 5, warmup: int = 2, threads: int = 1) -> None:
    """Time every case of :data:`CASES`; write the table to ``out`` (``distlab calibrate``)."""
    torch.set_num_threads(threads)
    rows = []
    for name, kw, shape, batch, dtype in CASES:
        secs = time_unit(kw, shape, batch, dtype, repeats, warmup)
        rows.append({"case": name, "batch": batch, "dtype": str(dtype).replace("torch.", ""),
                     "threads": threads, "unit_seconds_median": secs, "clock": "measured"})
        print(f"{name}: {secs:.4f} s per unit", flush=True)
    write_csv(pd.DataFrame(rows), out)
