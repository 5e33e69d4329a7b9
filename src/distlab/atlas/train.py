"""The atlas drivers: one technique interface, the simulated cluster or gloo.

* ``simulated`` — the N workers in this process; each worker's compute is
  measured (its passes plus, for sync kinds, the update every worker runs) and
  charged to :class:`distlab.atlas.clock.Clock` (with ``cluster.compute.mode: stored``
  the stored profile's seconds for its passes instead, the measured ones kept beside
  them: :mod:`distlab.atlas.profile`) with the straggler model's
  delays; the collectives (or the master's messages) to the alpha-beta network.
* ``gloo`` — one worker per process; wall-clock time.  A master-kind step
  all-gathers every rank's (measured compute + the straggler model's drawn
  delay) and takes the fastest ``wait_for`` by it, ties broken by the runtime's
  seeded draw, so every rank decodes the same received set.

Each run writes ``record.json`` (per step: each worker's compute seconds and
passes, the message pattern, which workers the step waited for, loss, the
validation loss every ``eval_every`` steps, the clock) and ``manifest.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from ..config import specs
from ..data import load_manifest, load_split, text_batch
from ..models import build_model
from ..runtime import device as devices
from ..runtime.stragglers import StragglerModel
from ..train.common import seed_everything
from .clock import Clock, tie_order
from .profile import spec_charge
from .spec import SPEC_SCHEMA, check_spec, kind, nprocs  # noqa: F401  (the trainer interface)
from ..techniques import EVAL_SEED, batched
from ..techniques.comm import DistComm, SimComm
from ..techniques.registry import make_technique
from ..techniques.step import flops_per_pass


def build_lm(model_cfg: dict, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = {k: v for k, v in model_cfg.items() if k != "name"}
    return build_model("gpt", vocab_size=256, **cfg).to(torch.float32)


@torch.no_grad()
def evaluate(model, evals) -> float:
    """The mean over the fixed validation batches of each one's mean loss, the batches (of one
    shape) in one forward (:func:`distlab.techniques.batched.eval_losses`)."""
    was = model.training
    model.eval()
    out = float(batched.eval_losses(model, evals).mean())
    model.train(was)
    return out


def _setup(spec: dict, data_dir: Path):
    seed = int(spec["seed"])
    seed_everything(seed)
    man = load_manifest(data_dir)
    if man.get("kind") != "text":
        raise specs.SpecError(f"atlas spec: the data set at {data_dir} is {man.get('kind')!r}, not text")
    train = load_split(data_dir, "train")["tokens"]
    val = load_split(data_dir, "val")["tokens"]
    block, bs = int(spec["model"].get("block_size", 32)), int(spec["batch_size"])
    evals = [text_batch(val, block, bs, EVAL_SEED, 0, i) for i in range(int(spec.get("eval_batches", 4)))]
    return seed, build_lm(spec["model"], seed), train, evals, block, bs


def _write(out_dir: Path, spec: dict, rec: dict, extra: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "record.json.part").write_text(json.dumps(rec))
    (out_dir / "record.json.part").replace(out_dir / "record.json")
    from ..results.runs import seal

    man = seal({"spec": spec, **extra}, out_dir, ["record.json"])
    (out_dir / "manifest.json").write_text(json.dumps(man, indent=2, sort_keys=True) + "\n")
    return out_dir


def _new_record(spec, n, fpp):
    return {"technique": spec["technique"], "kind": kind(spec["technique"]), "n": n, "seed": int(spec["seed"]),
            "flops_per_pass": fpp, "straggler": spec["cluster"]["straggler"],
            "network": spec["cluster"]["network"], "steps": []}


def run_simulated(spec: dict, data_dir, out_dir, runtime: dict | None = None) -> Path:
    check_spec(spec)
    torch.set_num_threads(1)
    seed, model, train, evals, block, bs = _setup(spec, Path(data_dir))
    # the N workers compute one after another on the spec's device (the CPU without the key)
    dev = devices.of_spec(spec, "atlas")
    model = model.to(dev)
    evals = [(x.to(dev), y.to(dev)) for x, y in evals]
    n, t = int(spec["n_workers"]), spec["technique"]
    net = spec["cluster"]["network"]
    strag = StragglerModel.from_config(spec["cluster"]["straggler"], seed)
    clock = Clock(n, net["latency_s"], net["bandwidth_Bps"], strag.compute_factor(n))
    comm = SimComm(n)
    tech = make_technique(t, model, n, range(n), spec, comm, train, block, bs, dev)
    fpp = flops_per_pass(model, block * bs)
    rec = _new_record(spec, n, fpp)
    stored = spec_charge(spec)  # None: the clock charges the measured seconds
    steps, every = int(spec["steps"]), int(spec.get("eval_every", 10))
    for step in range(steps):
        val = evaluate(tech.eval_model(), evals) if step % every == 0 else None
        secs, passes = _compute(tech, n, step, dev, batch=stored is not None)
        delays = strag.delays(step, n)
        row = {"step": step, "val_loss": val, "passes": passes.tolist()}
        if tech.kind == "sync":
            t0 = devices.timer(dev)
            loss = tech.update(step)
            shared = devices.timer(dev) - t0
            measured = secs + shared
            compute = measured if stored is None else stored.compute(passes)
            colls = comm.pop()
            st = clock.sync(compute, delays[None], colls)
            row.update(colls=colls, received=list(range(n)))
        else:
            pat = tech.master_pattern()
            measured = secs
            compute = measured if stored is None else stored.compute(passes)
            tie = tie_order(strag.seed, step, n)
            st, mask = clock.master(compute, delays[None], pat["msg_bytes"], pat["bcast_bytes"], pat["wait_for"],
                                    0.0, tie)
            arrival_order = _arrival_order(clock, mask[0], tie)
            t0 = devices.timer(dev)
            loss = tech.update(step, arrival_order)
            measured_master = devices.timer(dev) - t0
            master_s = measured_master if stored is None else stored.master_s
            clock.now = clock.now + master_s
            st = st + master_s
            comm.pop()
            row.update(pat, master_s=master_s, received=arrival_order)
            if stored is not None:
                row.update(measured_master_s=measured_master)
        if stored is not None:  # what the clock charged (the profile's) and what was measured
            row.update(measured_compute_s=measured.tolist())
        row.update(compute_s=compute.tolist(), loss=float(loss), step_time=float(st[0]), time=float(clock.now[0]))
        rec["steps"].append(row)
    final = evaluate(tech.eval_model(), evals)
    return _write(Path(out_dir), spec, rec, {"backend": "simulated", "clock": "simulated", "final_val_loss": final,
                                             "n_params": sum(p.numel() for p in model.parameters()),
                                             **(devices.describe(dev) if "device" in spec else {})})


def _compute(tech, n: int, step: int, dev, batch: bool) -> tuple[np.ndarray, np.ndarray]:
    """Every worker's compute at ``step``: (its measured seconds, its passes).  Where the clock
    charges the stored profile (``batch``) the N workers' passes are one batched computation
    (:mod:`distlab.techniques.batched`) and each worker's measured seconds, only recorded, are an
    equal share of it; where the clock charges the measured seconds, each worker runs and is timed
    on its own, one after another."""
    secs = np.zeros(n)
    if batch:
        t0 = devices.timer(dev)
        got = tech.compute_all(step)
        if got is not None:
            secs[:] = (devices.timer(dev) - t0) / n
            return secs, np.asarray(got, dtype=int)
    passes = np.zeros(n, dtype=int)
    for w in range(n):  # each worker's own kernels: the timer waits for the device's queue
        t0 = devices.timer(dev)
        passes[w] = tech.compute(w, w, step)
        secs[w] = devices.timer(dev) - t0
    return secs, passes


def _arrival_order(clock: Clock, mask: np.ndarray, tie: np.ndarray) -> list[int]:
    """The received workers in arrival order (ties by the seeded draw)."""
    finish = clock.ready[0]
    idx = np.flatnonzero(mask)
    return [int(i) for i in idx[np.lexsort((tie[idx], finish[idx]))]]


def run_distributed(spec: dict, data_dir, out_dir, runtime: dict | None = None):
    import torch.distributed as tdist

    from ..runtime import dist

    check_spec(spec)
    runtime = specs.runtime_defaults(runtime)
    ctx = dist.init_from_env(spec["backend"], float(runtime["timeout_s"]))
    try:
        n, t = ctx.world_size, spec["technique"]
        if n != int(spec["n_workers"]):
            raise ValueError(f"launched {n} processes for n_workers={spec['n_workers']}")
        seed, model, train, evals, block, bs = _setup(spec, Path(data_dir))
        strag = StragglerModel.from_config(spec["cluster"]["straggler"], seed)
        comm = DistComm(n)
        tech = make_technique(t, model, n, [ctx.rank], spec, comm, train, block, bs, ctx.device)
        rec = _new_record(spec, n, flops_per_pass(model, block * bs))
        steps, every = int(spec["steps"]), int(spec.get("eval_every", 10))
        for step in range(steps):
            val = evaluate(tech.eval_model(), evals) if (ctx.is_master and step % every == 0) else None
            t0 = time.perf_counter()
            passes = tech.compute(0, ctx.rank, step)
            secs = time.perf_counter() - t0
            row = {"step": step, "val_loss": val}
            if tech.kind == "sync":
                loss = tech.update(step)
                row.update(colls=comm.pop(), received=list(range(n)))
            else:
                mine = torch.tensor([secs + float(strag.delays(step, n)[ctx.rank])], dtype=torch.float64)
                every_t = torch.empty(n, dtype=torch.float64)
                tdist.all_gather_into_tensor(every_t, mine)
                tie = tie_order(strag.seed, step, n)
                order = np.lexsort((tie, every_t.numpy()))
                received = [int(w) for w in order[:tech.master_pattern()["wait_for"]]]
                loss = tech.update(step, received)
                comm.pop()
                row.update(tech.master_pattern(), received=received)
            st = time.perf_counter() - t0
            row.update(loss=float(loss), step_time=st, compute_s=[secs], passes=[passes])
            rec["steps"].append(row)
        final = evaluate(tech.eval_model(), evals) if ctx.is_master else None
        flat = torch.cat([p.detach().reshape(-1) for p in tech.eval_model().parameters()])
        mx, mn = flat.clone(), flat.clone()
        tdist.all_reduce(mx, op=tdist.ReduceOp.MAX)
        tdist.all_reduce(mn, op=tdist.ReduceOp.MIN)
        diff = float((mx - mn).abs().max())
        ctx.barrier()
        if ctx.is_master:
            return _write(Path(out_dir), spec, rec, {"backend": ctx.backend, "clock": "measured",
                                                     "final_val_loss": final, "params_max_abs_diff_across_ranks": diff,
                                                     "n_params": sum(p.numel() for p in model.parameters())})
        return None
    finally:
        ctx.close()


# ------------------------------------------------------------------ jobs (one per technique)

def _final(out: Path) -> float:
    return float(json.loads((out / "manifest.json").read_text())["final_val_loss"])


def technique_job(a: dict, technique: str, data_dir, out_dir) -> dict:
    """The technique's sweep (lr x natural setting, chosen on the final validation loss of
    the fixed windows; the lr grid widened by one grid ratio, up to ``sweep.widen`` times,
    while the best lr is at its edge), then its runs at the choice — the chosen sweep run
    is the run of its own spec (seed ``sweep.seed`` at the sweep's size and N), not a
    second copy; writes ``choice.json`` and ``done.json``."""
    from .workflow import run_specs, setting_grid, sweep_specs, widened_lr

    out_dir = Path(out_dir)
    rows, lrs = [], list(a["sweep"]["lrs"])
    todo = sweep_specs(a, technique)
    widen = int(a["sweep"].get("widen", 0))
    for i in range(widen + 1):
        for label, spec in todo:
            d = out_dir / "sweep" / label
            _once(spec, data_dir, d)
            rows.append((_final(d), label, spec, d))
        best = min(rows, key=lambda r: (not np.isfinite(r[0]), r[0]))
        nxt = widened_lr(lrs, best[2]["lr"])
        if nxt is None or i == widen:
            break
        lrs.append(nxt)
        todo = sweep_specs(a, technique, [nxt])
    swept = setting_grid(a, technique)[0]
    setting = ({sec: {k: best[2][sec][k] for k in opts} for sec, opts in swept.items()} if swept else None)
    choice = {"technique": technique, "lr": best[2]["lr"], "setting": setting, "chosen": best[1],
              "lr_grid": sorted(lrs), "at_grid_edge": nxt is not None,
              "sweep": {label: v for v, label, _, _ in rows}}
    (out_dir / "choice.json").write_text(json.dumps(choice, indent=2) + "\n")
    chosen = specs.spec_hash(specs.validate_spec(best[2], SPEC_SCHEMA, "atlas"))
    runs = []
    for label, spec in run_specs(a, technique, best[2]["lr"], setting):
        if specs.spec_hash(specs.validate_spec(spec, SPEC_SCHEMA, "atlas")) == chosen:
            runs.append(str(best[3]))  # the same experiment: the sweep's run
            continue
        d = out_dir / "runs" / label
        _once(spec, data_dir, d)
        runs.append(str(d))
    (out_dir / "done.json").write_text(json.dumps({"runs": runs, **choice}, indent=2) + "\n")
    return choice


def reference_job(a: dict, data_dir, out_dir) -> list[str]:
    from .workflow import reference_specs

    runs = []
    for label, spec in reference_specs(a):
        d = Path(out_dir) / label
        _once(spec, data_dir, d)
        runs.append(str(d))
    (Path(out_dir) / "done.json").write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    return runs


def _once(spec: dict, data_dir, d: Path) -> None:
    """Train unless ``d`` already holds this very spec's finished run."""
    spec = specs.validate_spec(spec, SPEC_SCHEMA, "atlas")
    man = d / "manifest.json"
    if man.exists() and (d / "record.json").exists():
        if specs.spec_hash(json.loads(man.read_text()).get("spec")) == specs.spec_hash(spec):
            return
    t0 = time.perf_counter()
    run_simulated(spec, data_dir, d)
    print(f"atlas {spec['technique']} {d}: {time.perf_counter() - t0:.1f} s", flush=True)
