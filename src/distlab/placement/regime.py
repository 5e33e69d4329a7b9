"""Where does a mixed placement pay?  The roofline GPU's convolution / linear speed swept.

For each model and each ratio ``r`` (GPU seconds over CPU seconds, summed over the weighted
operators: convolutions, linear layers, matmuls), the roofline device of the pair has those
operators' times scaled so that their sum is ``r`` times the CPU's (as if its efficiency on
them were lower or higher; every other operator keeps its roofline time).  On that pair:

* CPU-only, GPU-only (serial timing: the same as any order for one device but the transfers);
* the exact serial optimum (a min cut; the paper's HETERO scenario), over operators and over
  the paper-like co-location groups;
* HEFT's placement under concurrent timing (list scheduling in rank order: its own scenario).

``headroom_pct`` is how much faster the serial optimum is than the faster single device: where
it is 0 no placement beats a single device and a speedup claim cannot be tested on that pair.
Every latency is *simulated* (CPU: the stored per-operator profile; GPU: the scaled roofline).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

WEIGHTED_OPS = ("conv2d", "linear", "matmul")
RATIOS = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)


def scaled_costs(graph: dict, pair: dict, profiled: np.ndarray, ratio: float, cuda=None):
    """``(compute, transfer)`` of ``pair`` with device 1's weighted operators scaled to ``ratio``
    times the CPU's seconds on them (summed)."""
    from . import costs

    compute, transfer = costs.pair_costs(graph, pair, profiled, cuda=cuda)
    w = np.array([n["op"] in WEIGHTED_OPS for n in graph["nodes"]])
    cpu, gpu = compute[w, 0].sum(), compute[w, 1].sum()
    if cpu <= 0 or gpu <= 0:
        raise ValueError("regime: the graph has no timed convolution / linear / matmul operators")
    compute = compute.copy()
    compute[w, 1] *= ratio * cpu / gpu
    return compute, transfer


def model_rows(graph: dict, pair: dict, profiled: np.ndarray, ratios=RATIOS, heft: bool = True) -> list[dict[str, Any]]:
    from . import coarsen, optimum
    from .problem import Problem
    from .sim import Simulator
    from . import baselines

    pinned = np.array([n["op"] == "input" for n in graph["nodes"]])
    group = coarsen.coarsen(graph["n_nodes"], graph["edges"], coarsen.weighted_nodes(graph))
    n = graph["n_nodes"]
    rows = []
    for r in ratios:
        compute, transfer = scaled_costs(graph, pair, profiled, float(r))
        ser = Simulator(n, graph["edges"], compute, transfer, pinned, order="serial")
        cpu = float(ser.evaluate(np.zeros(n, np.int64))[0])
        gpu = float(ser.evaluate(np.ones(n, np.int64))[0])
        _, opt = optimum.serial_optimum(ser)
        _, opt_g = optimum.serial_optimum(ser, group)
        single = min(cpu, gpu)
        row = {"ratio": float(r), "cpu_only_ms": cpu * 1e3, "gpu_only_ms": gpu * 1e3,
               "serial_optimum_ms": opt * 1e3, "serial_optimum_groups_ms": opt_g * 1e3,
               "serial_headroom_pct": (single / opt - 1) * 100,
               "serial_optimum_speedup_over_cpu_pct": (cpu / opt - 1) * 100}
        if heft:
            conc = Simulator(n, graph["edges"], compute, transfer, pinned, order="rank")
            p = Problem(graph, conc, group, [], 2, "allow", 1)
            baselines.heft(p)
            h = float(p.best)
            single_c = min(float(conc.evaluate(np.zeros(n, np.int64))[0]), float(conc.evaluate(np.ones(n, np.int64))[0]))
            row.update({"heft_concurrent_ms": h * 1e3, "heft_concurrent_gain_pct": (single_c / h - 1) * 100})
        rows.append(row)
    return rows


def table(spec: dict[str, Any], graphs: dict[str, str], profiles: dict[str, str]):
    """The regime table: one row per (model, ratio); ``spec``: ``pair`` (a pair whose device 1
    is a roofline), ``pair_name``, optional ``ratios`` and ``heft`` (default true)."""
    import pandas as pd

    from . import costs
    from .graphfile import load_graph

    if not isinstance(spec.get("pair"), dict) or len(spec["pair"].get("devices") or []) != 2:
        raise ValueError("regime: spec.pair must be a pair of two devices")
    pair = copy.deepcopy(spec["pair"])
    if pair["devices"][1].get("kind") != "roofline":
        raise ValueError(f"regime: device 1 of pair {spec.get('pair_name')!r} is not a roofline device")
    pair["devices"][1].pop("measure_on_cuda", None)  # the sweep is of the roofline, never measured times
    ratios = tuple(spec.get("ratios") or RATIOS)
    rows = []
    for model in graphs:
        graph = load_graph(graphs[model])
        prof = costs.load_profile(profiles[model], graph)
        for r in model_rows(graph, pair, prof, ratios, bool(spec.get("heft", True))):
            rows.append({"pair": spec.get("pair_name", ""), "model": model, **r, "clock": "simulated"})
    return pd.DataFrame(rows)


def fig_regime(df, out, paper_pct: float | None = None) -> None:
    """Per model: the serial optimum's and HEFT's (concurrent) speedup over the faster single
    device against the GPU/CPU cost ratio of the weighted operators (simulated)."""
    import matplotlib.pyplot as plt

    from distlab.plotting import plots

    plots.set_style()
    models = list(dict.fromkeys(df.model))
    fig, axes = plt.subplots(1, len(models), figsize=(plots.PAGE, 2.6), squeeze=False, sharey=True,
                             layout="constrained")
    for ax, model in zip(axes[0], models):
        s = df[df.model == model].sort_values("ratio")
        ax.plot(s.ratio, s.serial_headroom_pct, marker="o", color="C0",
                label="serial optimum vs best single device")
        ax.plot(s.ratio, s.serial_optimum_speedup_over_cpu_pct, marker="s", color="C1",
                label="serial optimum vs CPU-only")
        if "heft_concurrent_gain_pct" in s:
            ax.plot(s.ratio, s.heft_concurrent_gain_pct, marker="^", color="C2", linestyle="--",
                    label="HEFT (concurrent) vs best single device")
        if paper_pct is not None:
            ax.axhline(paper_pct, color="0.4", linestyle=":", label=f"paper: up to {paper_pct:g} % over CPU")
        ax.axvline(1.0, color="0.8", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(plots.name(model))
        ax.set_xlabel("GPU / CPU seconds (conv, linear)")
    axes[0][0].set_ylabel("speedup % (simulated)")
    plots.label_provenance(fig, "simulated")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2, frameon=False)
    plots.caption(fig, "The serial optimum's and HEFT's (concurrent) speedup over the faster single device and "
                  "over CPU only, against the GPU/CPU cost ratio of the conv, linear and matmul operators; CPU "
                  "times from the stored profile, the GPU's a roofline scaled by the ratio",
                  "none: deterministic (a stored profile and a model)", "none: no seeds, no spread",
                  "simulated (virtual clock)")
    fig.suptitle("Where a mixed placement pays (simulated)")
    plots.save(fig, out)
