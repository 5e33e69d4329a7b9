"""One local-learning training run: ``distlab train --experiment local --spec ...``.

Methods: ``bp`` (end-to-end backprop), ``rc`` (readout-gradient consensus,
``mode`` ``sequential`` or ``parallel``) and ``pc`` (predictive coding,
``variant`` ``strict`` or ``fixed``).  Every method of a seed builds the same
GPT with the same initial weights and reads the same training batches
(batch ``i`` is a pure function of (seed, i)), so runs pair by seed.

Outputs (through :class:`distlab.results.runs.RunRecorder`, manifest written last):
``metrics.csv`` with one row per step (``tokens``, measured training ``time``
without evaluation, training ``loss``, ``val_loss`` on evaluation steps) and
``manifest.json`` with ``final`` (held-out ``val_loss`` and ``test_loss`` in
nats per token), ``tokens_per_s`` after warm-up, and the peak RSS of every
process of the run, summed.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import torch

from ..results.checkpoint import Checkpointer

from ..results.runs import RunRecorder
from ..runtime.machine_load import LoadWatch
from ..config.specs import each_seed, runtime_defaults
from ..results.tables import atomic_output
from . import pc as pcmod
from .model import (TextData, build_gpt, lm_loss, make_optimizer, seed_everything, set_lr,
                    split_gpt)
from .processes import train_rc_parallel
from .sweep import resolve_lr, take_from_sweep
from .rc import (Evaluator, Result, Resume, SectionFailure, _end_tick, _own_peak, train_bp,
                 train_rc_sequential, _row)
from .spec import SPEC_SCHEMA, check_spec  # noqa: F401  (distlab train reads them here)

log = logging.getLogger(__name__)

def train_pc(spec: dict, data: TextData, split, on_tick=None, evaluator=None, ckpt=None) -> Result:
    """PC on the whole chain (embedding, every block, readout); one AdamW on PC's gradients."""
    layers, readout = pcmod.gpt_chain(split)
    params = pcmod._params(list(layers) + [readout])
    opt = make_optimizer(params, spec)
    cfg = spec["pc"]
    res = Result()
    resume = Resume(ckpt, split.gpt, [opt])
    for t in range(resume.start(res), int(spec["steps"])):
        t0 = time.perf_counter()
        x, y = data.train_batch(t)
        n_tok = y.numel()
        # the natural PC energy sums over every token's value nodes, so the loss term is the
        # summed cross-entropy; the weight gradients are then scaled to the mean, as in BP
        info = pcmod.pc_gradients(
            layers, lambda h: lm_loss(readout(h), y, reduction="sum"), readout, x,
            spec["variant"], int(cfg["T"]), float(cfg["eta"]), float(cfg["beta"]),
            skip_zero=spec["variant"] == "fixed")  # the same bits, fewer products (tested)
        for p in params:
            if p.grad is not None:
                p.grad.div_(n_tok)
        set_lr([opt], spec, t)
        opt.step()
        res.train_s += time.perf_counter() - t0
        row = _row(t, spec, res.train_s, {0: info["loss"] / n_tok})
        row["pc_energy"] = info["energy"]
        _end_tick(t, row, spec, res, evaluator, split, resume, on_tick)
    return _own_peak(res)


def method_label(spec: dict) -> str:
    """The method's name in tables and figures: ``rc-pc-T<n>`` for the hybrid, and a
    fixed-prediction PC with fewer than L + 1 iterations is ``pc-fixed-trunc`` (it equals
    BP only at T >= L + 1; below, the lowest layers get no error)."""
    if "label" in spec:
        return spec["label"]
    if spec["method"] == "rc":
        if "feedback" in spec:
            return f"rc-pc-T{int(spec['feedback']['T'])}"
        if spec.get("heads") == "separate":
            return "rc-heads"
        return {"parallel": "rc-thread" if spec.get("concurrency") == "thread" else "rc-par",
                "async": "rc-async"}.get(spec["mode"], "rc-seq")
    if spec["method"] == "pc":
        if spec["variant"] == "fixed" and int(spec["pc"]["T"]) < int(spec["model"]["n_layer"]) + 1:
            return "pc-fixed-trunc"
        return f"pc-{spec['variant']}"
    return "bp"


