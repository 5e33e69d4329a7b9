"""Expressiveness of a placer's search space: can the clusters a learner places
express a placement as good as the best baseline's?

A learner places clusters, not operators: the co-location groups of ``coarsen.py`` (RNN,
Placeto, HSDAG's input) or, for HSDAG, the clusters its graph-parsing pooling ends with.
HEFT places single operators.  ``project`` moves an operator placement onto clusters (each
cluster to the device that holds most of its compute time there; pinned inputs do not vote,
ties go to the lower device id), ``expand`` copies a cluster placement back to the operators.
``witness`` then improves the projection by flipping one cluster at a time while the simulated
latency falls (first improvement, at most ``passes`` sweeps): the best placement of the space
this finds is a witness that the space holds a placement that good.  A witness no better than
the best baseline does not prove the space cannot do better, so the precondition built on it
(``placement.<model>.<learner>_space`` in config/claims.yaml) reads "not met" with the gap
measured, the rows "not testable here".  Every latency here is simulated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .sim import Simulator


def project(sim: Simulator, place: np.ndarray, clusters: np.ndarray) -> np.ndarray:
    """Cluster placement ``[C]`` of operator placement ``place`` ``[n]`` (``clusters[v]`` is
    operator v's cluster): each cluster to the device with most of its compute seconds."""
    place = np.asarray(place, dtype=np.int64)
    clusters = np.asarray(clusters, dtype=np.int64)
    c = int(clusters.max()) + 1
    votes = np.zeros((c, sim.k))
    free = ~sim.pinned
    w = sim.compute[np.arange(sim.n), place]
    # a zero-cost operator still counts a little, so a cluster of free operators has a vote
    np.add.at(votes, (clusters[free], place[free]), w[free] + 1e-12)
    return votes.argmax(axis=1).astype(np.int64)


def expand(cluster_place: np.ndarray, clusters: np.ndarray) -> np.ndarray:
    """Operator placement from a cluster placement."""
    return np.asarray(cluster_place, dtype=np.int64)[np.asarray(clusters, dtype=np.int64)]


def latency(sim: Simulator, cluster_place: np.ndarray, clusters: np.ndarray) -> float:
    return float(sim.evaluate(expand(cluster_place, clusters))[0])


def witness(sim: Simulator, start: np.ndarray, clusters: np.ndarray, passes: int = 2) -> tuple[np.ndarray, float]:
    """Local search from cluster placement ``start``: flip one cluster to another device
    where that lowers the simulated latency, up to ``passes`` sweeps over the clusters."""
    best = np.asarray(start, dtype=np.int64).copy()
    best_lat = latency(sim, best, clusters)
    for _ in range(passes):
        improved = False
        for i in range(best.size):
            for d in range(sim.k):
                if d == best[i]:
                    continue
                trial = best.copy()
                trial[i] = d
                lat = latency(sim, trial, clusters)
                if lat < best_lat:
                    best, best_lat, improved = trial, lat, True
        if not improved:
            break
    return best, best_lat


def space_row(sim: Simulator, clusters: np.ndarray, heft_place: np.ndarray, baselines: dict[str, float],
              passes: int = 2) -> dict[str, Any]:
    """One row of the space table: HEFT projected onto ``clusters``, its witness, and the gap
    of the witness to the best baseline (``baselines``: method -> simulated latency, s)."""
    proj = project(sim, heft_place, clusters)
    proj_lat = latency(sim, proj, clusters)
    _, wit_lat = witness(sim, proj, clusters, passes)
    name = min(baselines, key=baselines.get)
    base = float(baselines[name])
    return {"n_clusters": int(np.asarray(clusters).max()) + 1,
            "heft_ms": float(sim.evaluate(np.asarray(heft_place, dtype=np.int64))[0]) * 1e3,
            "projected_ms": proj_lat * 1e3, "witness_ms": wit_lat * 1e3,
            "best_baseline": name, "best_baseline_ms": base * 1e3,
            "gap_ms": (wit_lat - base) * 1e3, "gap_rel": (wit_lat - base) / base}


BASELINES = ("cpu_only", "gpu_only", "heft", "random")


def table(spec: dict[str, Any], graphs: dict[str, str], profiles: dict[str, str],
          runs: list[str]) -> "pd.DataFrame":
    """The space table (``placement_space``): one row per (model, learner, seed) of the default
    pair: HEFT projected onto the clusters the learner places (its final parsing's clusters where
    the run records them, else its co-location groups), the witness and its gap to the best
    baseline (the lowest seed-mean latency of ``BASELINES``).  ``spec``: pair, pair_name,
    sim_order, learners."""
    import json

    import pandas as pd

    from . import costs
    from .graphfile import load_graph
    from .problem import Problem

    by: dict[tuple[str, str], dict] = {}
    for path in runs:
        doc = json.loads(open(path).read())
        by[(doc["spec"]["model_name"], doc["spec"]["method"])] = doc
    rows = []
    for model in sorted({m for m, _ in by}):
        graph = load_graph(graphs[model])
        prof = costs.load_profile(profiles[model], graph, by[(model, "heft")]["spec"].get("model"))
        problem = Problem.build(graph, spec["pair"], prof, 1, cuda=costs.load_cuda_profile(profiles[model], graph),
                                order=spec.get("sim_order", "topological"))
        base = {m: float(np.mean([r["latency_s"] for r in by[(model, m)]["rows"]]))
                for m in BASELINES if (model, m) in by}
        heft = np.asarray(by[(model, "heft")]["rows"][0]["placement"], dtype=np.int64)
        for learner in spec["learners"]:
            doc = by.get((model, learner))
            if doc is None:
                continue
            for r in doc["rows"]:
                clusters = np.asarray(r["clusters"] if "clusters" in r else problem.group, dtype=np.int64)
                rows.append({"pair": spec["pair_name"], "model": model, "method": learner, "seed": r["seed"],
                             "clusters_from": "final parsing" if "clusters" in r else "co-location groups",
                             **space_row(problem.sim, clusters, heft, base), "clock": "simulated"})
    return pd.DataFrame(rows)
