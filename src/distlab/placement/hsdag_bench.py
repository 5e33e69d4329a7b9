"""Time of one HSDAG update, the sparse implementation (``placement/hsdag.py``) against the
dense reference (``placement/hsdag_dense.py``), on the default config's graphs and settings.

An update is one episode of ``samples`` sampled and evaluated placements, their batched
scoring and one Adam step.  Each repeat runs both implementations (the order alternating
between repeats) from one seed on one problem for ``updates`` updates, and records the median
time between consecutive updates (the first update, which pays the run's set-up, left out)
and whether both evaluated the same latencies in the same order.  The ratio of a repeat is
the reference's median over the sparse one's; :func:`compare` reports each repeat's ratio
and the machine's load (1-minute load average) beside it.  Measured, never asserted.
"""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

VARIANTS = ("hsdag", "hsdag_corrected", "hsdag_fine")


def _problem(graph_path: Path, profile_path: Path, model: dict, pair: dict, order: str, budget: int,
             partition: str):
    from . import costs
    from .graphfile import load_graph
    from .problem import Problem

    graph = load_graph(graph_path)
    prof = costs.load_profile(profile_path, graph, model)
    return Problem.build(graph, pair, prof, budget, "allow", cuda=costs.load_cuda_profile(profile_path, graph),
                         order=order, partition=partition)


def update_time(problem, opts: dict[str, Any], seed: int, reference: bool) -> tuple[float, list[float]]:
    """Median seconds between consecutive updates of one run (``problem``'s whole budget) and
    the latencies it evaluated."""
    from . import hsdag, hsdag_dense

    stamps: list[float] = []
    problem.reset()
    (hsdag_dense.train if reference else hsdag.train)(problem, opts, seed,
                                                      log=lambda _msg: stamps.append(time.perf_counter()))
    return float(np.median(np.diff(stamps))), list(problem.history)


def compare(placement_cfg: dict, graphs: Path, profiles: Path, out: Path, models: list[str] | None = None,
            variants: tuple[str, ...] = VARIANTS, updates: int = 6, repeats: int = 5, seed: int = 0) -> list[dict]:
    """One row per (model, variant, repeat): the reference's and the sparse implementation's
    median update time, their ratio, whether the runs evaluated the same latencies, the load."""
    import torch

    torch.set_num_threads(1)
    pair = placement_cfg["pairs"][placement_cfg["default_pair"]]
    rows = []
    for model in models or list(placement_cfg["run_models"]):
        for variant in variants:
            opts = {**placement_cfg[variant], "reward": "latency", "drop_features": []}
            budget = updates * int(opts.get("samples", 20)) + (1 if opts.get("final_greedy") else 0)
            problem = _problem(graphs / f"{model}.json", profiles / f"{model}.json", placement_cfg["models"][model],
                               pair, placement_cfg.get("sim_order", "topological"), budget,
                               opts.get("partition", "coarsen"))
            update_time(problem, opts, seed, False)  # warm-up: the first run in a process pays one-time costs
            for r in range(repeats):
                t = {}
                for reference in ((True, False) if r % 2 == 0 else (False, True)):
                    t[reference] = update_time(problem, opts, seed, reference)
                rows.append({"model": model, "variant": variant, "repeat": r, "groups": problem.n_groups,
                             "reference_s": t[True][0], "sparse_s": t[False][0],
                             "ratio": t[True][0] / t[False][0], "same_evaluations": t[True][1] == t[False][1],
                             "load_1min": os.getloadavg()[0]})
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per (model, variant): the median ratio over the repeats, the repeats, whether every repeat
    evaluated the same latencies, and the mean load."""
    out = []
    for key in dict.fromkeys((r["model"], r["variant"]) for r in rows):
        rs = [r for r in rows if (r["model"], r["variant"]) == key]
        out.append({"model": key[0], "variant": key[1], "groups": rs[0]["groups"],
                    "median_ratio": float(np.median([r["ratio"] for r in rs])), "repeats": len(rs),
                    "same_evaluations": all(r["same_evaluations"] for r in rs),
                    "mean_load": float(np.mean([r["load_1min"] for r in rs]))})
    return out


def add_arguments(ap) -> None:
    """The options of ``python -m distlab placement-bench-hsdag``."""
    ap.add_argument("--config", type=Path, default=Path("config/config.yaml"))
    ap.add_argument("--graphs", type=Path, default=Path("results/placement/graphs"))
    ap.add_argument("--profiles", type=Path, default=Path("data/placement/profiles"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--updates", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=5)


def run(a) -> int:
    """``python -m distlab placement-bench-hsdag --out CSV``: :func:`compare` on the config's
    default pair, the workflow's graph files and the stored profiles; prints :func:`summary`."""
    from ..config.yamlio import load_user_file

    cfg = load_user_file(a.config, "config")["placement"]
    rows = compare(cfg, a.graphs, a.profiles, a.out, a.models, tuple(a.variants), a.updates, a.repeats)
    for s in summary(rows):
        print(f"{s['model']:14s} {s['variant']:16s} groups {s['groups']:4d}  x{s['median_ratio']:.2f} "
              f"(median of {s['repeats']})  same evaluations: {s['same_evaluations']}  load {s['mean_load']:.1f}")
    return 0
