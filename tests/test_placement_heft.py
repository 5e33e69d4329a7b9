"""HEFT (Topcuoglu, Hariri and Wu 2002) and the simulator's rank order, on hand-built graphs.

Each schedule below is worked out by hand in the comments.  Dropping the communication cost
from the upward ranks changes the dispatch order of the fork/join case (and its placement);
dropping it from the finish times moves the operator of the two-device case to the device
where it computes faster but arrives later.
"""

from __future__ import annotations

import numpy as np
import pytest

from distlab.placement import baselines, sim
from distlab.placement.problem import Problem


def _problem(n, edges, comp, xfer, pinned=None, order="rank"):
    s = sim.Simulator(n, edges, np.array(comp, float), np.array(xfer, float),
                      None if pinned is None else np.array(pinned, bool), order=order)
    graph = {"n_nodes": n, "edges": edges, "nodes": [{"op": "x"}] * n}
    return Problem(graph, s, np.arange(n), [], s.k, "allow", budget=1)


def _heft(p):
    info = baselines.heft(p)
    return p.best_placement.tolist(), info["estimate_s"]


def test_fork_join_communication_changes_the_ranks():
    # 0 (input, host) -> 1 (3 s), 0 -> 2 (2 s); 1, 2 -> 3 (1 s, the result).  Transfers:
    # out(0) 0.5, out(1) 0.5, out(2) 2, out(3) 0.5 s.  Upward ranks (mean compute + edge + rank):
    # r3 = 1 + 0.5 (back to the host) = 1.5; r1 = 3 + 0.5 + 1.5 = 5; r2 = 2 + 2 + 1.5 = 5.5;
    # r0 = 0 + 0.5 + 5.5 = 6.  Without communication r1 = 4 > r2 = 3: the order would be 0 1 2 3.
    p = _problem(4, [(0, 1), (0, 2), (1, 3), (2, 3)], [[0, 0], [3, 3], [2, 2], [1, 1]],
                 [0.5, 0.5, 2, 0.5], pinned=[1, 0, 0, 0])
    assert p.sim.upward_rank().tolist() == [6.0, 5.0, 5.5, 1.5]
    assert p.sim.rank_order() == [0, 2, 1, 3]
    # 2: device 0 finishes at 2 (device 1: 0.5 + 2 = 2.5) -> device 0, [0, 2];
    # 1: device 0 at 2 + 3 = 5, device 1 at 0.5 + 3 = 3.5 -> device 1;
    # 3: device 0: out(1) on bus 1 3.5-4, start 4, done 5; device 1: out(2) on bus 0 2-4, done 5,
    #    back to the host 5-5.5 -> device 0, makespan 5.  (In the order 0 1 2 3: 1 on device 0, 2 and 3
    #    on device 1.)
    place, est = _heft(p)
    assert place == [0, 1, 0, 0] and est == 5.0
    assert p.best == est


@pytest.mark.parametrize("comp1, want_place, want_est", [
    # 1 computes 0.5 s faster on device 1 but its input takes 1 s to get there: 3.5 > 3, it stays;
    # 2 then: device 0 at 3 + 1 = 4; device 1 at 3 + 1 (transfer) + 1 = 5 and 1 s back -> device 0.
    ([3, 2.5], [0, 0, 0], 4.0),
    # 4 s faster (5 s against 1 s): device 1 finishes 1 at 1 + 1 = 2 < 5; 2: device 0: out(1)
    # 2-3, done 4; device 1: done 3, back to the host 3-4: a tie, the first device (0) is kept.
    ([5, 1], [0, 1, 0], 4.0),
])
def test_two_devices_transfer_against_compute(comp1, want_place, want_est):
    p = _problem(3, [(0, 1), (1, 2)], [[0, 0], comp1, [1, 1]], [1, 1, 1], pinned=[1, 0, 0])
    place, est = _heft(p)
    assert place == want_place and est == want_est
    assert p.best == est


# The classic example of Topcuoglu et al. (2002, Fig. 2): 10 tasks, 3 processors.  Adapted to
# the simulator's cost model: an output costs one transfer whatever its destination, taken as
# the mean of the paper's costs on that task's out-edges; no input is pinned; the exit's result
# costs nothing to return.
CLASSIC_EDGES = [(0, 1, 18), (0, 2, 12), (0, 3, 9), (0, 4, 11), (0, 5, 14), (1, 7, 19), (1, 8, 16),
                 (2, 6, 23), (3, 7, 27), (3, 8, 23), (4, 8, 13), (5, 7, 15), (6, 9, 17), (7, 9, 11),
                 (8, 9, 13)]
