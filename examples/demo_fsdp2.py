"""Train a small model with DeMo while FSDP2 shards its parameters over the ranks.

    torchrun --standalone --nproc_per_node 2 examples/demo_fsdp2.py --steps 200
    torchrun --standalone --nproc_per_node 2 examples/demo_fsdp2.py --steps 20 --check

Each block and the whole model are wrapped by ``fully_shard`` (each rank holds half of every
weight's rows); ``ShardedDeMo`` takes each rank's own gradient of the whole parameter before FSDP
would reduce-scatter it, runs DeMo on the full tiles, and each rank updates its shard.  Each rank
trains on its own data (a noisy teacher, drawn by rank and step); rank 0 prints progress and the
held-out loss before and after.  ``--check`` also trains an unsharded replica with plain ``DeMo``
on the same data and reports whether the two runs' parameters are bit-equal.  With ``--out`` rank
0 writes a JSON summary.  CPUs (gloo), or nccl where every rank has a GPU (tested on CPUs only).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

from distlab.techniques.demo import DeMo, ShardedDeMo


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, width: int = 64, depth: int = 2) -> None:
        super().__init__()
        self.inp = nn.Linear(32, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return self.out(h)


def batch(rank: int, step: int, device, n: int = 32):
    g = torch.Generator().manual_seed(10_000 * rank + step)
    teacher = torch.Generator().manual_seed(7)          # the same teacher on every rank
    w = torch.randn(32, 1, generator=teacher)
    x = torch.randn(n, 32, generator=g)
    y = torch.tanh(x @ w) + 0.1 * torch.randn(n, 1, generator=g)
    return x.to(device), y.to(device)


def train(model: nn.Module, opt, steps: int, rank: int, device, log: bool) -> float:
    every = max(1, steps // 10)
    loss = torch.zeros(())
    for step in range(steps):
        x, y = batch(rank, step, device)
        opt.zero_grad()
        loss = (model(x) - y).pow(2).mean()
        loss.backward()                                  # FSDP reduce-scatters nothing here
        opt.step()                                       # DeMo's one all-gather of payloads
        if log and (step % every == 0 or step == steps - 1):
            print(f"step {step}/{steps} train loss {loss.item():.4f}", flush=True)
    return float(loss.detach())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--topk", type=int, default=16, help="coefficients kept a tile")
    ap.add_argument("--chunk", type=int, default=32, help="tile side target")
    ap.add_argument("--check", action="store_true", help="also train unsharded DeMo and compare")
    ap.add_argument("--out", default=None, help="rank 0 writes a JSON summary here")
    a = ap.parse_args()
    if a.steps < 1 or not a.lr > 0 or a.topk < 1 or a.chunk < 1:
        ap.error("--steps, --lr, --topk and --chunk must be positive")
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print("demo_fsdp2.py: run it under torchrun, e.g. torchrun --standalone --nproc_per_node 2 "
              "examples/demo_fsdp2.py", file=sys.stderr)
        sys.exit(2)

    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= int(os.environ["WORLD_SIZE"])
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.set_num_threads(1)
    kw = dict(lr=a.lr, compression_topk=a.topk, compression_chunk=a.chunk, compression_decay=0.999)

    torch.manual_seed(0)                                 # the same initial weights on every rank
    model = Net().to(device)
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    opt = ShardedDeMo(model, **kw)
    held_out = [batch(10_000 + r, 0, device, 256) for r in range(2)]

    def test_loss(m) -> float:
        with torch.no_grad():
            loss = float(sum((m(x) - y).pow(2).mean() for x, y in held_out) / len(held_out))
        if hasattr(m, "reshard"):  # a forward without backward leaves the root unsharded: reshard, or the
            m.reshard()            # next forward would reuse those copies while the step updates the shards
        return loss

    start = test_loss(model)
    train(model, opt, a.steps, rank, device, log=rank == 0)
    end = test_loss(model)
    local = sum(p.to_local().numel() for p in model.parameters())
    total = sum(p.numel() for p in model.parameters())
    mem = opt.memory_nbytes()
    summary = {"start": start, "end": end, "world": world, "steps": a.steps, "params": total,
               "params_on_rank0": local, "payload_bytes": opt.payload_nbytes(), "memory_bytes": mem}
    if rank == 0:
        print(f"held-out loss {start:.4f} -> {end:.4f}; rank 0 holds {local} of {total} parameters",
              flush=True)
        print("rank 0 bytes: parameters {params_local} of {params_full}, DeMo's buffers {optimizer}, "
              "held gradients {held_gradients}; payload {p} a step".format(**mem, p=opt.payload_nbytes()),
              flush=True)
    if a.check:
        torch.manual_seed(0)
        whole = Net().to(device)
        train(whole, DeMo(whole.parameters(), **kw), a.steps, rank, device, log=False)
        diff = max(float((p.full_tensor() - q).detach().abs().max())
                   for p, q in zip(model.parameters(), whole.parameters()))
        equal = all(torch.equal(p.full_tensor(), q.detach()) for p, q in zip(model.parameters(), whole.parameters()))
        summary.update(check_equal=equal, check_max_diff=diff)
        if rank == 0:
            print(f"sharded against unsharded DeMo after {a.steps} steps: "
                  f"{'bit-equal' if equal else f'differ by up to {diff:g}'}", flush=True)
    if rank == 0 and a.out:
        with open(a.out, "w") as f:
            json.dump(summary, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
