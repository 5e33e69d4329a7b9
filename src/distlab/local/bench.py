"""Throughput, memory and PC cost, measured on this machine.

Throughput (``throughput``): for each repeat, every method runs once in a
fresh interpreter (so each process's peak RSS is its own), in an order that
rotates with the repeat (methods interleaved, so drift in the machine's load
hits all of them).  A measurement runs ``warmup`` untimed ticks, then
``measure`` timed ticks; it reports training tokens per second over the timed
ticks and the peak RSS of all of its processes summed (RC's K workers plus
the coordinator).  Tables keep every repeat, under the ``seed`` column (the
repeat index), so ratios pair measurements taken back to back.

PC cost (``pc_cost``): in one process, for each T of the grid and each
variant, interleaved with BP on the same model and batch: seconds per
training step (median of ``measure`` steps after ``warmup``), its ratio to
BP's, and the cosine between PC's and BP's weight gradients on that batch;
the training runs' T is repeated (the claim on PC's cost pairs the repeats).
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from ..results.tables import write_checked_table
from .model import TextData, build_gpt, lm_loss, make_optimizer, split_gpt
from . import pc as pcmod
from .processes import train_rc_parallel
from .rc import train_bp, train_rc_sequential

log = logging.getLogger(__name__)


def measure_one(spec: dict, data_dir: str, warmup: int, measure: int, timeout: float) -> dict:
    """One throughput measurement of ``spec`` in this process (no evaluation)."""
    torch.set_num_threads(int(spec.get("threads", 1)))
    spec = dict(spec, steps=warmup + measure, eval_every=10**9)
    m = spec["model"]
    data = TextData(data_dir, int(m["block_size"]), int(spec["batch_size"]), int(spec["seed"]),
                    splits=("train",))
    split = split_gpt(build_gpt(m, int(spec["seed"])), int(spec.get("sections", 1)))
    if spec["method"] == "bp":
        res = train_bp(spec, data, split)
    elif spec.get("mode") == "sequential":
        res = train_rc_sequential(spec, data, split)
    elif spec.get("mode") == "async":
        from .rc_async import train_rc_async

        res = train_rc_async(spec, data_dir, data, split, timeout=timeout)
    else:
        res = train_rc_parallel(spec, data_dir, data, split, timeout=timeout)
    # tokens and time between the end of the warm-up and the end (asynchronous rows count
    # the tokens section 0 has read, so the same formula holds)
    t0 = res.rows[warmup - 1]["time"] if warmup > 0 else 0.0
    seconds = res.rows[-1]["time"] - t0
    tokens = res.rows[-1]["tokens"] - (res.rows[warmup - 1]["tokens"] if warmup > 0 else 0)
    return {"tokens_per_s": tokens / seconds, "seconds": seconds, "processes": res.processes,
            **res.memory}


def cpu_threads(spec: dict) -> int:
    """Threads a measurement uses: the process's, or every section worker's."""
    if spec.get("mode") in ("parallel", "async"):
        return int(spec.get("worker_threads", 1)) * int(spec["sections"])
    return int(spec.get("threads", 1))


def interleaved(names: list[str], r: int) -> list[str]:
    """The measurement order of repeat ``r``: the points (``method@point``; no point: one) in
    their given order, and at each point its methods back to back, rotated by ``r``, so a
    ratio at a point pairs measurements taken next to each other whatever the load does
    between points (a name order sorted by method would measure every BP point first)."""
    points: dict[str, list[str]] = {}
    for n in names:
        points.setdefault(n.partition("@")[2], []).append(n)
    out = []
    for group in points.values():
        k = r % len(group)
        out += group[k:] + group[:k]
    return out


def throughput(specs: dict[str, dict], data_dir: str, repeats: int, warmup: int, measure: int,
               timeout: float, out: Path) -> pd.DataFrame:
    """One row per (name, repeat); a name ``method@point`` (the map) gives its point's
    width, sections and sequence length columns too."""
    rows = []
    for r in range(repeats):
        order = interleaved(list(specs), r)
        for name in order:
            arg = json.dumps({"spec": specs[name], "data_dir": str(data_dir), "warmup": warmup,
                              "measure": measure, "timeout": timeout})
            env = dict(os.environ, OMP_NUM_THREADS=str(specs[name].get("threads", 1)))
            load = os.getloadavg()[0]  # the machine's load when the measurement starts (shared?)
            proc = subprocess.run([sys.executable, "-m", "distlab.local.bench", arg], env=env,
                                  capture_output=True, text=True, timeout=timeout * 10)
            if proc.returncode != 0:
                raise RuntimeError(f"throughput measurement {name!r} failed:\n{proc.stderr[-2000:]}")
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            log.info("repeat %d %s: %.0f tokens/s, PSS %.0f MB, largest peak RSS %.0f MB", r, name,
                     got["tokens_per_s"], got["pss_mb"], got["max_rss_mb"])
            method, _, point = name.partition("@")
            sp = specs[name]
            rows.append({"method": method, "point": point or "base", "seed": r,
                         "tokens_per_s": got["tokens_per_s"], "seconds": got["seconds"],
                         "pss_mb": got["pss_mb"], "uss_mb": got["uss_mb"],
                         "max_rss_mb": got["max_rss_mb"], "rss_sum_mb": got["rss_sum_mb"],
                         "processes": got["processes"], "order": order.index(name),
                         "load_1min": round(load, 2),
                         "n_layer": sp["model"]["n_layer"], "d_model": sp["model"]["d_model"],
                         "block_size": sp["model"]["block_size"],
                         "sections": int(sp.get("sections", 1)) if sp["method"] == "rc" else 0,
                         "cpu_threads": cpu_threads(sp)})
    df = pd.DataFrame(rows)
    write_checked_table(df, out)  # measured, no run folder: its record catches a cut or edited table
    return df


def _median_time(fn, warmup: int, measure: int) -> tuple[float, torch.Tensor]:
    """(median seconds of ``measure`` calls of ``fn`` after ``warmup`` untimed ones, its last result)."""
    times = []
    for i in range(warmup + measure):
        t0 = time.perf_counter()
        g = fn()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times), g


def _pc_settings(Ts: list[int], variants: dict, training_T: int | None, repeats: int) -> list[tuple]:
    """(repeat, T, variant) of each PC measurement: the grid, then the training T's repeats."""
    if training_T is not None and "fixed" not in variants:
        raise ValueError("pc_cost: training_T needs the fixed variant")
    settings = [(0, T, v) for T in Ts for v in variants]
    if training_T is not None:  # repeat 0 is the grid's own measurement when T is on the grid
        settings += [(r, int(training_T), "fixed") for r in range(int(training_T in Ts), repeats)]
    return settings


