"""One benchmark per heavy rule: the step time of its unit of work at the configuration's
shapes, one thread, and the FLOP rate that gives as a ratio to an fp32 matmul peak measured in
the same process (so a loaded machine lowers both, and the ratio is what the next change is
judged by).  Measured, never asserted:

* ``local_train_sweep``: P3's BP step on the deep GPT (``local_learning.rc.model`` at
  ``batch_size``): forward, backward, AdamW;
* ``placement_run``: a learner's update on ResNet-50's coarse graph (``cpu_igpu``): the RNN
  placer's (``placement.rnn.samples`` placements) and HSDAG's corrected variant's episode;
* ``atlas_job``: one data-parallel AdamW step of the atlas's models (``atlas.sizes``) at its
  largest ``n_workers``: every worker's forward and backward, the mean gradient, AdamW;
* ``demo_train_sim``: the same step for the DeMo comparison's model and ``n_workers``.

FLOPs are counted (``torch.utils.flop_counter``: matrix products, attention) on one step; the
element-wise work is not counted, so the ratio is the matmul share's efficiency, a lower
bound on the machine's use.

    python scripts/rulebench.py --out paper/rulebench/rulebench.csv [--repeats 7]
        [--config config/config.yaml] [--profile data/placement/profiles/resnet50.json | --profile '']

writes the CSV and a Markdown table beside it (``.md``) with the machine and its load.
"""

from __future__ import annotations

import csv
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch.utils.flop_counter import FlopCounterMode


def machine() -> str:
    """The CPU's model name and the kernel set torch runs on it (AVX-512, AVX2, ...): two
    machines of one architecture name can differ by 1.5x at these shapes."""
    import os
    import platform

    name = platform.processor() or platform.machine()
    try:
        name = next(ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{name} ({torch.backends.cpu.get_cpu_capability()} kernels), {os.cpu_count()} CPUs"


def matmul_peak(n: int = 512, seconds: float = 0.05) -> float:
    """fp32 GFLOP/s of n x n matmuls on this thread, over about ``seconds`` of them."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    t = time.perf_counter()
    a @ b
    k = max(1, round(seconds / max(time.perf_counter() - t, 1e-6)))
    t = time.perf_counter()
    for _ in range(k):
        a @ b
    return 2 * n**3 * k / (time.perf_counter() - t) / 1e9


def _timed_s(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _flops(fn: Callable[[], Any]) -> int:
    with FlopCounterMode(display=False) as fc:
        fn()
    return int(fc.get_total_flops())


def _lm_step(models: list, opt, batch: tuple) -> Callable[[], None]:
    """Every model's forward and backward on the batch, their mean gradient into the first
    model, one optimizer step (one model: plain backprop)."""
    from distlab.models import lm_loss

    x, y = batch
    params = [list(m.parameters()) for m in models]

    def step():
        for ps, m in zip(params, models):
            for p in ps:
                p.grad = None
            lm_loss(m(x), y).backward()
        if len(models) > 1:
            for i, p in enumerate(params[0]):
                p.grad = torch.stack([ps[i].grad for ps in params]).mean(0)
        opt.step()
    return step


def _gpt_case(cfg: dict, batch_size: int, n_workers: int, builder: str = "models"):
    """A GPT step: P3's own GPT (``builder="local"``) or the atlas's and DeMo's (``models``)."""
    from distlab.local.model import build_gpt, make_optimizer
    from distlab.techniques.method import adamw

    if builder == "local":
        models = [build_gpt(cfg, 0) for _ in range(n_workers)]
        opt = make_optimizer(models[0].parameters(), {"lr": 1e-3})
    else:
        from distlab.atlas.train import build_lm

        models = [build_lm(cfg, 0) for _ in range(n_workers)]
        opt = adamw(list(models[0].parameters()), {"lr": 1e-3})
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (batch_size, int(cfg["block_size"]) + 1), generator=g)
    return _lm_step(models, opt, (x[:, :-1], x[:, 1:]))


def cases(config: dict, graph: dict | None, profile: str = "") -> dict[str, Callable[[], None]]:
    """The benchmarks' steps (name -> one step), built from the configuration; the placement's
    with ResNet-50's operator ``graph`` and its stored ``profile``."""
    out = {}
    ll = config["local_learning"]
    out["local_train_sweep (BP, %d layers)" % ll["rc"]["model"]["n_layer"]] = _gpt_case(
        ll["rc"]["model"], int(ll["batch_size"]), 1, "local")
    at = config["atlas"]
    for size, m in at["sizes"].items():
        n = max(at["n_workers"])
        out[f"atlas_job ({size}, N = {n})"] = _gpt_case(m, int(at["batch_size"]), n)
    d = config["demo"]
    out[f"demo_train_sim (N = {max(d['n_workers'])})"] = _gpt_case(d["model"], int(d["batch_size"]),
                                                                  max(d["n_workers"]))
    if graph is not None:
        out.update(_placement_cases(config["placement"], graph, profile))
    return out


