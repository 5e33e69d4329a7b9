"""DeMo and its baselines on a byte-level language model, on either backend.

Each step every worker draws its own ``batch_size`` windows of the training
text (a pure function of seed, worker and step: paired seeds see the same
data and start from the same weights under every method), computes its
gradient, and the method communicates and updates (:mod:`distlab.demo.methods`).

* ``simulated`` — the N workers in this process; each worker's measured
  compute (its forward/backward and its share of the optimizer) is charged
  to the virtual clock, the collectives to the network model; bytes by the
  ledger.  Each step also records what re-times it under any other network
  (``compute_s``, ``rounds``, ``bytes``): ``time = compute + rounds *
  latency + bytes / bandwidth``.
* ``gloo`` / ``nccl`` — one worker per torchrun process; wall-clock time.

Validation loss is the mean over a fixed set of windows of the validation
text (the same for every run), every ``eval_every`` steps and at the end,
outside the timed region.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from .. import specs
from ..data import load_manifest, load_split, text_batch
from ..models import build_model, lm_loss
from ..runs import Checkpointer, RunRecorder
from ..runtime.compute import ComputeModel
from ..runtime.ledger import ByteLedger
from ..runtime.network import NetworkModel
from ..runtime.sim import SimulatedCluster
from ..runtime.stragglers import StragglerModel
from ..train.common import DTYPES, seed_everything
from .methods import METHODS, make_method
from .olmo import OLMo

EVAL_SEED = 12345  # the validation windows: one fixed set for every run

SPEC_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["experiment", "method", "backend", "model", "n_workers", "batch_size", "lr",
                 "steps", "cluster"],
    # one seed, or (simulated backend) a list run one after another in this process
    "oneOf": [{"required": ["seed"]}, {"required": ["seeds"]}],
    "properties": {
        "experiment": {"const": "demo"},
        "method": {"enum": list(METHODS)},
        "backend": specs.BACKEND,
        "seed": specs.NONNEG_INT,
        "seeds": {"type": "array", "items": specs.NONNEG_INT, "minItems": 1, "uniqueItems": True},
        "model": {
            "type": "object", "required": ["name"], "additionalProperties": False,
            "properties": {"name": {"enum": ["gpt", "olmo"]}, "n_layer": specs.POS_INT,
                           "d_model": specs.POS_INT, "n_head": specs.POS_INT,
                           "block_size": specs.POS_INT, "mlp_ratio": specs.POS_INT},
        },
        "n_workers": specs.POS_INT,
        "batch_size": specs.POS_INT,
        "lr": specs.POS_NUM,
        "steps": specs.POS_INT,
        "eval_every": specs.POS_INT,
        "eval_batches": specs.POS_INT,
        "dtype": specs.DTYPE,
        "demo": {"type": "object", "additionalProperties": False, "properties": {
            "topk": specs.POS_INT, "chunk": specs.POS_INT,
            "decay": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
            "weight_decay": specs.NONNEG_NUM, "value_dtype": {"enum": ["bfloat16", "float16"]}}},
        "adamw": {"type": "object", "additionalProperties": False, "properties": {
            "betas": {"type": "array", "minItems": 2, "maxItems": 2,
                      "items": {"type": "number", "minimum": 0, "exclusiveMaximum": 1}},
            "eps": specs.POS_NUM, "weight_decay": specs.NONNEG_NUM}},
        "diloco": {"type": "object", "additionalProperties": False, "properties": {
            "H": specs.POS_INT, "outer_lr": specs.POS_NUM,
            "outer_momentum": {"type": "number", "minimum": 0, "exclusiveMaximum": 1}}},
        "powersgd": {"type": "object", "additionalProperties": False, "properties": {"rank": specs.POS_INT}},
        "cluster": specs.CLUSTER,
    },
}


def nprocs(spec: dict) -> int:
    return int(spec["n_workers"])


def check_spec(spec: dict) -> None:
    """Cross-field rules the schema cannot state; raise SpecError naming the key."""
    if spec["backend"] != "simulated" and "seeds" in spec:
        raise specs.SpecError("demo spec: key 'seeds': a list of seeds runs only on the simulated backend")
    if spec["backend"] != "simulated" and spec["method"] == "diloco":
        raise specs.SpecError("demo spec: key 'method': diloco runs on the simulated backend only")
    if spec["method"] == "diloco" and spec["steps"] % int(spec.get("diloco", {}).get("H", 10)):
        raise specs.SpecError("demo spec: key 'diloco.H': steps must be a multiple of H, so the run "
                              "ends on a synchronisation")
    dd = spec.get("demo") or {}
    if "topk" in dd and "chunk" in dd and int(dd["topk"]) > int(dd["chunk"]) ** 2:
        raise specs.SpecError(f"demo spec: key 'demo.topk': {dd['topk']} is larger than a chunk x chunk "
                              f"tile ({dd['chunk']}^2); the optimizer would silently cap it")
    if "n_head" in spec["model"] and spec["model"].get("d_model", 128) % spec["model"]["n_head"]:
        raise specs.SpecError("demo spec: key 'model.n_head': must divide model.d_model")


# ------------------------------------------------------------------ set-up

def build_lm(model_cfg: dict, vocab_size: int, dtype: torch.dtype, seed: int) -> torch.nn.Module:
    """The configured language model with seeded initial weights (same seed, same weights)."""
    torch.manual_seed(seed)
    cfg = {k: v for k, v in model_cfg.items() if k != "name"}
    if model_cfg["name"] == "olmo":
        model = OLMo(vocab_size=vocab_size, **cfg)
    else:
        cfg.pop("mlp_ratio", None)
        model = build_model("gpt", vocab_size=vocab_size, **cfg)
    return model.to(dtype)


def _setup(spec: dict, data_dir: Path, device: torch.device):
    seed = int(spec["seed"])
    seed_everything(seed)
    dtype = DTYPES[spec.get("dtype", "float32")]
    man = load_manifest(data_dir)
    if man.get("kind") != "text":
        raise specs.SpecError(f"demo spec: the data set at {data_dir} is {man.get('kind')!r}, not text")
    train = load_split(data_dir, "train")["tokens"]
    val = load_split(data_dir, "val")["tokens"]
    vocab = int(man.get("vocab_size", 256))
    model = build_lm(spec["model"], vocab, dtype, seed).to(device)
    block = int(spec["model"].get("block_size", 128))
    bs = int(spec["batch_size"])
    evals = [text_batch(val, block, bs, EVAL_SEED, 0, i) for i in range(int(spec.get("eval_batches", 4)))]
    return seed, model, train, evals, block, bs


@torch.no_grad()
def evaluate(model: torch.nn.Module, evals, device) -> float:
    was = model.training
    model.eval()
    losses = [float(lm_loss(model(x.to(device)), y.to(device))) for x, y in evals]
    model.train(was)
    return float(np.mean(losses))


# ------------------------------------------------------------------ comms

class SimComm:
    """In-memory collectives over the N local workers, costed and counted."""

    def __init__(self, n: int, ledger: ByteLedger, network: NetworkModel) -> None:
        self.n, self.ledger, self.network = n, ledger, network
        self.rounds = 0
        self.seconds = 0.0
        self.payload = 0

    def all_reduce_mean(self, xs: list[torch.Tensor]) -> torch.Tensor:
        nbytes = xs[0].numel() * xs[0].element_size()
        self.ledger.all_reduce(nbytes, self.n)
        self.rounds += 2 * (self.n - 1)
        self.seconds += self.network.all_reduce(nbytes, self.n)
        self.payload += nbytes
        return torch.stack(xs).mean(0)

    def all_gather(self, xs: list[torch.Tensor]) -> torch.Tensor:
        nbytes = xs[0].numel() * xs[0].element_size()
        self.ledger.all_gather(nbytes, self.n)
        self.rounds += self.n - 1
        self.seconds += self.network.all_gather(nbytes, self.n)
        self.payload += nbytes
        return torch.stack(xs)

    def pop(self) -> tuple[int, float, int]:
        out = (self.rounds, self.seconds, self.payload)
        self.rounds, self.seconds, self.payload = 0, 0.0, 0
        return out


class DistComm(SimComm):
    """The same interface over torch.distributed: one local worker, one collective each call."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx.world_size, ctx.ledger, NetworkModel())
        self.ctx = ctx

    def all_reduce_mean(self, xs):
        import torch.distributed as dist

        (x,) = xs
        buf = x.detach().clone()
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        buf.div_(self.n)
        self.ledger.all_reduce(buf.numel() * buf.element_size(), self.n)
        self.rounds += 2 * (self.n - 1)
        self.payload += buf.numel() * buf.element_size()
        return buf

    def all_gather(self, xs):
        import torch.distributed as dist

        (x,) = xs
        out = [torch.empty_like(x) for _ in range(self.n)]
        dist.all_gather(out, x.contiguous())
        self.ledger.all_gather(x.numel() * x.element_size(), self.n)
        self.rounds += self.n - 1
        self.payload += x.numel() * x.element_size()
        return torch.stack(out)