def pc_cost(spec: dict, data_dir: str, Ts: list[int], variants: dict[str, dict], warmup: int,
            measure: int, out: Path, repeats: int = 1, training_T: int | None = None) -> pd.DataFrame:
    """Seconds per training step of PC for each (variant, T) against BP's, and gradient fidelity.

    A step is the gradient (BP's forward and backward, or PC's T inference iterations with
    every layer's products, ``skip_zero`` off: the method's cost, whatever an implementation
    could skip) and an AdamW step; the AdamW has lr 0, so it does all of its arithmetic and
    leaves the weights as they are (every measurement sees the same model).  BP is re-measured
    beside every PC setting (interleaved).  The fixed variant at ``training_T`` (the training
    runs' T) is measured ``repeats`` times, interleaved with the grid: its rows have
    ``role: training`` and ``seed`` = the repeat, the input of ``local.pc.cost``.  One row per
    measurement (``method`` bp or the PC label; ``variant`` the PC variant of the pair), in
    long form."""
    from .train import method_label

    torch.set_num_threads(int(spec.get("threads", 1)))
    m = spec["model"]
    data = TextData(data_dir, int(m["block_size"]), int(spec["batch_size"]), int(spec["seed"]),
                    splits=("train",))
    split = split_gpt(build_gpt(m, int(spec["seed"])), 1)
    layers, readout = pcmod.gpt_chain(split)
    params = pcmod._params(list(layers) + [readout])
    opt = make_optimizer(params, {**spec, "lr": 0.0})  # the step's arithmetic, weights unchanged
    x, y = data.train_batch(0)
    n_tok = y.numel()

    def loss_sum(h):
        return lm_loss(readout(h), y, reduction="sum")

    def bp_step() -> torch.Tensor:
        loss = lm_loss(split.forward(x), y)
        for p, g in zip(params, torch.autograd.grad(loss, params)):
            p.grad = g
        opt.step()
        return torch.cat([p.grad.reshape(-1) for p in params])

    def pc_step(variant: str, T: int) -> torch.Tensor:
        cfg = variants[variant]
        pcmod.pc_gradients(layers, loss_sum, readout, x, variant, T, float(cfg["eta"]),
                           float(cfg["beta"]), skip_zero=False)
        for p in params:
            p.grad.div_(n_tok)
        opt.step()
        return torch.cat([p.grad.reshape(-1) for p in params])

    def timed(fn) -> tuple[float, torch.Tensor]:
        return _median_time(fn, warmup, measure)

    settings = _pc_settings(Ts, variants, training_T, repeats)
    with torch.no_grad():
        before = [p.detach().clone() for p in params]
    rows = []
    for r, T, variant in settings:
        bp_s, g_bp = timed(bp_step)
        pc_s, g_pc = timed(lambda: pc_step(variant, T))
        cos = float(torch.nn.functional.cosine_similarity(g_pc, g_bp, dim=0))
        rel = float((g_pc - g_bp).norm() / g_bp.norm())
        label = method_label({"method": "pc", "variant": variant, "pc": {"T": T}, "model": m})
        role = "training" if variant == "fixed" and T == training_T else "grid"
        log.info("PC %s T=%d (%s, repeat %d): %.4f s/step, BP %.4f s/step, cos %.4f",
                 variant, T, role, r, pc_s, bp_s, cos)
        common = {"variant": variant, "T": T, "seed": r, "role": role, "n_layer": m["n_layer"],
                  "eta": float(variants[variant]["eta"])}
        rows.append({**common, "method": "bp", "s_per_step": bp_s, "tokens_per_s": n_tok / bp_s})
        rows.append({**common, "method": label, "s_per_step": pc_s, "tokens_per_s": n_tok / pc_s,
                     "cost_ratio": pc_s / bp_s, "grad_cosine": cos, "grad_rel_error": rel})
    if any(not torch.equal(p, b) for p, b in zip(params, before)):  # lr 0 must leave them
        raise RuntimeError("pc_cost: the weights changed during the benchmark")
    df = pd.DataFrame(rows)
    write_checked_table(df, out)  # measured, no run folder: its record catches a cut or edited table
    return df


def _child(arg: str) -> None:
    a = json.loads(arg)
    got = measure_one(a["spec"], a["data_dir"], int(a["warmup"]), int(a["measure"]), float(a["timeout"]))
    print(json.dumps(got))


if __name__ == "__main__":
    _child(sys.argv[1])