CLASSIC_COMP = [[14, 16, 9], [13, 19, 18], [11, 13, 19], [13, 8, 17], [12, 13, 10], [13, 16, 9],
                [7, 15, 11], [5, 11, 14], [18, 12, 20], [21, 7, 16]]


def _classic(order="rank"):
    out: dict[int, list[int]] = {}
    for u, _, c in CLASSIC_EDGES:
        out.setdefault(u, []).append(c)
    xfer = [np.mean(out[u]) if u in out else 0.0 for u in range(10)]
    return _problem(10, [(u, v) for u, v, _ in CLASSIC_EDGES], CLASSIC_COMP, xfer, order=order), xfer


def test_classic_ten_task_example():
    p, xfer = _classic()
    # upward ranks, recomputed here from their definition
    mean = np.mean(CLASSIC_COMP, axis=1)
    succ = {u: [v for a, v, _ in CLASSIC_EDGES if a == u] for u in range(10)}
    want = [0.0] * 10
    for v in range(9, -1, -1):
        want[v] = mean[v] + xfer[v] + max([want[w] for w in succ[v]], default=0.0)
    assert p.sim.upward_rank() == pytest.approx(want, abs=1e-12)
    assert p.sim.rank_order()[0] == 0 and p.sim.rank_order()[-1] == 9
    place, est = _heft(p)
    assert p.best == est                       # HEFT's estimate is the simulator's score
    tr = p.sim.trace(np.array(place))
    for v in range(10):                        # each task runs for its cost, after its inputs
        assert tr.finish[v] - tr.start[v] == pytest.approx(CLASSIC_COMP[v][place[v]])
        for u, w, _ in CLASSIC_EDGES:
            if w == v:
                arrival = tr.finish[u] + (xfer[u] if place[u] != place[v] else 0.0)
                assert tr.start[v] >= arrival - 1e-9
    for d in range(3):                         # one task at a time per device
        iv = sorted((tr.start[v], tr.finish[v]) for v in range(10) if place[v] == d)
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(iv, iv[1:]))
    singles = [p.sim.evaluate(np.full(10, d))[0] for d in range(3)]
    assert est < min(singles)                  # better than any one processor


@pytest.mark.parametrize("seed", range(5))
def test_heft_estimate_is_the_simulators_score_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    n, k = 30, 3
    edges = sorted({(int(u), int(v)) for u, v in rng.integers(0, n, (60, 2)) if u < v})
    comp = rng.uniform(0.1, 2.0, (n, k))
    xfer = rng.uniform(0.0, 1.5, n)
    pinned = np.zeros(n, bool)
    pinned[0] = True
    p = _problem(n, edges, comp, xfer, pinned)
    place, est = _heft(p)
    assert p.best == est
    assert place[0] == 0


def test_rank_order_inserts_into_idle_slots():
    # 0 (host input) -> 1 (device 1, 1 s) -> 2 (device 0, 1 s); 0 -> 3 (device 0, 0.5 s), 3 low rank.
    # transfers 1 s.  Rank order: 0, 1, 2, 3 (r3 = 0.5 + 1 = 1.5 < r2 = 2).  Device 0: 2 waits
    # for out(1) (0 -> 1 on bus 0 0-1, 1 runs 1-2, back 2-3): 2 runs 3-4; 3 is dispatched after
    # it but fits in device 0's idle slot [0, 3): it runs 0-0.5.  Makespan 4 (the topological
    # queue gives the same here; the ready queue too).
    p = _problem(4, [(0, 1), (1, 2), (0, 3)], [[0, 0], [1, 1], [1, 1], [0.5, 0.5]], [1, 1, 1, 1],
                 pinned=[1, 0, 0, 0])
    assert p.sim.rank_order() == [0, 1, 2, 3]
    tr = p.sim.trace(np.array([0, 1, 0, 0]))
    assert tr.start.tolist() == [0, 1, 3, 0] and tr.latency == 4.0
