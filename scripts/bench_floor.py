"""Where a heavy rule's step spends its time, and how far batching the simulated workers can go.

Two measurements, one torch thread, in one process (measured, never asserted):

* **Op classes.**  Each step of ``scripts/rulebench.py`` (P3's BP step, the atlas's and DeMo's
  data-parallel steps, the placers' updates) under ``torch.profiler``: the self CPU time of its
  ops grouped into matrix products, attention, the vocabulary softmax and cross-entropy, GELU,
  layer norm, the optimizer, and the rest (copies, views, reductions, the autograd engine's
  bookkeeping, Python).  The first five are arithmetic that no rearrangement removes: batching
  N workers' passes leaves their element count, and so their time, as it is.
* **Stack width.**  The atlas's stacked forward and backward (:func:`distlab.techniques.batched.
  worker_grads`, the N workers of a step as one computation) at widths 1..64 for each atlas
  size: milliseconds per worker pass.  Width 1 is the per-worker loop's pass; the widest is the
  least a pass costs however many workers or runs are stacked, so ``floor / width 1`` bounds the
  time ratio batching can reach on the passes.
* **Compiled** (``--compiled``): the same stacked pass at each atlas size and its largest N, its
  loss under ``torch.compile`` (inductor: the element-wise ops fused into generated loops, the
  per-op dispatch gone) against eager, and the compilation's seconds.

    PYTHONPATH=src python scripts/bench_floor.py --out paper/rulebench/floor.csv [--repeats 5]

writes the CSVs (``floor.csv``: op classes; ``floor_width.csv``: stack width;
``floor_compiled.csv`` with ``--compiled``) and a Markdown
summary beside them (``floor.md``) with the machine, its kernel set and its load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

import rulebench  # noqa: E402

CLASSES = (  # (class, substrings of the aten op names it holds); the first match wins
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul")),
    ("attention", ("scaled_dot_product", "flash_attention")),
    ("softmax + cross-entropy", ("log_softmax", "nll_loss", "aten::_softmax", "cross_entropy")),
    ("gelu", ("gelu",)),
    ("layer norm", ("layer_norm",)),
    ("optimizer", ("adam", "_foreach", "Optimizer.")),
)
WIDTHS = (1, 2, 4, 8, 16, 32, 64)


def op_class(name: str) -> str:
    for cls, keys in CLASSES:
        if any(k in name for k in keys):
            return cls
    return "other"


def op_shares(step, steps: int = 5) -> tuple[float, dict[str, float]]:
    """The step's wall milliseconds under the profiler (mean over ``steps``) and each op class's
    share of the ops' self CPU time."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - t) / steps
    by: dict[str, float] = {}
    for ev in prof.key_averages():
        if ev.key.startswith(("Optimizer.", "autograd::engine", "ProfilerStep")) and not ev.key.startswith(
                "Optimizer.step"):
            continue
        by[op_class(ev.key)] = by.get(op_class(ev.key), 0.0) + ev.self_cpu_time_total
    total = sum(by.values()) or 1.0
    return wall * 1e3, {c: by.get(c, 0.0) / total for c, _ in CLASSES + (("other", ()),)}


def width_ms(cfg: dict, batch_size: int, width: int, repeats: int) -> float:
    """Median milliseconds per worker pass of ``worker_grads`` at ``width`` stacked workers."""
    from distlab.atlas.train import build_lm
    from distlab.techniques import batched

    model = build_lm(cfg, 0)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (width, batch_size, int(cfg["block_size"]) + 1), generator=g)
    xs, ys = x[..., :-1].contiguous(), x[..., 1:].contiguous()
    models = [model] * width
    batched.worker_grads(models, xs, ys)  # warm-up
    calls = max(3, 64 // width)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            batched.worker_grads(models, xs, ys)
        times.append((time.perf_counter() - t) / calls / width * 1e3)
    return statistics.median(times)


def compiled_ratio(cfg: dict, batch_size: int, width: int, repeats: int) -> tuple[float, float, float]:
    """(eager ms, compiled ms, compile s) of a stacked pass at ``width``: the loss of the stacked
    forward (:func:`distlab.models.gpt_stacked_logits` and the cross-entropy) eager or compiled,
    the gradients by autograd as :func:`distlab.techniques.batched.worker_grads` takes them; the
    two arms interleaved, medians."""
    import torch.nn.functional as F

    from distlab.atlas.train import build_lm
    from distlab.models import gpt_stacked_logits

    model = build_lm(cfg, 0)
    names = [n for n, _ in model.named_parameters()]
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (width, batch_size, int(cfg["block_size"]) + 1), generator=g)
    xs, ys = x[..., :-1].contiguous(), x[..., 1:].contiguous()

    def loss(leaves, xs, ys):
        logits = gpt_stacked_logits(model, dict(zip(names, leaves)), xs)
        tok = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ys.reshape(-1), reduction="none")
        return tok.view(width, -1).mean(1)

    def passes(fn):
        leaves = [p.detach().unsqueeze(0).expand(width, *p.shape).clone().requires_grad_()
                  for p in model.parameters()]
        torch.autograd.grad(fn(leaves, xs, ys).sum(), leaves)

    fast = torch.compile(loss)
    t = time.perf_counter()
    passes(fast)
    compile_s = time.perf_counter() - t
    arms: dict = {loss: [], fast: []}
    for r in range(repeats):
        for fn in ((loss, fast) if r % 2 == 0 else (fast, loss)):
            passes(fn)
            t = time.perf_counter()
            for _ in range(20):
                passes(fn)
            arms[fn].append((time.perf_counter() - t) / 20 * 1e3)
    return statistics.median(arms[loss]), statistics.median(arms[fast]), compile_s


