"""The exact best two-device placement under serial timing, as a minimum s-t cut.

Under ``order="serial"`` (the paper's HETERO timing: subgraphs one after another) the latency of
a placement ``p`` of a two-device pair is

    sum_v compute[v, p[v]]  +  sum_v transfer[v] * [some consumer of v, or the host for a
                                                    result, sits on the other device]

which is order-independent, so the best placement is a minimum cut of a flow network
(Stone 1977's two-processor assignment, with one extra gadget per producer because an output
crosses once whatever the number of its consumers over there):

* source ``s`` stands for device 0 (the host), sink ``t`` for device 1; operator ``v`` on the
  source side runs on device 0;
* ``s -> v`` with capacity ``compute[v, 1]`` (cut when v is on device 1), ``v -> t`` with
  ``compute[v, 0]``; a pinned operator (an input) gets ``s -> v`` of infinite capacity;
* for each operator ``v`` with a transfer cost: a node ``a_v`` with ``v -> a_v`` (capacity
  ``transfer[v]``) and ``a_v -> w`` (infinite) for each consumer ``w``: if v is on device 0 and
  some consumer on device 1, ``a_v`` must sit with that consumer and the cut pays the transfer
  once; and a node ``b_v`` with ``b_v -> v`` (``transfer[v]``) and ``w -> b_v`` (infinite) for each
  consumer, and ``s -> b_v`` (infinite) when v is a result (the host receives it): v on device 1
  with a consumer on device 0 pays once;
* co-location groups (optional): ``u <-> v`` of infinite capacity inside a group, so the cut is
  the best placement a placer of those groups can express.

The cut's value equals the serial latency of the placement it defines (checked in the result),
and it is tested against brute force on small graphs (tests/test_placement_optimum.py).
"""

from __future__ import annotations

import numpy as np

from .sim import PlacementError, Simulator


def serial_optimum(sim: Simulator, group: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """``(placement [n], serial latency s)`` of the best two-device placement of ``sim``'s
    graph (``group``: optional co-location groups the placement must respect)."""
    import networkx as nx
    from networkx.algorithms.flow import preflow_push

    if sim.k != 2:
        raise PlacementError(f"the min-cut optimum needs two devices, the pair has {sim.k}")
    if sim.host != 0:
        raise PlacementError("the min-cut optimum takes the host to be device 0")
    g = nx.DiGraph()
    s, t = "s", "t"
    g.add_node(s)
    g.add_node(t)
    inf = float("inf")
    comp, xfer = sim.compute, sim.transfer

    def add(u, v, c):
        if c <= 0:
            return
        if g.has_edge(u, v):
            g[u][v]["capacity"] += c
        else:
            g.add_edge(u, v, capacity=c)

    sinks = set(sim.sinks.tolist())
    for v in range(sim.n):
        g.add_node(v)
        add(s, v, inf if sim.pinned[v] else float(comp[v, 1]))
        add(v, t, float(comp[v, 0]))
        cons = sim.succs[v].tolist()
        x = float(xfer[v])
        if x <= 0 or (not cons and v not in sinks):
            continue
        if cons:
            a = ("a", v)
            add(v, a, x)
            for w in cons:
                add(a, w, inf)
        b = ("b", v)
        add(b, v, x)
        for w in cons:
            add(w, b, inf)
        if v in sinks:
            add(s, b, inf)
    if group is not None:
        group = np.asarray(group, dtype=np.int64)
        first: dict[int, int] = {}
        for v in range(sim.n):
            if sim.pinned[v]:  # an input sits on the host whatever its group's device
                continue
            r = first.setdefault(int(group[v]), v)
            if r != v:
                add(r, v, inf)
                add(v, r, inf)
    value, (side_s, _) = nx.minimum_cut(g, s, t, flow_func=preflow_push)
    place = np.array([0 if v in side_s else 1 for v in range(sim.n)], dtype=np.int64)
    lat = float(sim.evaluate(place)[0]) if sim.order == "serial" else float(value)
    if sim.order == "serial" and not np.isclose(lat, value, rtol=1e-9, atol=1e-12):
        raise RuntimeError(f"min cut {value} differs from the placement's serial latency {lat}")
    return place, lat
