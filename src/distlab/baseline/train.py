"""Synchronous data-parallel SGD (DGD) and its single-process reference.

The baseline every paper compares against.  Each step draws one global
mini-batch of ``batch_size`` samples (a pure function of seed and step), gives
worker ``w`` the ``w``-th equal shard, averages the workers' gradients with
an all-reduce and takes one SGD step.  ``method: single`` computes the
gradient of the whole global batch in one process, so with equal shards the
two produce the same trajectory up to floating-point rounding — the claim
``baseline.dgd_equals_single`` tests across seeds.

Backends: ``simulated`` runs the N workers in this process on a virtual
clock (all-reduce costed by the network model); ``gloo``/``nccl`` runs one
worker per process under torchrun and measures wall time.  Both count bytes
with the same ledger rule.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..config import specs
from ..data import EpochBatcher
from ..results.checkpoint import Checkpointer
from ..results.runs import RunRecorder
from ..runtime.compute import ComputeModel
from ..runtime.network import NetworkModel
from ..runtime.sim import SimulatedCluster
from ..runtime.stragglers import StragglerModel
from ..train.common import (DTYPES, ImageData, eval_columns, final_metrics, flat_params, load_image_data,
                     loss_and_grad, make_classifier, nbytes_of, seed_everything, set_flat_params,
                     sgd_apply)

METHODS = ("dgd", "single")

SPEC_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["experiment", "method", "backend", "seed", "model", "n_workers", "batch_size",
                 "lr", "steps", "cluster"],
    "properties": {
        "experiment": {"const": "baseline"},
        "method": {"enum": list(METHODS)},
        "backend": specs.BACKEND,
        "seed": specs.NONNEG_INT,
        "model": {"type": "object", "required": ["name"]},
        "n_workers": specs.POS_INT,
        "batch_size": specs.POS_INT,
        "lr": specs.POS_NUM,
        "steps": specs.POS_INT,
        "eval_every": specs.POS_INT,
        "dtype": specs.DTYPE,
        "cluster": specs.CLUSTER,
    },
}


def _setup(spec: dict, data_dir: Path):
    seed = int(spec["seed"])
    seed_everything(seed)
    dtype = DTYPES[spec.get("dtype", "float32")]
    train = load_image_data(data_dir, "train", dtype)
    val = load_image_data(data_dir, "val", dtype)
    model = make_classifier(spec["model"], train, dtype, seed)
    batcher = EpochBatcher(np.arange(len(train)), int(spec["batch_size"]), seed, 0)
    return seed, dtype, train, val, model, batcher


def _shards(idx: np.ndarray, n: int) -> list[np.ndarray]:
    if len(idx) % n:
        raise ValueError(f"batch_size {len(idx)} is not divisible by n_workers {n}")
    return np.split(idx, n)


def run_simulated(spec: dict, data_dir: str | Path, out_dir: str | Path,
                  runtime: dict | None = None) -> Path:
    """DGD on the simulated cluster (or the single-process reference)."""
    method = spec["method"]
    if method not in METHODS:
        raise ValueError(f"baseline method must be one of {METHODS}, got {method!r}")
    out_dir = Path(out_dir)
    seed, dtype, train, val, model, batcher = _setup(spec, Path(data_dir))
    n = int(spec["n_workers"]) if method == "dgd" else 1
    cl = spec["cluster"]
    cluster = SimulatedCluster(n, ComputeModel.from_config(cl["compute"]),
                               NetworkModel(**cl["network"]),
                               StragglerModel.from_config(cl["straggler"], seed))
    rec = RunRecorder(out_dir, spec, backend=cluster.backend, clock=cluster.clock,
                      fail_on_divergence=True)  # a diverged run fails (runs.RunDiverged)
    runtime = specs.runtime_defaults(runtime)
    ckpt = Checkpointer(out_dir / "checkpoint.pt", spec=spec, **runtime["checkpoint"])
    lr, steps = float(spec["lr"]), int(spec["steps"])
    # the gradient and the step's loss travel in one all-reduce, as on the real backend
    grad_bytes = nbytes_of(flat_params(model).numel() + 1, dtype)
    start = 0
    state = ckpt.load()
    if state is not None:
        with ckpt.restoring():  # a state that does not fit the model: one line, file set aside
            set_flat_params(model, state["params"])
            cluster.load_state_dict(state["cluster"])
            rec.load_state_dict(state["recorder"])
        start = state["step"] + 1
    for step in tqdm(range(start, steps), desc=f"{method} seed {seed}", mininterval=5,
                     initial=start, total=steps):
        idx = batcher.batch(step)
        grads, losses = [], []
        for w, shard in enumerate(_shards(idx, n)):
            loss, g, secs = loss_and_grad(model, *train.take(shard))
            cluster.charge(w, 1, secs)
            grads.append(g)
            losses.append(loss)
        g = torch.stack(grads).mean(0)  # the all-reduce (mean) the ledger charges below
        cluster.ledger.all_reduce(grad_bytes, n)
        step_time = cluster.sync_step(step, cluster.network.all_reduce(grad_bytes, n))
        ev = eval_columns(model, train, val, step, steps, int(spec.get("eval_every", 10)))
        sgd_apply(model, g, lr)
        rec.log(step=step, time=cluster.now, step_time=step_time, loss=float(np.mean(losses)),
                bytes=cluster.ledger.pop_step(), **ev)
        ckpt.maybe_save(step, lambda: {"step": step, "params": flat_params(model),
                                       "cluster": cluster.state_dict(),
                                       "recorder": rec.state_dict()})
    out = rec.finish(final=final_metrics(model, train, val), n_workers=n,
                     simulator_overhead_s=cluster.overhead_s,
                     compute_measured_s=cluster.measured_compute_s,
                     cluster=cluster.describe(), bytes_total=cluster.ledger.total_bytes)
    ckpt.clear()
    return out


def run_distributed(spec: dict, data_dir: str | Path, out_dir: str | Path,
                    runtime: dict | None = None) -> Path | None:
    """DGD with one worker per torchrun process (gloo or NCCL); rank 0 writes outputs."""
    from ..runtime import dist

    runtime = specs.runtime_defaults(runtime)
    ctx = dist.init_from_env(spec.get("backend", "auto"), float(runtime["timeout_s"]))
    try:
        seed, dtype, train, val, model, batcher = _setup(spec, Path(data_dir))
        n = ctx.world_size
        if n != int(spec["n_workers"]):
            raise ValueError(f"launched {n} processes for n_workers={spec['n_workers']}")
        model.to(ctx.device)
        train = ImageData(train.x.to(ctx.device), train.y.to(ctx.device))
        val = ImageData(val.x.to(ctx.device), val.y.to(ctx.device))
        lr, steps = float(spec["lr"]), int(spec["steps"])
        rec = RunRecorder(out_dir, spec, backend=ctx.backend, clock="measured", fail_on_divergence=True)
        # every rank resumes from the file rank 0 writes (one node, or a shared file system)
        ckpt = Checkpointer(Path(out_dir) / "checkpoint.pt", spec=spec, **runtime["checkpoint"])
        start, elapsed = 0, 0.0
        state = ckpt.load()
        if state is not None:
            with ckpt.restoring():
                set_flat_params(model, state["params"].to(ctx.device))
                rec.load_state_dict(state["recorder"])
            start, elapsed = state["step"] + 1, state["elapsed"]
        params = [p for p in model.parameters()]
        dist.broadcast_(ctx, [p.data for p in params], src=0)
        for step in tqdm(range(start, steps), desc=f"dgd rank {ctx.rank}", mininterval=5,
                         initial=start, total=steps, disable=not ctx.is_master):
            # evaluation happens outside the timed region, at the model the step starts from
            ev = (eval_columns(model, train, val, step, steps, int(spec.get("eval_every", 10)))
                  if ctx.is_master else {})
            t0 = time.perf_counter()
            shard = _shards(batcher.batch(step), n)[ctx.rank]
            x, y = train.take(shard)
            loss, g, _ = loss_and_grad(model, x.to(ctx.device), y.to(ctx.device))
            lt = torch.tensor([loss], dtype=g.dtype, device=ctx.device)
            dist.all_reduce_mean_(ctx, [g, lt])
            sgd_apply(model, g, lr)
            step_time = time.perf_counter() - t0
            elapsed += step_time
            rec.log(step=step, time=elapsed, step_time=step_time, loss=float(lt),
                    bytes=ctx.ledger.pop_step(), **ev)
            if ctx.is_master:
                ckpt.maybe_save(step, lambda: {"step": step, "params": flat_params(model).cpu(),
                                               "recorder": rec.state_dict(), "elapsed": elapsed})
        diff = dist.params_max_abs_diff(ctx, [p.data for p in params])
        if ctx.is_master:
            out = rec.finish(final=final_metrics(model, train, val), n_workers=n,
                             params_max_abs_diff_across_ranks=diff,
                             bytes_total=ctx.ledger.total_bytes)
            ckpt.clear()
            return out
        return None
    finally:
        ctx.close()
