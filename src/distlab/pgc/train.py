"""Training under every gradient-coding scheme, on both backends.

One loop per role, the same components everywhere: the scheme's pure coding
functions (:mod:`.coding`), the worker state (:class:`.worker.CodedWorker`)
and the master's decode-and-step.  Data order: the training set is cut into
``n`` equal partitions after a seeded shuffle, and each partition draws a
fresh mini-batch of ``batch_size / n`` samples at every step, a pure function
of (seed, partition, step) — so every worker holding a partition evaluates
the same samples at the same step, and a resumed run draws what an
uninterrupted one would.

Simulated backend: all ``n`` workers live in this process.  Since every
worker evaluates a partition on the same model and the same mini-batch, each
needed partition gradient is computed once per step and handed to every
worker that holds it; each worker is *charged* for the partitions it
evaluates (GC's ``s+1``-fold work stays visible on the clock) and the timing
follows :meth:`SimulatedCluster.master_step`.

Real backend: rank 0 is the master, ranks ``1..n`` the workers, under
torchrun on gloo; straggler delays are real (interruptible) sleeps drawn from
the same model and seed, and the master proceeds on the first messages it
needs (see :mod:`distlab.runtime.dist`).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..data import EpochBatcher, partition_indices
from ..runs import Checkpointer, RunRecorder
from ..runtime.compute import ComputeModel
from ..runtime.network import NetworkModel
from ..runtime.sim import SimulatedCluster
from ..runtime.stragglers import StragglerModel
from ..train.common import (DTYPES, batched_loss_and_grads, eval_columns, final_metrics,
                            flat_params, load_image_data, loss_and_grad, make_classifier,
                            nbytes_of, seed_everything, set_flat_params, sgd_apply)
from .coding import Scheme, make_scheme
from .worker import CodedWorker

META = 4  # message metadata slots: fresh loss, compute seconds, staleness, model step


class Setup:
    """Everything a run needs that follows from its spec and the data."""

    def __init__(self, spec: dict, data_dir: str | Path) -> None:
        self.spec = spec
        self.seed = int(spec["seed"])
        seed_everything(self.seed)
        self.dtype = DTYPES[spec.get("dtype", "float32")]
        self.n, self.s = int(spec["n"]), int(spec["s"])
        self.scheme: Scheme = make_scheme(spec["scheme"], self.n, self.s,
                                          seed=int(spec.get("code_seed", 0)), c=spec.get("c"))
        self.train = load_image_data(data_dir, "train", self.dtype)
        self.val = load_image_data(data_dir, "val", self.dtype)
        self.model = make_classifier(spec["model"], self.train, self.dtype, self.seed)
        # each partition's mini-batch is floor(batch_size / n), as in the authors' code
        # (batch 256 over 12 workers: 21 samples a partition, 252 a step)
        per = int(spec["batch_size"]) // self.n
        if per < 1:
            raise ValueError(f"batch_size {spec['batch_size']} gives no sample per partition for n={self.n}")
        parts = partition_indices(len(self.train), self.n, self.seed)
        if per > len(parts[0]):
            raise ValueError(f"per-partition batch {per} exceeds the partition size {len(parts[0])}")
        self.batchers = [EpochBatcher(p, per, self.seed, stream_id=j) for j, p in enumerate(parts)]
        self.lr = float(spec["lr"])
        if "epochs" in spec:  # one epoch = every partition's samples seen once
            self.steps = int(spec["epochs"]) * self.batchers[0].steps_per_epoch
        else:
            self.steps = int(spec["steps"])
        self.numel = flat_params(self.model).numel()
        self.nbytes = nbytes_of(self.numel, self.dtype)
        self.stragglers = StragglerModel.from_config(spec["cluster"]["straggler"], self.seed)

    def partition_grad(self, j: int, step: int) -> tuple[float, torch.Tensor, float]:
        x, y = self.train.take(self.batchers[j].batch(step))
        return loss_and_grad(self.model, x, y)

    def partition_grads(self, parts: list[int], step: int) -> dict[int, tuple[float, torch.Tensor, float]]:
        """Every partition in ``parts`` at once (simulated backend); the measured
        time of the batched call is split evenly across the partitions."""
        batches = [self.train.take(self.batchers[j].batch(step)) for j in parts]
        xs = torch.stack([b[0] for b in batches])
        ys = torch.stack([b[1] for b in batches])
        losses, grads, secs = batched_loss_and_grads(self.model, xs, ys)
        return {j: (float(losses[i]), grads[i], secs / len(parts)) for i, j in enumerate(parts)}

    def eval_cols(self, step: int) -> dict:
        return eval_columns(self.model, self.train, self.val, step, self.steps,
                            int(self.spec.get("eval_every", 10)))

    def final(self) -> dict:
        return final_metrics(self.model, self.train, self.val)

    def decode_and_step(self, received: list[int], msgs: dict[int, torch.Tensor]) -> None:
        weights = self.scheme.decode_weights(received)
        g = torch.zeros(self.numel, dtype=self.dtype)
        for w, a in weights.items():
            if a != 0.0:
                g.add_(msgs[w], alpha=a)
        sgd_apply(self.model, g, self.lr)


def run_simulated(spec: dict, data_dir: str | Path, out_dir: str | Path) -> Path:
    """Train one scheme on the simulated cluster and write its run directory."""
    out_dir = Path(out_dir)
    S = Setup(spec, data_dir)
    cl = spec["cluster"]
    cluster = SimulatedCluster(S.n, ComputeModel.from_config(cl["compute"]),
                               NetworkModel(**cl["network"]), S.stragglers)
    workers = [CodedWorker(S.scheme, w) for w in range(S.n)]
    rec = RunRecorder(out_dir, spec, backend=cluster.backend, clock=cluster.clock)
    ckpt = Checkpointer(out_dir / "checkpoint.pt", **spec.get("checkpoint", {}))
    start = 0
    state = ckpt.load()
    if state is not None:
        set_flat_params(S.model, state["params"])
        cluster.load_state_dict(state["cluster"])
        rec.load_state_dict(state["recorder"])
        for w, ws in zip(workers, state["workers"]):
            w.load_state_dict(ws)
        start = state["step"] + 1
    units = np.zeros(S.n)
    grad_compute_s = 0.0
    for step in tqdm(range(start, S.steps), desc=f"{S.scheme.name} s={S.s} seed {S.seed}",
                     mininterval=5, initial=start, total=S.steps):
        todo = {w.worker: w.to_compute(step) for w in workers}
        needed = sorted({j for parts in todo.values() for j in parts})
        computed = S.partition_grads(needed, step)
        grad_compute_s += sum(c[2] for c in computed.values())
        for w in workers:
            parts = todo[w.worker]
            for j in parts:
                loss, g, _ = computed[j]
                w.update(j, g, loss, step)
            cluster.charge(w.worker, len(parts), sum(computed[j][2] for j in parts))
            units[w.worker] += len(parts)
        msgs = {w.worker: w.message() for w in workers}
        fresh = {w.worker: w.pop_fresh_loss() for w in workers}
        res = cluster.master_step(step, S.nbytes, S.nbytes, S.scheme.ready)
        ev = S.eval_cols(step)
        S.decode_and_step(res.received, msgs)
        rec.log(step=step, time=cluster.now, step_time=res.step_time,
                loss=float(np.mean([fresh[w] for w in res.received])),
                bytes=cluster.ledger.pop_step(), n_received=len(res.received),
                started_late=int(res.started_late.sum()),
                staleness=max(workers[w].staleness(step) for w in res.received),
                compute_max=float(res.compute.max()), delay_max=float(res.delays.max()), **ev)
        ckpt.maybe_save(step, lambda: {"step": step, "params": flat_params(S.model),
                                       "cluster": cluster.state_dict(),
                                       "recorder": rec.state_dict(),
                                       "workers": [w.state_dict() for w in workers]})
    out = rec.finish(final=S.final(), cluster=cluster.describe(),
                     simulator_overhead_s=cluster.overhead_s,
                     gradient_compute_s=grad_compute_s,
                     compute_charged_measured_s=cluster.measured_compute_s,
                     units_per_worker_step=float(units.sum() / S.n / max(1, S.steps - start)),
                     bytes_total=cluster.ledger.total_bytes)
    ckpt.clear()
    return out


def run_distributed(spec: dict, data_dir: str | Path, out_dir: str | Path) -> Path | None:
    """Master (rank 0) and ``n`` workers (ranks 1..n) under torchrun."""
    from ..runtime import dist

    timeout = float(spec.get("timeout_s", 60))
    ctx = dist.init_from_env("gloo", timeout)
    try:
        S = Setup(spec, data_dir)
        if ctx.world_size != S.n + 1:
            raise ValueError(f"launched {ctx.world_size} processes; scheme needs 1 master + {S.n}")
        if ctx.is_master:
            return _master(ctx, S, Path(out_dir), timeout)
        _worker(ctx, S, ctx.rank - 1, timeout)
        return None
    finally:
        ctx.close()


def _master(ctx, S: Setup, out_dir: Path, timeout: float) -> Path:
    from ..runtime.dist import MasterTransport

    tr = MasterTransport(ctx, S.n, S.numel, S.numel, meta_len=META, dtype=S.dtype)
    rec = RunRecorder(out_dir, S.spec, backend=ctx.backend, clock="measured")
    # Only the master holds state worth saving: a restarted worker has no gradient
    # memory and evaluates all its partitions at its first step (CodedWorker).
    ckpt = Checkpointer(out_dir / "checkpoint.pt", **S.spec.get("checkpoint", {}))
    start, elapsed = 0, 0.0
    state = ckpt.load()
    if state is not None:
        set_flat_params(S.model, state["params"])
        rec.load_state_dict(state["recorder"])
        start, elapsed = state["step"] + 1, state["elapsed"]
    try:
        for step in tqdm(range(start, S.steps), desc=f"{S.scheme.name} master", mininterval=5,
                         initial=start, total=S.steps):
            ev = S.eval_cols(step)  # outside the timed region
            t0 = time.perf_counter()
            tr.broadcast_params(step, flat_params(S.model))
            arrivals = tr.gather(step, S.scheme.ready, timeout,
                                 hint=f"scheme {S.scheme.name} waits for {S.scheme.wait_for} of "
                                      f"{S.n} workers; use a straggler-tolerant scheme or raise "
                                      "runtime.timeout_s")
            msgs = {a.worker: a.payload for a in arrivals}
            S.decode_and_step([a.worker for a in arrivals], msgs)
            step_time = time.perf_counter() - t0
            elapsed += step_time
            meta = np.array([a.meta.numpy() for a in arrivals])
            rec.log(step=step, time=elapsed, step_time=step_time, loss=float(meta[:, 0].mean()),
                    bytes=ctx.ledger.pop_step(), n_received=len(arrivals),
                    compute_max=float(meta[:, 1].max()), staleness=int(meta[:, 2].max()),
                    late_messages=tr.late_messages, **ev)
            ckpt.maybe_save(step, lambda: {"step": step, "params": flat_params(S.model),
                                           "recorder": rec.state_dict(), "elapsed": elapsed})
    finally:
        tr.shutdown()
    out = rec.finish(final=S.final(), bytes_total=ctx.ledger.total_bytes,
                     late_messages=tr.late_messages, n_workers=S.n)
    ckpt.clear()
    return out


def _worker(ctx, S: Setup, wid: int, timeout: float) -> None:
    from ..runtime.dist import WorkerTransport

    tr = WorkerTransport(ctx, S.numel, S.numel, meta_len=META, dtype=S.dtype)
    w = CodedWorker(S.scheme, wid)
    factor = float(S.stragglers.compute_factor(S.n)[wid])
    while True:
        got = tr.recv_params(timeout_s=timeout * 10)
        if got is None:
            return
        step, flat = got
        set_flat_params(S.model, flat)
        t0 = time.perf_counter()
        for j in w.to_compute(step):
            loss, g, _ = S.partition_grad(j, step)
            w.update(j, g, loss, step)
        msg = w.message()
        compute_s = time.perf_counter() - t0
        fresh_loss = w.pop_fresh_loss()
        delay = float(S.stragglers.delays(step, S.n)[wid]) + (factor - 1.0) * compute_s
        if delay > 0 and not tr.sleep(delay):
            return
        tr.send(step, msg, [fresh_loss, compute_s, w.staleness(step), step])