def _placement_cases(pc: dict, graph: dict, profile: str) -> dict[str, Callable[[], None]]:
    from distlab.placement import costs, hsdag, learned
    from distlab.placement.features import coarse_features
    from distlab.placement.problem import Problem

    prof = costs.load_profile(profile, graph, pc["models"]["resnet50"])
    problem = Problem.build(graph, pc["pairs"]["cpu_igpu"], prof, 10**9, "allow")
    opts = pc["rnn"]
    torch.manual_seed(0)
    x = torch.from_numpy(coarse_features(problem.graph, problem.group, problem.cedges))
    net = learned.RNNPlacer(x.shape[1], problem.n_devices, int(opts.get("hidden", 64)))
    optim, decay, seen = learned._learning(net, opts)

    def rnn():
        learned.rnn_update(net, optim, x, problem, int(opts["samples"]), None, decay, seen)

    def hs():  # a run of one episode: the learner built, its episode, its final policy scored
        problem.budget = len(problem.history) + int(pc["hsdag_corrected"]["samples"]) + 1
        hsdag.train(problem, pc["hsdag_corrected"], 0)
    return {"placement_run (RNN placer update, resnet50)": rnn,
            "placement_run (HSDAG corrected, a one-episode run, resnet50)": hs}


def rulebench(config: dict, out: str | Path, repeats: int = 7,
              profile: str | None = "data/placement/profiles/resnet50.json") -> list[dict]:
    """Each case's median step time, and the median over repeats of its FLOP rate over the
    matmul peak measured right after it for as long; CSV at ``out``, the rows returned."""
    torch.set_num_threads(1)
    graph = None
    if profile:  # without a profile, no placement benchmark
        from distlab.placement.graphs import extract

        graph = extract(config["placement"]["models"]["resnet50"])
    rows = []
    for name, step in cases(config, graph, profile or "").items():
        step()  # warm-up
        flops = _flops(step)
        steps, peaks = [], []
        for _ in range(repeats):  # interleaved: each step beside a peak measured over as long
            steps.append(_timed_s(step))
            peaks.append(matmul_peak(seconds=steps[-1]))
        ratios = [flops / s / 1e9 / p for s, p in zip(steps, peaks)]
        rows.append({"benchmark": name, "step_ms": round(statistics.median(steps) * 1e3, 2),
                     "gflop_per_step": round(flops / 1e9, 4),
                     "gflops": round(flops / statistics.median(steps) / 1e9, 2),
                     "peak_gflops": round(statistics.median(peaks), 1),
                     "ratio_to_peak": round(statistics.median(ratios), 3)})
    write_csv(Path(out), rows)
    return rows


def write_csv(path: Path, rows: list[dict]) -> None:
    """``rows`` (dicts of one set of keys) as a CSV at ``path``, its folder made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def common_arguments(ap, repeats: int) -> None:
    """The options this benchmark and ``scripts/bench_floor.py`` share: where to write, the
    config, the repeats, ResNet-50's profile for the placement steps."""
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--config", type=Path, default=Path("config/config.yaml"))
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--profile", default="data/placement/profiles/resnet50.json",
                    help="ResNet-50's stored profile ('' leaves the placement benchmarks out)")


def markdown(rows: list[dict]) -> str:
    head = "| benchmark | step (ms) | GFLOP a step | GFLOP/s | matmul peak (GFLOP/s) | ratio to peak (median) |"
    lines = [head, "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['benchmark']} | {r['step_ms']} | {r['gflop_per_step']} | {r['gflops']} | "
                     f"{r['peak_gflops']} | {r['ratio_to_peak']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import os

    from distlab.config.yamlio import load_yaml_strict

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common_arguments(ap, repeats=7)
    a = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    rows = rulebench(load_yaml_strict(a.config), a.out, repeats=a.repeats, profile=a.profile or None)
    head = (f"`python scripts/rulebench.py` ({a.repeats} repeats, one thread), torch {torch.__version__}, "
            f"{machine()}; 1-minute load average {load0:.1f} at the "
            f"start, {os.getloadavg()[0]:.1f} at the end.")
    text = head + "\n\n" + markdown(rows) + "\n"
    a.out.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