# ------------------------------------------------------------------ runs

def _worker_grad(method, w: int, worker_id: int, train, spec, block, bs, seed, step, device) -> float:
    t0 = time.perf_counter()
    model = method.model_for(w)
    x, y = text_batch(train, block, bs, seed, worker_id, step)
    model.zero_grad(set_to_none=True)
    loss = lm_loss(model(x.to(device)), y.to(device))
    loss.backward()
    method.after_backward(w, loss.detach())
    return time.perf_counter() - t0


def run_simulated(spec: dict, data_dir: str | Path, out_dir: str | Path, runtime: dict | None = None) -> Path:
    """One run directory, or with ``seeds`` one per seed (``out_dir/seed{k}``), run one
    after another in this process (one Python and torch start-up for all of them)."""
    check_spec(spec)
    if "seeds" in spec:
        for one in specs.each_seed(spec):
            _run_simulated_one(one, data_dir, Path(out_dir) / f"seed{one['seed']}", runtime)
        return Path(out_dir)
    return _run_simulated_one(spec, data_dir, Path(out_dir), runtime)


def _run_simulated_one(spec: dict, data_dir: str | Path, out_dir: Path, runtime: dict | None) -> Path:
    runtime = specs.runtime_defaults(runtime)
    out_dir = Path(out_dir)
    # the N workers share this process's accelerator if it has one (paper scale), else the CPU
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    seed, model, train, evals, block, bs = _setup(spec, Path(data_dir), device)
    n = int(spec["n_workers"])
    cl = spec["cluster"]
    cluster = SimulatedCluster(n, ComputeModel.from_config(cl["compute"]), NetworkModel(**cl["network"]),
                               StragglerModel.from_config(cl["straggler"], seed))
    comm = SimComm(n, cluster.ledger, cluster.network)
    method = make_method(model, n, spec, comm)
    rec = RunRecorder(out_dir, spec, backend=cluster.backend, clock=cluster.clock)
    ckpt = Checkpointer(out_dir / "checkpoint.pt", spec=spec, **runtime["checkpoint"])
    steps, every = int(spec["steps"]), int(spec.get("eval_every", 10))
    start = 0
    state = ckpt.load()
    if state is not None:
        model.load_state_dict(state["model"])
        method.load_state_dict(state["method"])
        cluster.load_state_dict(state["cluster"])
        rec.load_state_dict(state["recorder"])
        start = state["step"] + 1
    for step in range(start, steps):
        val = evaluate(method.eval_model(), evals, device) if step % every == 0 else np.nan
        secs = [_worker_grad(method, w, w, train, spec, block, bs, seed, step, device) for w in range(n)]
        t0 = time.perf_counter()
        loss = method.update(step)
        shared = time.perf_counter() - t0  # the update every worker runs (its comm is charged below)
        for w in range(n):
            cluster.charge(w, 1, secs[w] + shared)
        rounds, coll_s, payload = comm.pop()
        step_time = cluster.sync_step(step, coll_s)
        rec.log(step=step, time=cluster.now, step_time=step_time, loss=loss, val_loss=val,
                bytes=cluster.ledger.pop_step(), payload_bytes=payload, rounds=rounds,
                compute_s=max(secs) + shared, collective_s=coll_s)
        if step % 50 == 0 or step == steps - 1:
            print(f"demo {spec['method']} seed {seed} step {step}/{steps} loss {loss:.4f}", flush=True)
        ckpt.maybe_save(step, lambda: {"step": step, "model": model.state_dict(),
                                       "method": method.state_dict(), "cluster": cluster.state_dict(),
                                       "recorder": rec.state_dict()})
    final = evaluate(method.eval_model(), evals, device)
    out = rec.finish(final={"val_loss": final}, n_workers=n, cluster=cluster.describe(),
                     simulator_overhead_s=cluster.overhead_s, compute_measured_s=cluster.measured_compute_s,
                     bytes_total=cluster.ledger.total_bytes, payload_bytes_per_step=method.payload_nbytes(),
                     n_params=sum(p.numel() for p in model.parameters()))
    ckpt.clear()
    return out


