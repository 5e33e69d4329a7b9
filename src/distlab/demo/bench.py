"""DeMo benchmarks (measured; reported, never asserted).

* optimizer step alone: DeMo (reference and compact payloads, world size 1:
  encode + apply, no collective) against torch AdamW's default step and
  fused AdamW, on the default model and a larger GPT; medians of interleaved
  repeats (each repeat times every optimizer once, in turn);
* whole training step on 2 gloo processes: DeMo against AdamW with one
  flattened all-reduce, interleaved torchrun jobs, median step time of each
  (on a GPU machine the same on NCCL, one process per GPU: rule
  ``demo_bench_gpu``, outside ``all``);
  tokens per second per worker and peak RSS from the same jobs;
* payload bytes: compact against the reference encoding;
* ops a step dispatches: the top-level aten ops of one ``DeMo.step()`` (torch profiler on
  the CPU; a count, not a time), which bound a GPU step's kernel launches.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from ..models import lm_loss
from ..results.runs import write_csv
from ..results.tables import atomic_write_text, markdown_table
from ..techniques.demo.optim import DeMo
from ..techniques.options import value
from .train import build_lm


def _optimizer_rows(model_cfg: dict, label: str, repeats: int, lr: float, topk: int, chunk: int) -> list[dict]:
    model = build_lm(model_cfg, 256, torch.float32, 0)
    params = [p for p in model.parameters() if p.requires_grad]
    block = int(model_cfg.get("block_size", 64))
    x = torch.randint(0, 256, (4, block), generator=torch.Generator().manual_seed(0))
    lm_loss(model(x[:, :-1]), x[:, 1:]).backward()
    opts = {
        "adamw (torch default)": torch.optim.AdamW(params, lr=lr),
        "adamw (fused)": torch.optim.AdamW(params, lr=lr, fused=True),
        "demo (reference payload)": DeMo(params, lr=lr, compression_topk=topk, compression_chunk=chunk),
        "demo (compact payload)": DeMo(params, lr=lr, compression_topk=topk, compression_chunk=chunk,
                                       encoding="compact"),
    }
    times: dict[str, list[float]] = {k: [] for k in opts}
    with torch.no_grad():
        snapshot = [p.detach().clone() for p in params]
    for r in range(repeats + 2):
        for name, opt in opts.items():
            t0 = time.perf_counter()
            opt.step()
            dt = time.perf_counter() - t0
            if r >= 2:  # two warm-up rounds
                times[name].append(dt)
            with torch.no_grad():
                for p, s in zip(params, snapshot):
                    p.copy_(s)
    base = statistics.median(times["adamw (torch default)"])
    n = sum(p.numel() for p in params)
    demo = opts["demo (reference payload)"]
    compact = opts["demo (compact payload)"]
    rows = [{"benchmark": "optimizer step", "model": label, "params": n, "what": k,
             "median_ms": 1e3 * statistics.median(v), "ratio_vs_adamw_default": statistics.median(v) / base,
             "repeats": len(v)} for k, v in times.items()]
    rows.append({"benchmark": "payload bytes", "model": label, "params": n, "what": "compact / reference encoding",
                 "ratio_vs_adamw_default": float("nan"), "median_ms": float("nan"), "repeats": 0,
                 "bytes_ratio": compact.payload_nbytes() / demo.reference_payload_nbytes()})
    return rows


def _is_top_level(event) -> bool:
    """An aten op the step itself called (no aten op above it in the profiler's tree)."""
    p = event.cpu_parent
    while p is not None:
        if p.name.startswith("aten::"):
            return False
        p = p.cpu_parent
    return True


def count_step_ops(params: list, **demo_kw) -> dict[str, int]:
    """The top-level aten ops of one ``DeMo.step()`` at world size 1 on ``params`` (their
    ``.grad`` set; two steps run first, so the layout and scratch exist), by name, from
    ``torch.profiler`` on the CPU.  The count is the step's dispatches: on a GPU each is a kernel
    launch or less (views launch none), so it bounds the host's share of a step."""
    from collections import Counter

    from torch.profiler import ProfilerActivity, profile

    opt = DeMo(params, **demo_kw)
    opt.step()
    opt.step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        opt.step()
    return dict(Counter(e.name for e in prof.events() if e.name.startswith("aten::") and _is_top_level(e)))


def _op_count_rows(model_cfg: dict, label: str, lr: float, topk: int, chunk: int) -> list[dict]:
    model = build_lm(model_cfg, 256, torch.float32, 0)
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()), dtype=p.dtype)
    ops = count_step_ops(params, lr=lr, compression_topk=topk, compression_chunk=chunk)
    return [{"benchmark": "top-level aten ops of one step", "model": label,
             "params": sum(p.numel() for p in params), "what": "demo (reference payload)",
             "tensors": len(params), "ops": sum(ops.values()), "median_ms": float("nan"),
             "ratio_vs_adamw_default": float("nan"), "repeats": 1}]