def markdown(shares: list[dict], widths: list[dict], head: str, compiled: list[dict] | None = None) -> str:
    cls = [c for c, _ in CLASSES] + ["other"]
    lines = [head, "", "**Op classes** (share of the ops' self CPU time; one step = the rulebench's):", "",
             "| step | ms | " + " | ".join(cls) + " |", "|---|---:|" + "---:|" * len(cls)]
    for r in shares:
        lines.append(f"| {r['benchmark']} | {r['step_ms']} | " + " | ".join(f"{100 * r[c]:.0f} %" for c in cls) + " |")
    lines += ["", "**Stack width** (atlas, ms per worker pass of the stacked forward and backward):", "",
              "| size | " + " | ".join(f"N = {w}" for w in WIDTHS) + " | floor / N = 1 |",
              "|---|" + "---:|" * (len(WIDTHS) + 1)]
    for size in dict.fromkeys(r["size"] for r in widths):
        rs = {r["width"]: r["ms_per_pass"] for r in widths if r["size"] == size}
        lines.append(f"| {size} | " + " | ".join(f"{rs[w]:.2f}" for w in WIDTHS) +
                     f" | {min(rs.values()) / rs[1]:.2f} |")
    if compiled:
        lines += ["", "**Compiled** (atlas, a stacked pass at the size's largest N, eager against "
                  "`torch.compile`):", "", "| size | N | eager (ms) | compiled (ms) | compiled / eager | "
                  "compile (s) |", "|---|---:|---:|---:|---:|---:|"]
        for r in compiled:
            lines.append(f"| {r['size']} | {r['width']} | {r['eager_ms']:.2f} | {r['compiled_ms']:.2f} | "
                         f"{r['compiled_ms'] / r['eager_ms']:.2f} | {r['compile_s']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from distlab.config.yamlio import load_yaml_strict
    from distlab.placement.graphs import extract

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    rulebench.common_arguments(ap, repeats=5)
    ap.add_argument("--compiled", action="store_true", help="also the stacked pass under torch.compile")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = load_yaml_strict(a.config)
    load0 = os.getloadavg()[0]
    graph = extract(cfg["placement"]["models"]["resnet50"]) if a.profile else None
    shares = []
    for name, step in rulebench.cases(cfg, graph, a.profile).items():
        ms, sh = op_shares(step)
        shares.append({"benchmark": name, "step_ms": round(ms, 2), **{k: round(v, 4) for k, v in sh.items()}})
    at = cfg["atlas"]
    sizes = {**at["sizes"], **at.get("trend", {}).get("sizes", {})}
    widths = [{"size": f"{s} (d{m['d_model']}, {m['n_layer']} layer{'s' if m['n_layer'] > 1 else ''})",
               "width": w, "ms_per_pass": round(width_ms(m, int(at["batch_size"]), w, a.repeats), 3)}
              for s, m in sizes.items() for w in WIDTHS]
    compiled = []
    if a.compiled:
        top = max(at["n_workers"])
        for s, m in sizes.items():
            e, c, cs = compiled_ratio(m, int(at["batch_size"]), top, a.repeats)
            compiled.append({"size": s, "width": top, "eager_ms": e, "compiled_ms": c, "compile_s": cs})
        rulebench.write_csv(a.out.with_name(a.out.stem + "_compiled.csv"), compiled)
    rulebench.write_csv(a.out, shares)
    rulebench.write_csv(a.out.with_name(a.out.stem + "_width.csv"), widths)
    head = (f"`python scripts/bench_floor.py` ({a.repeats} repeats, one thread), torch {torch.__version__}, "
            f"{rulebench.machine()}; 1-minute load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.")
    text = markdown(shares, widths, head, compiled)
    a.out.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