def run_distributed(spec: dict, data_dir: str | Path, out_dir: str | Path, runtime: dict | None = None):
    """One worker per torchrun process; rank 0 writes the outputs."""
    import torch.distributed as tdist

    from ..runtime import dist

    check_spec(spec)
    runtime = specs.runtime_defaults(runtime)
    ctx = dist.init_from_env(spec["backend"], float(runtime["timeout_s"]))
    try:
        if ctx.world_size != int(spec["n_workers"]):
            raise ValueError(f"launched {ctx.world_size} processes for n_workers={spec['n_workers']}")
        seed, model, train, evals, block, bs = _setup(spec, Path(data_dir), ctx.device)
        comm = DistComm(ctx)
        method = make_method(model, 1, spec, comm)
        rec = RunRecorder(out_dir, spec, backend=ctx.backend, clock="measured")
        # each rank keeps its own state (DeMo's momentum differs between ranks): one file per rank,
        # saved at the same steps on every rank (step cadence only, so the files always agree)
        ckpt = Checkpointer(Path(out_dir) / f"checkpoint.rank{ctx.rank}.pt", spec=spec, every_s=0,
                            every_steps=int(runtime["checkpoint"].get("every_steps", 0)))
        steps, every = int(spec["steps"]), int(spec.get("eval_every", 10))
        state = ckpt.load()
        mine = torch.tensor([state["step"] + 1 if state is not None else 0], device=ctx.device)
        lowest = mine.clone()
        tdist.all_reduce(lowest, op=tdist.ReduceOp.MIN)
        highest = mine.clone()
        tdist.all_reduce(highest, op=tdist.ReduceOp.MAX)
        start, elapsed = 0, 0.0
        if state is not None and int(lowest) == int(highest):  # every rank holds the same step
            model.load_state_dict(state["model"])
            method.load_state_dict(state["method"])
            rec.load_state_dict(state["recorder"])
            start, elapsed = int(mine), float(state["elapsed"])
        params = [p for p in model.parameters()]
        dist.broadcast_(ctx, [p.data for p in params], src=0)
        ctx.ledger.pop_step()
        for step in range(start, steps):
            val = (evaluate(method.eval_model(), evals, ctx.device)
                   if ctx.is_master and step % every == 0 else np.nan)
            t0 = time.perf_counter()
            secs = _worker_grad(method, 0, ctx.rank, train, spec, block, bs, seed, step, ctx.device)
            loss = method.update(step)
            if ctx.device.type == "cuda":
                torch.cuda.synchronize(ctx.device)
            step_time = time.perf_counter() - t0
            elapsed += step_time
            rounds, _, payload = comm.pop()
            rec.log(step=step, time=elapsed, step_time=step_time, loss=loss, val_loss=val,
                    bytes=ctx.ledger.pop_step(), payload_bytes=payload, rounds=rounds, compute_s=secs)
            ckpt.maybe_save(step, lambda: {"step": step, "model": model.state_dict(),
                                           "method": method.state_dict(), "recorder": rec.state_dict(),
                                           "elapsed": elapsed})
        diff = dist.params_max_abs_diff(ctx, [p.data for p in params])
        final = evaluate(method.eval_model(), evals, ctx.device) if ctx.is_master else np.nan
        ctx.barrier()
        ckpt.clear()
        if ctx.is_master:
            return rec.finish(final={"val_loss": final}, n_workers=ctx.world_size,
                              params_max_abs_diff_across_ranks=diff, bytes_total=ctx.ledger.total_bytes,
                              payload_bytes_per_step=method.payload_nbytes(),
                              n_params=sum(p.numel() for p in model.parameters()))
        return None
    finally:
        ctx.close()