def compiled_step(opt: DeMo, backend: str = "inductor"):
    """``opt.step`` compiled whole (``fullgraph=True``: a graph break is an error, not a silent
    fallback) for the shapes of this optimizer's parameters (``dynamic=False``: a second model's
    compile through the same code would otherwise mark sizes dynamic, which this torch's symbolic
    shapes refused on the tile layout).  The layout is built eagerly first (it is compiler-disabled:
    lists of views made once), and so is what a step makes on first use (``DeMo.prepare``: a
    compiled call that made it would compile again on the next), so the compiled function is the
    step's arithmetic only and compiles once."""
    opt.prepare()
    return torch.compile(opt.step, backend=backend, fullgraph=True, dynamic=False)


def _compile_rows(model_cfg: dict, label: str, repeats: int, lr: float, topk: int, chunk: int) -> list[dict]:
    """The cost of ``torch.compile`` on one step (inductor, CPU here): the first compiled call
    (tracing and code generation) and the steady step, against the eager step, medians of
    interleaved repeats; both paths take the same gradients and end bit-equal or the row says not."""
    def setup():
        model = build_lm(model_cfg, 256, torch.float32, 0)
        params = [p for p in model.parameters() if p.requires_grad]
        for p in params:
            p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()), dtype=p.dtype)
        return params, DeMo(params, lr=lr, compression_topk=topk, compression_chunk=chunk)

    pe, eager = setup()
    pc, opt = setup()
    eager.step()
    step = compiled_step(opt)
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    te, tc = [], []
    for _ in range(repeats):
        t0 = time.perf_counter(); eager.step(); te.append(time.perf_counter() - t0)
        t0 = time.perf_counter(); step(); tc.append(time.perf_counter() - t0)
    equal = all(torch.equal(a, b) for a, b in zip(pe, pc))
    n = sum(p.numel() for p in pe)
    base = {"model": label, "params": n, "tensors": len(pe), "ops": float("nan"), "repeats": repeats}
    return [{**base, "benchmark": "torch.compile (inductor) of one step", "what": "first compiled call (compile)",
             "median_ms": first * 1e3, "ratio_vs_adamw_default": float("nan"), "ratio_vs_eager": float("nan")},
            {**base, "benchmark": "torch.compile (inductor) of one step",
             "what": f"compiled step / eager step ({'bit-equal' if equal else 'NOT bit-equal'} after "
                     f"{repeats + 1} steps)",
             "median_ms": statistics.median(tc) * 1e3,
             "ratio_vs_adamw_default": float("nan"),
             "ratio_vs_eager": statistics.median(tc) / statistics.median(te)}]


