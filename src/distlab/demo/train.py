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

Validation loss during training is the mean over a fixed set of windows of
the validation text (the same for every run), every ``eval_every`` steps,
outside the timed region.  At the end every non-overlapping window of the
whole validation split and of the whole test split is evaluated
(``final.val_loss``, ``final.test_loss``): the learning rate is chosen on the
first, methods are compared on the second.

``lr`` is a number, or ``{"sweep": path, "method": name}``: the value chosen
for ``name`` in a sweep's choice file (``{"method": lr, ...}``, written by
``distlab demo-table --kind sweep``); the run's manifest records the number
and where it came from (``lr_chosen_by``).
"""

from __future__ import annotations

import json
import time
import weakref
from pathlib import Path

import numpy as np
import torch

from ..config import specs
from ..data import load_manifest, load_split, text_batch
from ..models import build_model, lm_loss
from ..results import sweeps
from ..results.checkpoint import Checkpointer
from ..results.runs import RunRecorder
from ..runtime import device as devices
from ..runtime.compute import ComputeModel
from ..runtime.network import NetworkModel
from ..runtime.sim import SimulatedCluster
from ..runtime.stragglers import StragglerModel
from ..techniques import EVAL_SEED, batched
from ..techniques.comm import DistComm, SimComm
from ..train.common import DTYPES, seed_everything
from ..techniques.methods import make_method
from .olmo import OLMo
from .spec import SPEC_SCHEMA, check_spec, nprocs  # noqa: F401  (distlab train reads them here)

def resolve_lr(spec: dict) -> dict:
    """The spec with ``lr`` a number: a ``{"sweep", "method"}`` lr is read from the sweep's choice file."""
    lr = spec["lr"]
    if not isinstance(lr, dict):
        return spec
    path = Path(lr["sweep"])
    try:
        chosen = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise specs.SpecError(f"demo spec: key 'lr.sweep': cannot read the sweep's choice {path}: {e}") from e
    if lr["method"] not in chosen:
        raise specs.SpecError(f"demo spec: key 'lr.method': {lr['method']!r} is not in {path} "
                              f"(it has {sorted(chosen)})")
    return {**spec, "lr": float(chosen[lr["method"]]), "lr_chosen_by": f"{path}:{lr['method']}"}


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
    finals = {"val_loss": split_windows(val, block), "test_loss": split_windows(load_split(data_dir, "test")["tokens"], block)}
    return seed, model, train, evals, finals, block, bs