def run(spec: dict, data_dir: str | Path, runtime: dict | None = None,
        out_dir: str | Path | None = None) -> tuple[Result, dict, object]:
    """Train one run; returns (result, final held-out losses, split).  With ``out_dir``, the
    sequential engines checkpoint there (keyed by the spec; the parallel mode does not);
    nothing else is written."""
    check_spec(spec)
    runtime = runtime or {}
    torch.set_num_threads(int(spec.get("threads", 1)))
    seed_everything(int(spec["seed"]))
    m = spec["model"]
    data = TextData(data_dir, int(m["block_size"]), int(spec["batch_size"]), int(spec["seed"]))
    split = split_gpt(build_gpt(m, int(spec["seed"])), int(spec.get("sections", 1)))
    ev = Evaluator(data, spec)
    every = max(1, int(spec["steps"]) // 10)

    def on_tick(t: int, row: dict) -> None:
        if t % every == 0 or t == int(spec["steps"]) - 1:
            log.info("step %d loss %.4f val %.4f time %.1fs", t, row["loss"], row["val_loss"], row["time"])

    method = spec["method"]
    ckpt = None
    if out_dir is not None and spec.get("mode", "sequential") == "sequential":
        ckpt = Checkpointer(Path(out_dir) / "checkpoint.pt", spec=spec,
                            **runtime_defaults(runtime)["checkpoint"])
    if method == "bp":
        res = train_bp(spec, data, split, on_tick, ev, ckpt)
    elif method == "pc":
        res = train_pc(spec, data, split, on_tick, ev, ckpt)
    elif spec["mode"] == "sequential":
        res = train_rc_sequential(spec, data, split, on_tick, ev, ckpt)
    elif spec["mode"] == "async":
        from .rc_async import train_rc_async

        res = train_rc_async(spec, str(data_dir), data, split, on_tick, ev,
                             timeout=float(runtime.get("timeout_s", 60.0)))
    else:
        res = train_rc_parallel(spec, str(data_dir), data, split, on_tick, ev,
                                timeout=float(runtime.get("timeout_s", 60.0)))
    final = ev.final(split)
    for k, v in final.items():
        if not math.isfinite(v):
            raise FloatingPointError(f"{method_label(spec)} seed {spec['seed']}: {k} is {v} "
                                     "(training diverged; lower lr)")
    return res, final, split


def tokens_per_s(res: Result, spec: dict) -> float:
    """Training tokens per second after ``warmup_steps`` (the first steps are not timed)."""
    w = min(int(spec.get("warmup_steps", 10)), len(res.rows) - 2)
    w = max(w, 0)
    rows = res.rows
    t0 = rows[w - 1]["time"] if w > 0 else 0.0
    tokens = rows[-1]["tokens"] - (rows[w - 1]["tokens"] if w > 0 else 0)
    return tokens / max(rows[-1]["time"] - t0, 1e-9)


def run_simulated(spec: dict, data_dir: str | Path, out_dir: str | Path,
                  runtime: dict | None = None) -> Path:
    """The trainer entry point (the name is the CLI's; the clock here is always measured).
    With ``seeds``, one run directory ``seed{k}`` per seed under ``out_dir``, one after the
    other in this process (each with its own spec, checkpoint and manifest)."""
    try:
        return _run_seeds(spec, data_dir, out_dir, runtime)
    except SectionFailure as e:  # one line naming the section, no traceback
        raise SystemExit(f"distlab: {e}") from None


def _run_seeds(spec: dict, data_dir: str | Path, out_dir: str | Path, runtime: dict | None) -> Path:
    spec = resolve_lr(spec)
    if "seeds" in spec:
        if spec.get("mode", "sequential") != "sequential" or int(spec.get("threads", 1)) > 1:
            raise ValueError("seeds: a list of seeds is for one-thread sequential runs; a timed "
                             "run (threads > 1 or parallel sections) gets a job of its own")
        runs = each_seed(spec)
        for one in runs:  # every seed's spec checked before the first trains
            check_spec(one)
        for one in runs:
            if not take_from_sweep(one, Path(out_dir) / f"seed{one['seed']}"):
                _run_one(one, data_dir, Path(out_dir) / f"seed{one['seed']}", runtime, shared=True)
        return Path(out_dir)
    return _run_one(spec, data_dir, Path(out_dir), runtime)


def _run_one(spec: dict, data_dir: str | Path, out_dir: str | Path, runtime: dict | None,
             shared: bool = False) -> Path:
    rec = RunRecorder(out_dir, spec, backend="measured", clock="measured")
    watch = LoadWatch()  # the load average and CPU time over the run (manifest: load)
    res, final, split = run(spec, data_dir, runtime, out_dir)
    if spec.get("save_model"):
        with atomic_output(Path(out_dir) / "model.pt") as tmp:
            torch.save(split.gpt.state_dict(), tmp)
    for row in res.rows:
        rec.log(method=method_label(spec), **row)
    path = rec.finish(final=final, method=method_label(spec), train_s=round(res.train_s, 4),
                      tokens_per_s=tokens_per_s(res, spec),
                      memory={k: round(v, 1) for k, v in res.memory.items()},
                      memory_per_process=[{k: round(v, 1) for k, v in p.items()} for p in res.per_process],
                      processes=res.processes, staleness=res.staleness,
                      # a job of several seeds: the process's peak so far, earlier seeds included
                      peak_rss_scope="job" if shared else "run", load=watch.summary())
    Checkpointer(Path(out_dir) / "checkpoint.pt").clear()  # and the one before it
    return path
