"""All-reduce bandwidth of this machine's real backend, against its memcpy bandwidth.

Run under torchrun, e.g.::

    torchrun --standalone --nproc_per_node=4 -m distlab allreduce \\
        --sizes-mb 1 4 16 64 --repeats 5 --out results/bench/allreduce.csv

For each size (MiB of float32), after a warm-up, every repeat is a barrier
then one timed all-reduce; a repeat's time is the slowest rank's, and the
median over repeats is reported.  Bandwidths are in GB/s (1e9 bytes/s):
``algbw = size / time`` and ``busbw = algbw * 2 (n-1) / n`` (the per-link
traffic of a ring all-reduce, comparable across process counts).  Rank 0
also times ``dst.copy_(src)`` of the same size (median; bytes copied / time)
so that ``ratio_busbw_to_memcpy`` says how far the collective is from this
machine's memory bandwidth.  A benchmark, not a test.
"""

from __future__ import annotations

import csv
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.distributed as dist

from distlab.runtime.dist import DistContext, init_from_env

COLUMNS = ("size_mb", "nprocs", "backend", "allreduce_s", "algbw_GBps", "busbw_GBps",
           "memcpy_GBps", "ratio_busbw_to_memcpy")


def _sync(ctx: DistContext) -> None:
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)


def _timed(ctx: DistContext, fn: Callable[[], object]) -> float:
    _sync(ctx)
    t0 = time.perf_counter()
    fn()
    _sync(ctx)
    return time.perf_counter() - t0


def allreduce_seconds(ctx: DistContext, numel: int, repeats: int, warmup: int) -> float:
    """Median over repeats of the slowest rank's all-reduce time."""
    x = torch.ones(numel, dtype=torch.float32, device=ctx.device)
    times = []
    for i in range(warmup + repeats):
        ctx.barrier()
        t = _timed(ctx, lambda: dist.all_reduce(x))
        if i >= warmup:
            times.append(t)
    slowest = torch.tensor(times, dtype=torch.float64, device=ctx.device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return statistics.median(slowest.tolist())


def memcpy_seconds(ctx: DistContext, numel: int, repeats: int, warmup: int) -> float:
    src = torch.ones(numel, dtype=torch.float32, device=ctx.device)
    dst = torch.empty_like(src)
    times = [_timed(ctx, lambda: dst.copy_(src)) for _ in range(warmup + repeats)]
    return statistics.median(times[warmup:])


def allreduce(out: Path, sizes_mb: Sequence[float] = (1, 4, 16, 64), repeats: int = 5, warmup: int = 2,
              backend: str = "auto") -> None:
    """The table on rank 0 (``distlab allreduce``, run under torchrun: one call a rank)."""
    ctx = init_from_env(backend)
    n = ctx.world_size
    rows = []
    for size_mb in sizes_mb:
        numel = int(size_mb * 2**20) // 4
        nbytes = numel * 4
        t = allreduce_seconds(ctx, numel, repeats, warmup)
        if ctx.is_master:
            algbw = nbytes / t / 1e9
            busbw = algbw * 2 * (n - 1) / n
            memcpy = nbytes / memcpy_seconds(ctx, numel, repeats, warmup) / 1e9
            rows.append((size_mb, n, ctx.backend, t, algbw, busbw, memcpy, busbw / memcpy))
            print(f"{size_mb:8g} MiB  all-reduce {t * 1e3:9.3f} ms  busbw {busbw:7.3f} GB/s  "
                  f"memcpy {memcpy:7.3f} GB/s", flush=True)
        ctx.barrier()
    if ctx.is_master:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(COLUMNS)
            w.writerows(rows)
    ctx.close()

