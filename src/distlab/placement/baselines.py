"""Baselines on the same simulator and evaluation budget as HSDAG.

* ``cpu_only`` / ``gpu_only``: every operator on device 0 / device 1 (one
  evaluation; deterministic, so every seed gets the same value);
* ``random``: uniform random device per co-location group, best of the budget;
* ``heft``: HEFT list scheduling (Topcuoglu et al. 2002) on the operator
  graph: upward ranks from mean compute and transfer costs, then each operator
  in rank order to the device giving the earliest finish; its placement is
  then scored by the simulator (one evaluation);
* the learned baselines (the RNN placer, Placeto) live in
  :mod:`distlab.placement.learned`; this module needs no torch, so the jobs
  of the four above start without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .problem import Problem


def single_device(problem: Problem, device: int) -> dict[str, Any]:
    problem.evaluate(np.full(problem.graph["n_nodes"], device, dtype=np.int64))
    return {}


def random_search(problem: Problem, opts: dict[str, Any], seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    batch = int(opts.get("batch", 100))
    while problem.left > 0:
        b = min(batch, problem.left)
        problem.evaluate_groups(rng.integers(0, problem.n_devices, (b, problem.n_groups)))
    return {}


def heft(problem: Problem) -> dict[str, Any]:
    sim = problem.sim
    n, k = sim.n, sim.k
    comp, xfer = sim.compute, sim.transfer
    mean_c = comp.mean(1)
    comm = xfer * (k - 1) / k  # expected cost of an edge under a uniform placement
    rank = np.zeros(n)
    for v in range(n - 1, -1, -1):
        s = sim.succs[v]
        rank[v] = mean_c[v] + (max(comm[v] + rank[w] for w in s) if s.size else 0.0)
    order = sorted(range(n), key=lambda v: (-rank[v], v))
    place = np.zeros(n, dtype=np.int64)
    finish = np.zeros(n)
    dev_free = np.zeros(k)
    done = np.zeros(n, bool)
    for v in order:
        assert all(done[u] for u in sim.preds[v]), "rank order must be topological"
        options = [sim.host] if sim.pinned[v] else range(k)
        best = None
        for d in options:
            ready = max([finish[u] + (0.0 if place[u] == d else xfer[u]) for u in sim.preds[v]],
                        default=0.0)
            eft = max(ready, dev_free[d]) + comp[v, d]
            if best is None or eft < best[0]:
                best = (eft, d)
        finish[v], place[v] = best
        dev_free[place[v]] = finish[v]
        done[v] = True
    problem.evaluate(place)
    return {}