def split_windows(tokens: torch.Tensor, block: int, batch: int = 256) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every non-overlapping window of a split (inputs, next-byte targets), in batches."""
    n = (len(tokens) - 1) // block
    if n < 1:
        raise specs.SpecError(f"demo spec: key 'model.block_size': a split of {len(tokens)} tokens has no "
                              f"window of {block + 1}")
    x = tokens[:n * block].long().view(n, block)
    y = tokens[1:n * block + 1].long().view(n, block)
    return [(x[i:i + batch], y[i:i + batch]) for i in range(0, n, batch)]


@torch.no_grad()
def evaluate_splits(model: torch.nn.Module, finals: dict, device) -> dict:
    """Mean loss per byte over every window of each split (windows weighted by their size)."""
    was = model.training
    model.eval()
    out = {}
    for name, batches in finals.items():
        tot = cnt = 0.0
        for x, y in batches:
            tot += float(lm_loss(model(x.to(device)), y.to(device))) * x.numel()
            cnt += x.numel()
        out[name] = tot / cnt
    model.train(was)
    return out


@torch.no_grad()
def evaluate(model: torch.nn.Module, evals, device) -> float:
    """The mean over the fixed validation batches of each one's mean loss, the batches (of one
    shape) in one forward (:func:`distlab.techniques.batched.eval_losses`)."""
    was = model.training
    model.eval()
    out = float(batched.eval_losses(model, [(x.to(device), y.to(device)) for x, y in evals]).mean())
    model.train(was)
    return out


# ------------------------------------------------------------------ runs

_PARAMS: "weakref.WeakKeyDictionary[torch.nn.Module, list]" = weakref.WeakKeyDictionary()


def grads_to_none(model: torch.nn.Module) -> None:
    """``model.zero_grad(set_to_none=True)`` without walking its modules every pass: the
    parameter list is built once per model (as the techniques' steps do)."""
    params = _PARAMS.get(model)
    if params is None:
        params = _PARAMS[model] = list(model.parameters())
    for p in params:
        p.grad = None


def _worker_grad(method, w: int, worker_id: int, train, spec, block, bs, seed, step, device) -> float:
    t0 = devices.timer(device)  # on CUDA: this worker's kernels only (the queue drained before and after)
    model = method.model_for(w)
    x, y = text_batch(train, block, bs, seed, worker_id, step)
    grads_to_none(model)
    loss = lm_loss(model(x.to(device)), y.to(device))
    loss.backward()
    method.after_backward(w, loss.detach())
    return devices.timer(device) - t0


def _worker_grads(method, n: int, train, spec, block, bs, seed, step, device, mode: str) -> list[float]:
    """Every worker's gradient at ``step`` and its measured seconds.  With calibrated compute (the
    clock charges units, not seconds) the N passes are one batched computation
    (:mod:`distlab.techniques.batched`), each worker's seconds an equal share of it (recorded, not
    charged); with measured compute each worker runs and is timed on its own, one after another."""
    if mode == "calibrated":
        t0 = devices.timer(device)
        def batch_of(w):
            x, y = text_batch(train, block, bs, seed, w, step)
            return x.to(device), y.to(device)
        if batched.method_step(method, n, batch_of):
            return [(devices.timer(device) - t0) / n] * n
    return [_worker_grad(method, w, w, train, spec, block, bs, seed, step, device) for w in range(n)]


def pick_device(backend: str = "simulated", spec: dict | None = None) -> torch.device:
    """Where a simulated job's N workers run: the spec's ``device`` (distlab.runtime.device);
    without it, as before the key, this process's GPU if it has one (paper scale), else the CPU."""
    return devices.resolve((spec or {}).get("device"), "demo")


def finished(out_dir: Path, spec: dict) -> bool:
    """A run directory that holds the complete result of this very spec (manifest and metrics)."""
    man = out_dir / "manifest.json"
    if not (man.exists() and (out_dir / "metrics.csv").exists()):
        return False
    try:
        written = json.loads(man.read_text()).get("spec")
    except (OSError, json.JSONDecodeError):
        return False
    return specs.spec_hash(written) == specs.spec_hash(spec) if written is not None else False


def run_simulated(spec: dict, data_dir: str | Path, out_dir: str | Path, runtime: dict | None = None) -> Path:
    """One run directory, or with ``seeds`` one per seed (``out_dir/seed{k}``), run one
    after another in this process (one Python and torch start-up for all of them).  A seed
    whose directory already holds this spec's finished run is skipped (a killed and rerun
    job retrains only what had not finished)."""
    check_spec(spec)
    spec = resolve_lr(spec)
    if "seeds" in spec:
        for one in specs.each_seed(spec):
            d = Path(out_dir) / f"seed{one['seed']}"
            if finished(d, one):
                print(f"demo {one['method']} seed {one['seed']}: finished earlier ({d}), skipped", flush=True)
                continue
            if reuse(one, d):
                continue
            _run_simulated_one(one, data_dir, d, runtime)
        return Path(out_dir)
    if reuse(spec, Path(out_dir)):
        return Path(out_dir)
    return _run_simulated_one(spec, data_dir, Path(out_dir), runtime)


def reuse(spec: dict, out_dir: Path) -> bool:
    """Take a one-seed run from the sweep when the sweep already trained it (the comparison at the
    chosen lr, for the sweep's seeds, is the sweep's run at that lr: the same computation, same
    numbers): the spec's ``reuse`` names the folder the workflow's pick step copied it to
    (rule demo_sweep_pick, :mod:`distlab.results.sweeps`).  False (nothing written) otherwise."""
    return sweeps.take(spec, out_dir, "demo")


def _progress_every(steps: int) -> int:
    """Progress lines at least every 10 % of the steps."""
    return max(1, steps // 10)


def _run_simulated_one(spec: dict, data_dir: str | Path, out_dir: Path, runtime: dict | None) -> Path:
    runtime = specs.runtime_defaults(runtime)
    out_dir = Path(out_dir)
    # the N workers share this process's accelerator if it has one (paper scale), else the CPU
    device = pick_device(spec=spec)
    seed, model, train, evals, finals, block, bs = _setup(spec, Path(data_dir), device)
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
        with ckpt.restoring():  # a state that does not fit the model: one line, file set aside
            model.load_state_dict(state["model"])
            method.load_state_dict(state["method"])
            cluster.load_state_dict(state["cluster"])
            rec.load_state_dict(state["recorder"])
        start = state["step"] + 1
    for step in range(start, steps):
        val = evaluate(method.eval_model(), evals, device) if step % every == 0 else np.nan
        secs = _worker_grads(method, n, train, spec, block, bs, seed, step, device, cluster.compute_model.mode)
        t0 = devices.timer(device)
        loss = method.update(step)
        shared = devices.timer(device) - t0  # the update every worker runs (its comm is charged below)
        for w in range(n):
            cluster.charge(w, 1, secs[w] + shared)
        rounds, coll_s, payload = comm.totals(comm.pop())
        step_time = cluster.sync_step(step, coll_s)
        rec.log(step=step, time=cluster.now, step_time=step_time, loss=loss, val_loss=val,
                bytes=cluster.ledger.pop_step(), payload_bytes=payload, rounds=rounds,
                compute_s=max(secs) + shared, collective_s=coll_s)
        if step % _progress_every(steps) == 0 or step == steps - 1:
            print(f"demo {spec['method']} seed {seed} step {step}/{steps} loss {loss:.4f}", flush=True)
        ckpt.maybe_save(step, lambda: {"step": step, "model": model.state_dict(),
                                       "method": method.state_dict(), "cluster": cluster.state_dict(),
                                       "recorder": rec.state_dict()})
    final = {**evaluate_splits(method.eval_model(), finals, device),
             "curve_val_loss": evaluate(method.eval_model(), evals, device)}  # the curve's last point
    out = rec.finish(final=final, n_workers=n, cluster=cluster.describe(),
                     simulator_overhead_s=cluster.overhead_s, compute_measured_s=cluster.measured_compute_s,
                     bytes_total=cluster.ledger.total_bytes, payload_bytes_per_step=method.payload_nbytes(),
                     n_params=sum(p.numel() for p in model.parameters()))
    ckpt.clear()
    return out


def _due(ckpt: Checkpointer, step: int, ctx) -> bool:
    """Whether every rank saves now: due on any rank (steps or wall seconds) means due on all."""
    import torch.distributed as tdist

    if ckpt.every_s <= 0 and ckpt.every_steps <= 0:
        return False
    mine = (ckpt.every_steps > 0 and step % ckpt.every_steps == 0) or \
        (ckpt.every_s > 0 and time.monotonic() - ckpt._last >= ckpt.every_s)
    flag = torch.tensor([int(mine)], device=ctx.device)
    tdist.all_reduce(flag, op=tdist.ReduceOp.MAX)
    return bool(flag.item())


def _resume_common_step(ckpt, ctx, spec: dict, seed: int, model, method, rec) -> tuple[int, float]:
    """(first step, elapsed seconds) after restoring the newest step every rank holds.  A kill can
    fall between two ranks' saves of the same step: each rank keeps its last two states, and all
    resume from the lowest of the ranks' newest steps, or from scratch where they share none."""
    import torch.distributed as tdist

    held = {int(s["step"]): s for s in ckpt.load_all()}
    newest = torch.tensor([max(held) if held else -1], device=ctx.device)
    tdist.all_reduce(newest, op=tdist.ReduceOp.MIN)
    target = int(newest)
    have = torch.tensor([int(target in held)], device=ctx.device)
    tdist.all_reduce(have, op=tdist.ReduceOp.MIN)
    state = held[target] if target >= 0 and int(have) else None
    if held and state is None and ctx.is_master:
        print(f"demo {spec['method']} seed {seed}: the ranks' checkpoints hold no common step "
              f"(this rank: {sorted(held)}); starting from scratch", flush=True)
    if state is None:
        return 0, 0.0
    with ckpt.restoring(state):  # every rank holds this step
        model.load_state_dict(state["model"])
        method.load_state_dict(state["method"])
        rec.load_state_dict(state["recorder"])
    if ctx.is_master:
        print(f"demo {spec['method']} seed {seed}: resumed at step {target + 1}/{spec['steps']}", flush=True)
    return target + 1, float(state["elapsed"])


def run_distributed(spec: dict, data_dir: str | Path, out_dir: str | Path, runtime: dict | None = None):
    """One worker per torchrun process; rank 0 writes the outputs."""
    from ..runtime import dist

    check_spec(spec)
    spec = resolve_lr(spec)
    runtime = specs.runtime_defaults(runtime)
    ctx = dist.init_from_env(spec["backend"], float(runtime["timeout_s"]))
    try:
        if ctx.world_size != int(spec["n_workers"]):
            raise ValueError(f"launched {ctx.world_size} processes for n_workers={spec['n_workers']}")
        seed, model, train, evals, finals, block, bs = _setup(spec, Path(data_dir), ctx.device)
        comm = DistComm(ctx.world_size, ctx.ledger)
        method = make_method(model, 1, spec, comm)
        rec = RunRecorder(out_dir, spec, backend=ctx.backend, clock="measured")
        # each rank keeps its own state (DeMo's momentum differs between ranks): one file per rank,
        # saved at the same steps on every rank: a save is due when any rank finds it due (the
        # runtime's every_steps, or every_s of wall time), agreed by a one-element all-reduce
        # outside the timed step and outside the byte ledger
        cp = runtime["checkpoint"]
        ckpt = Checkpointer(Path(out_dir) / f"checkpoint.rank{ctx.rank}.pt", spec=spec,
                            every_s=float(cp.get("every_s", 0) or 0), every_steps=int(cp.get("every_steps", 0) or 0))
        steps, every = int(spec["steps"]), int(spec.get("eval_every", 10))
        start, elapsed = _resume_common_step(ckpt, ctx, spec, seed, model, method, rec)
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
            rounds, _, payload = comm.totals(comm.pop())
            rec.log(step=step, time=elapsed, step_time=step_time, loss=loss, val_loss=val,
                    bytes=ctx.ledger.pop_step(), payload_bytes=payload, rounds=rounds, compute_s=secs)
            if ctx.is_master and (step % _progress_every(steps) == 0 or step == steps - 1):
                print(f"demo {spec['method']} seed {seed} step {step}/{steps} loss {loss:.4f} "
                      f"step {step_time * 1e3:.1f} ms", flush=True)
            if _due(ckpt, step, ctx):
                ckpt.save({"step": step, "model": model.state_dict(), "method": method.state_dict(),
                           "recorder": rec.state_dict(), "elapsed": elapsed})
        diff = dist.params_max_abs_diff(ctx, [p.data for p in params])
        final = ({**evaluate_splits(method.eval_model(), finals, ctx.device),
                  "curve_val_loss": evaluate(method.eval_model(), evals, ctx.device)} if ctx.is_master else {})
        ctx.barrier()
        ckpt.clear()
        if ctx.is_master:
            return rec.finish(final=final, n_workers=ctx.world_size,
                              params_max_abs_diff_across_ranks=diff, bytes_total=ctx.ledger.total_bytes,
                              payload_bytes_per_step=method.payload_nbytes(),
                              n_params=sum(p.numel() for p in model.parameters()))
        return None
    finally:
        ctx.close()
