"""Train a small model with DeMo on torchrun processes: the drop-in pattern.

    torchrun --standalone --nproc_per_node 2 examples/demo_ddp.py --steps 200
    torchrun --standalone --nproc_per_node 2 examples/demo_ddp.py --steps 200 --ddp

DeMo replaces the gradient all-reduce: each rank compresses its *own* gradient
into its momentum and ``opt.step()`` all-gathers the compressed pieces.  So the
backward must not average gradients first:

* without DDP (simplest): broadcast the initial weights (or seed every rank
  alike), then ``loss.backward(); opt.step()``;
* with a DDP-wrapped model: run the forward and backward inside
  ``model.no_sync()``, or DDP all-reduces every gradient on top of DeMo's
  all-gathers (the full dense traffic DeMo exists to avoid).

Each rank trains on its own data (a noisy linear teacher, drawn by rank and
step); rank 0 prints progress every 10 % of the steps and the held-out loss
before and after.  With ``--out`` it writes a JSON summary (used by the tests).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from distlab.demo import DeMo


def batch(rank: int, step: int, n: int = 32):
    g = torch.Generator().manual_seed(10_000 * rank + step)
    teacher = torch.Generator().manual_seed(7)        # the same teacher on every rank
    w = torch.randn(32, 1, generator=teacher)
    x = torch.randn(n, 32, generator=g)
    return x, x @ w + 0.1 * torch.randn(n, 1, generator=g)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--ddp", action="store_true", help="wrap the model in DDP and use no_sync()")
    ap.add_argument("--out", default=None, help="rank 0 writes a JSON summary here")
    a = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(0)                               # the same initial weights on every rank
    net = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1))
    for p in net.parameters():                         # or make sure: rank 0's weights everywhere
        dist.broadcast(p.data, src=0)
    model = DDP(net) if a.ddp else net
    opt = DeMo(net.parameters(), lr=a.lr, compression_topk=16, compression_chunk=32)

    held_out = [batch(10_000 + r, 0, 256) for r in range(2)]

    def test_loss() -> float:
        with torch.no_grad():
            return float(sum((net(x) - y).pow(2).mean() for x, y in held_out) / len(held_out))

    start = test_loss()
    every = max(1, a.steps // 10)
    for step in range(a.steps):
        x, y = batch(rank, step)
        opt.zero_grad()
        # with DDP: no all-reduce of the gradients; DeMo's step communicates instead
        with model.no_sync() if a.ddp else contextlib.nullcontext():
            loss = (model(x) - y).pow(2).mean()
            loss.backward()
        opt.step()
        if rank == 0 and (step % every == 0 or step == a.steps - 1):
            print(f"step {step}/{a.steps} train loss {loss.item():.4f}", flush=True)

    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(everyone, flat)
    spread = max(float((e - flat).abs().max()) for e in everyone)
    end = test_loss()
    if rank == 0:
        print(f"held-out loss {start:.4f} -> {end:.4f}; ranks' parameters differ by {spread:g}", flush=True)
        if a.out:
            with open(a.out, "w") as f:
                json.dump({"start": start, "end": end, "spread": spread, "world": world, "ddp": a.ddp,
                           "payload_bytes": opt.payload_nbytes(), "steps": a.steps,
                           "pid": os.getpid()}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
