"""One placement job: every seed of one method on one (model, device pair).

The job's spec (a JSON document from the workflow) holds everything that
changes its numbers: the method and its options, the device pair, the
seeds, the evaluation budget, the single-device rule; the graph and the CPU
profile come as files.  Output: one JSON file with a row per seed (best
latency, evaluations needed to come within 1 % of the run's best, clusters),
the best-so-far curve and the best placement of every seed.

Per-seed results go into a checkpoint keyed by the spec
(``runs.Checkpointer``), so a killed job resumes at the first unfinished seed
and a job rerun under another spec starts again.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import baselines, costs
from .graphfile import load_graph
from .problem import Problem

log = logging.getLogger("distlab.placement")

METHODS = ("cpu_only", "gpu_only", "random", "heft", "rnn", "placeto", "hsdag")
ABLATIONS = {"hsdag_no_shape": "shape", "hsdag_no_node_id": "node_id",
             "hsdag_no_structural": "structural"}
DETERMINISTIC = ("cpu_only", "gpu_only", "heft")


def budget_of(spec: dict[str, Any]) -> int:
    h = spec["hsdag"]
    return int(h["episodes"]) * int(h["samples"])


def run_seed(problem: Problem, spec: dict[str, Any], seed: int) -> dict[str, Any]:
    method = spec["method"]
    problem.reset()
    t0 = time.perf_counter()
    if method == "cpu_only":
        info = baselines.single_device(problem, 0)
    elif method == "gpu_only":
        info = baselines.single_device(problem, 1)
    elif method == "heft":
        info = baselines.heft(problem)
    elif method == "random":
        info = baselines.random_search(problem, {}, seed)
    elif method == "rnn":  # the learned methods import torch; the others start without it
        from . import learned

        info = learned.rnn(problem, spec["rnn"], seed)
    elif method == "placeto":
        from . import learned

        info = learned.placeto(problem, spec["placeto"], seed)
    elif method == "hsdag" or method in ABLATIONS:
        from . import hsdag

        opts = dict(spec["hsdag"])
        if method in ABLATIONS:
            opts["drop_features"] = [ABLATIONS[method]]
        info = hsdag.train(problem, opts, seed)
    else:
        raise ValueError(f"method: {method!r} is not one of {METHODS + tuple(ABLATIONS)}")
    wall = time.perf_counter() - t0
    curve = problem.curve()
    best = float(curve[-1])
    within = int(np.argmax(curve <= best * 1.01)) + 1
    place = problem.best_placement
    return {
        "seed": seed, "latency_s": best, "evaluations": len(curve), "evals_to_1pct": within,
        "frac_on_device1": float(np.mean(place[~problem.sim.pinned] == 1)),
        "wall_s": wall, "curve": curve.tolist(), "placement": place.tolist(),
        "clusters_mean": float(info.get("clusters_mean", np.nan)),
    }


def run(spec: dict[str, Any], graph_path: str | Path, profile_path: str | Path, out: str | Path,
        runtime: dict[str, Any] | None = None) -> Path:
    from distlab.runs import Checkpointer
    from distlab.tables import atomic_write_text

    graph = load_graph(graph_path)
    prof = costs.load_profile(profile_path, graph)
    budget = 1 if spec["method"] in DETERMINISTIC else budget_of(spec)
    # the single-device rule is about what a search may return: the single-device
    # baselines themselves (and HEFT's one schedule) are always scored as they are
    rule = "allow" if spec["method"] in DETERMINISTIC else spec.get("single_device", "allow")
    problem = Problem.build(graph, spec["pair"], prof, budget, rule,
                            cuda=costs.load_cuda_profile(profile_path, graph),
                            order=spec.get("sim_order", "topological"))
    out = Path(out)
    ck_cfg = (runtime or {}).get("checkpoint", {"every_s": 0.0, "every_steps": 1})
    ck = Checkpointer(out.with_suffix(".ckpt"), spec=spec, every_s=float(ck_cfg.get("every_s", 0.0)),
                      every_steps=1)
    state = ck.load() or {"rows": []}
    rows = state["rows"]
    done = {r["seed"] for r in rows}
    for seed in spec["seeds"]:
        if seed in done:
            continue
        if spec["method"] in DETERMINISTIC and rows:
            # one evaluation decides it: every seed shares the value
            rows.append({**rows[0], "seed": seed})
        else:
            rows.append(run_seed(problem, spec, seed))
        log.info("%s %s %s seed %d: %.3f ms", spec["pair_name"], spec["model_name"], spec["method"],
                 seed, rows[-1]["latency_s"] * 1e3)
        ck.save({"rows": rows})
    result = {"spec": spec, "clock": "simulated", "n_nodes": graph["n_nodes"],
              "n_edges": graph["n_edges"], "n_groups": problem.n_groups,
              "n_coarse_edges": len(problem.cedges), "rows": rows}
    atomic_write_text(out, json.dumps(result))
    ck.clear()
    return out
