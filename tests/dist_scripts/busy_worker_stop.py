"""Shutdown while a worker is busy past the grace period.

Usage: torchrun --standalone --nproc_per_node=2 busy_worker_stop.py OUT_JSON

The only worker answers step 0, then computes for 3 s without looking at the
transport; the master stops it with a 1 s grace, so the worker cannot
acknowledge in time and the master closes anyway.  The worker must still end
cleanly: its next message is dropped and recv_params returns None.
"""

import json
import sys
import time

import torch

from distlab.runtime.dist import MasterTransport, WorkerTransport, init_from_env

BUSY_S, GRACE_S = 3.0, 1.0


def main(out: str) -> None:
    ctx = init_from_env("gloo", timeout_s=20)
    try:
        if ctx.is_master:
            tr = MasterTransport(ctx, 1, 8, 8)
            tr.broadcast_params(0, torch.zeros(8))
            got = tr.gather(0, lambda ids: len(ids) == 1, timeout_s=10)
            t0 = time.perf_counter()
            unacknowledged = tr.shutdown(grace_s=GRACE_S)
            with open(out, "w") as f:
                json.dump({"steps": [a.step for a in got], "unacknowledged": unacknowledged,
                           "shutdown_s": time.perf_counter() - t0}, f)
        else:
            tr = WorkerTransport(ctx, 8, 8)
            step, flat = tr.recv_params(timeout_s=10)
            tr.send(step, flat, meta=[])
            time.sleep(BUSY_S)  # busy: neither sleep() nor recv_params() sees the stop
            tr.send(step + 1, flat, meta=[])  # dropped: the master said stop
            assert tr.recv_params(timeout_s=10) is None
    finally:
        ctx.close()


if __name__ == "__main__":
    main(sys.argv[1])