def _whole_step_rows(spec: dict, data: Path, threads: int, label: str, rounds: int = 2,
                     backend: str = "gloo", nprocs: int = 2) -> list[dict]:
    from ..runtime.launch import run_torchrun

    results: dict[str, list[dict]] = {"adamw": [], "demo": []}
    with tempfile.TemporaryDirectory(prefix="distlab-demo-bench-") as tmp:
        for r in range(rounds):
            for method in ("adamw", "demo"):  # interleaved
                s = {**spec, "method": method, "backend": backend, "n_workers": nprocs,
                     "lr": float(spec["lr"])}
                out = Path(tmp) / f"{method}{r}"
                with open(Path(tmp) / f"{method}{r}.log", "w") as log:
                    run_torchrun(["train", "--experiment", "demo", "--spec", json.dumps(s), "--data",
                                  str(data), "--out", str(out)], nprocs=nprocs, threads=threads, timeout_s=1800,
                                 stream=log)
                m = pd.read_csv(out / "metrics.csv")
                man = json.loads((out / "manifest.json").read_text())
                results[method].append({"step": float(m["step_time"].iloc[1:].median()),
                                        "rss": float(man["peak_rss_mb"])})
    tokens = int(spec["batch_size"]) * int(spec["model"].get("block_size", 128))
    base = statistics.median(x["step"] for x in results["adamw"])
    rows = []
    for method, runs in results.items():
        step = statistics.median(x["step"] for x in runs)
        rows.append({"benchmark": f"whole step, {nprocs} {backend} process{'es' if nprocs > 1 else ''}",
                     "model": label, "what": method,
                     "median_ms": 1e3 * step, "ratio_vs_adamw_default": step / base, "repeats": len(runs),
                     "tokens_per_s_per_worker": tokens / step,
                     "peak_rss_mb": max(x["rss"] for x in runs)})
    return rows


def gpu_processes() -> int:
    """Processes for the NCCL benchmark: one per GPU, at most 2 (NCCL runs one rank a GPU; on one
    GPU the run is world size 1, so no collective runs and the step is the optimizer's own work)."""
    return max(1, min(2, torch.cuda.device_count()))


NO_GPU = "not run: no GPU"


def _no_gpu_rows(models: list[tuple[str, dict]], parts: list[str]) -> list[dict]:
    """The NCCL benchmark on a machine without CUDA: one row per model and part, each reading
    "not run: no GPU" (no timing stands in for a GPU's)."""
    return [{"benchmark": f"{part}, nccl (GPU)", "model": label, "what": NO_GPU, "median_ms": float("nan"),
             "ratio_vs_adamw_default": float("nan"), "repeats": 0} for label, _ in models for part in parts]


def main_bench(spec: dict, data: Path, out: Path, threads: int) -> pd.DataFrame:
    """``spec``: {"model", "large_model" (optional), "repeats", "steps", "lr", "demo": {...}, "run": run spec,
    "parts" (default all three: "optimizer", "whole step", "ops" (:func:`count_step_ops`); "compile"
    (:func:`_compile_rows`, on request: inductor's cost) joins where named), "backend" ("gloo", the default, or "nccl": one
    process per GPU, see :func:`gpu_processes`), "nprocs" (gloo: default 2), "rounds" (default 2)}."""
    topk, chunk = int(value(spec, "demo", "topk")), int(value(spec, "demo", "chunk"))
    parts = spec.get("parts", ["optimizer", "whole step", "ops"])
    backend = spec.get("backend", "gloo")
    models = [("default", spec["model"])] + ([("large", spec["large_model"])] if "large_model" in spec else [])
    if backend == "nccl" and not torch.cuda.is_available():
        return _write(_no_gpu_rows(models, parts), Path(out))
    nprocs = gpu_processes() if backend == "nccl" else int(spec.get("nprocs", 2))
    torch.set_num_threads(1)
    rows = []
    if "optimizer" in parts:
        for label, cfg in models:
            rows += _optimizer_rows(cfg, label, int(spec["repeats"]), float(spec["lr"]), topk, chunk)
    if "ops" in parts:
        for label, cfg in models:
            rows += _op_count_rows(cfg, label, float(spec["lr"]), topk, chunk)
    if "compile" in parts:
        for label, cfg in models:
            rows += _compile_rows(cfg, label, int(spec["repeats"]), float(spec["lr"]), topk, chunk)
    if "whole step" in parts:
        for label, cfg in models:
            run = {**spec["run"], "model": cfg, "steps": int(spec["steps"]), "eval_every": int(spec["steps"])}
            rows += _whole_step_rows(run, Path(data), threads, label, int(spec.get("rounds", 2)), backend, nprocs)
    return _write(rows, Path(out))


def _write(rows: list[dict], out: Path) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    write_csv(df, out)
    atomic_write_text(out.with_suffix(".md"),
                      "# DeMo benchmarks (measured, this machine; medians of interleaved repeats)\n\n"
                      + markdown_table(df))
    return df
