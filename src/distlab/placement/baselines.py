"""Baselines on the same simulator and evaluation budget as HSDAG.

* ``cpu_only`` / ``gpu_only``: every operator on device 0 / device 1 (one
  evaluation; deterministic, so every seed gets the same value);
* ``random``: uniform random device per co-location group, best of the budget;
* ``heft``: HEFT (Topcuoglu et al. 2002) on the operator graph: upward ranks
  from mean compute and communication costs, then each operator in rank order
  to the device of earliest finish time with insertion, on the simulator's own
  cost model; its placement is then scored by the simulator (one evaluation);
* ``optimum``: under serial timing (``sim_order: serial``) on two devices, the exact best
  placement, a minimum s-t cut (:mod:`distlab.placement.optimum`); one evaluation.  It also
  records the best placement the problem's co-location groups can express;
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
    """HEFT (Topcuoglu, Hariri and Wu 2002) on the simulator's own cost model.

    1. Upward ranks from the mean compute cost over the devices and the mean communication
       cost of each edge (``Simulator.upward_rank``); operators in decreasing rank.
    2. Each operator in turn to the device of earliest finish time, with insertion: on each
       device the earliest idle slot after its inputs arrive that is long enough, transfers
       booked on the sender's bus likewise (``sim.RankSchedule``, the engine of the
       simulator's ``order="rank"``); a result's finish is its arrival on the host.

    The schedule's makespan is HEFT's estimate; it equals the simulator's score of HEFT's
    placement under ``order="rank"`` (tested).  The placement is then scored by the
    problem's simulator (one evaluation), whatever its order, like every other method's.
    """
    from .sim import RankSchedule

    sim = problem.sim
    sched = RankSchedule(sim)
    for v in sim.rank_order():
        options = [sim.host] if sim.pinned[v] else range(sim.k)
        best = None
        for d in options:
            eft = sched.copy().dispatch(v, d)
            if best is None or eft < best[0]:
                best = (eft, d)
        sched.dispatch(v, best[1])
    place = np.asarray(sched.place, dtype=np.int64)
    problem.evaluate(place)
    return {"estimate_s": sched.latency()}


def optimum(problem: Problem) -> dict[str, Any]:
    """The exact serial optimum (a min cut) over operators, scored by the simulator (one
    evaluation); ``groups_optimum_s``: the best serial latency a placement of the problem's
    co-location groups can reach (not an evaluation)."""
    from .optimum import serial_optimum
    from .sim import PlacementError

    if problem.sim.order != "serial":
        raise PlacementError(f"method optimum needs sim_order serial (the exact optimum of a min cut), "
                             f"not {problem.sim.order!r}")
    place, _ = serial_optimum(problem.sim)
    _, grp = serial_optimum(problem.sim, problem.group)
    problem.evaluate(place)
    return {"groups_optimum_s": grp}
