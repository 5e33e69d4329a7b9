"""Master-worker transport under torchrun with a dead and a slow worker.

Usage: torchrun --standalone --nproc_per_node=5 master_worker_check.py OUT_JSON QUORUM TIMEOUT_S

Worker 3 never answers (sleeps until stopped), worker 2 is slow at step 1 so
its step-1 message arrives while later steps are gathered.  The master runs
5 steps, each waiting for QUORUM of the 4 workers; it records every arrival
and either stops the workers and exits 0, or records the StragglerTimeout and
re-raises it (exit code 1; the workers' receives then fail).
"""

import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist

from distlab.runtime.dist import (
    MasterTransport, StragglerTimeout, WorkerTransport, init_from_env,
)

P, M, STEPS = 1000, 600, 5


def model(step: int) -> torch.Tensor:
    return torch.arange(P, dtype=torch.float64) + step


def delay(worker: int, step: int) -> float:
    return math.inf if worker == 3 else 0.6 if (worker == 2 and step == 1) else 0.15


def master(ctx, out: str, quorum: int, timeout_s: float, pids: list[int]) -> None:
    tr = MasterTransport(ctx, ctx.world_size - 1, P, M)
    report = {"pids": pids, "steps": [], "error": None}
    t0 = time.perf_counter()
    try:
        for step in range(1, STEPS + 1):
            tr.broadcast_params(step, model(step))
            arrivals = tr.gather(step, lambda ids: len(ids) >= quorum, timeout_s,
                                 hint=f"the check waits for {quorum} of 4 workers")
            report["steps"].append([
                {"worker": a.worker, "step": a.step,
                 "payload_ok": bool(torch.equal(a.payload, model(step)[:M] * (a.worker + 1))),
                 "meta": a.meta.tolist()} for a in arrivals])
    except StragglerTimeout as e:
        report.update(error=str(e), elapsed_s=time.perf_counter() - t0)
        with open(out, "w") as f:
            json.dump(report, f)
        raise
    report.update(late_messages=tr.late_messages, elapsed_s=time.perf_counter() - t0)
    report["unacknowledged"] = tr.shutdown(grace_s=2.0)
    with open(out, "w") as f:
        json.dump(report, f)


def worker(ctx) -> None:
    tr = WorkerTransport(ctx, P, M)
    while (got := tr.recv_params(timeout_s=30)) is not None:
        step, flat = got
        if not tr.sleep(delay(tr.worker, step)):
            break
        tr.send(step, flat[:M] * (tr.worker + 1), meta=[float(step), 100.0 + tr.worker])


def main(out: str, quorum: int, timeout_s: float) -> None:
    ctx = init_from_env("gloo", timeout_s=20)
    try:
        pids = [None] * ctx.world_size
        dist.all_gather_object(pids, os.getpid())
        if ctx.is_master:
            master(ctx, out, quorum, timeout_s, pids)
        else:
            worker(ctx)
    finally:
        ctx.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
