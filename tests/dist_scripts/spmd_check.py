"""SPMD collectives under torchrun: exact means, ledger bytes, parameter sync.

Usage: torchrun --standalone --nproc_per_node=N spmd_check.py OUT_JSON
Rank 0 writes every rank's findings to OUT_JSON.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

from distlab.runtime.dist import (
    all_gather_tensor, all_reduce_mean_, broadcast_, init_from_env, params_max_abs_diff,
)


def main(out: str) -> None:
    ctx = init_from_env("gloo", timeout_s=20)
    r, n = ctx.rank, ctx.world_size
    a = torch.full((3, 4), float(r + 1))
    b = torch.arange(5, dtype=torch.float32) * (r + 1)
    all_reduce_mean_(ctx, [a, b])
    mean = (n + 1) / 2  # mean of 1..n
    found = {
        "rank": r,
        "pid": os.getpid(),
        "mean_exact": bool((a == mean).all() and (b == torch.arange(5) * mean).all()),
        "all_reduce_bytes": ctx.ledger.by_op["all_reduce"],
        "buffer_bytes": (a.numel() + b.numel()) * 4,
        "gathered": [int(t.item()) for t in all_gather_tensor(ctx, torch.tensor([10 * r]))],
    }
    torch.manual_seed(r)
    params = [torch.randn(7, 3), torch.randn(11)]
    found["diff_before"] = params_max_abs_diff(ctx, params)
    broadcast_(ctx, params, src=0)
    found["diff_after"] = params_max_abs_diff(ctx, params)
    everyone = [None] * n
    dist.all_gather_object(everyone, found)
    if ctx.is_master:
        with open(out, "w") as f:
            json.dump({"world_size": n, "ranks": everyone}, f)
    ctx.close()


if __name__ == "__main__":
    main(sys.argv[1])
