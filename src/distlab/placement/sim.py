"""Event-driven simulator of a placed operator graph, vectorised over placements.

Model (in the style of Placeto's simulator, Addanki et al. 2019):

* every device has one queue and runs one operator at a time; its queue holds
  the device's operators in the graph's topological order (node index order,
  which is the order of the traced program), and an operator starts when the
  device is free and all its inputs have arrived on the device;
* an operator's output crosses to another device once per destination device
  that consumes it, on the *sender's* bus (one bus per device, FIFO):
  a transfer starts when the output is ready and the bus is free and takes
  ``latency + bytes / bandwidth``; transfers on one bus queue in the order
  their producers finish (a device finishes its operators in its queue order,
  so this is also the order the bus receives them);
* inputs live on the host (device 0) whatever the placement says, and each
  result (a node without successors) is sent back to the host: the latency is
  the time the last result is on the host.  So a GPU-only placement pays for
  moving its input in and its output out, as it does on real hardware.

``Simulator.evaluate`` runs a batch of placements at once: the loop is over
nodes in topological order, each step a handful of numpy operations over the
batch.  ``Simulator.trace`` returns the start/finish of every operator and
transfer of one placement.

``order="ready"`` switches to the queue discipline of Placeto's simulator: a
device's queue is ordered by the time an operator became ready (FIFO,
work-conserving: a ready operator never waits behind one whose inputs are
still in flight).  It runs a heap-based event loop per placement, slower than
the default single pass; both are tested on hand-computed schedules.

``order="rank"`` is list scheduling with insertion, the schedule HEFT
(Topcuoglu et al. 2002) builds: operators are dispatched in decreasing
*upward rank* (mean compute over the devices plus, along the longest path to
the exit, the mean cost of every edge: an edge costs its producer's transfer
when its ends sit on different devices; a result's trip back to the host is
an edge to a virtual exit on the host), whatever the placement; each goes
into the earliest idle slot of its device that starts no earlier than its
inputs are there and is long enough, and each transfer likewise into the
earliest idle slot of its sender's bus.  HEFT (``baselines.heft``) chooses
devices with this very engine (``RankSchedule``), so its schedule's estimate
is the simulator's score of its placement under this order, to the bit.

``order="serial"`` is the timing of the paper's measurements (OpenVINO's HETERO plugin, whose
synchronous inference runs its subgraphs one after another): no two operators and no operator
and transfer overlap, so the latency is the sum of the operators' compute on their devices
plus every transfer (an output sent once to each other device that consumes it; a result on
another device sent back to the host).  The trace runs the operators in topological order,
each transfer right after its producer.  On two devices its exact optimum is a minimum s-t cut
(``optimum.serial_optimum``).
"""

from __future__ import annotations

import bisect
import heapq

from dataclasses import dataclass

import numpy as np


ORDERS = ("topological", "ready", "rank", "serial")


class PlacementError(ValueError):
    """A placement that cannot be simulated (wrong shape, device out of range)."""


@dataclass
class Trace:
    latency: float
    start: np.ndarray            # [n] operator start (s)
    finish: np.ndarray           # [n] operator finish (s)
    transfers: list[tuple[int, int, int, float, float]]  # (node, src, dst, start, end)


class Simulator:
    def __init__(self, n: int, edges, compute: np.ndarray, transfer: np.ndarray,
                 pinned: np.ndarray | None = None, host: int = 0, order: str = "topological"):
        if order not in ORDERS:
            raise PlacementError(f"order: {order!r} is not one of {ORDERS}")
        self.order = order
        compute = np.asarray(compute, dtype=float)
        transfer = np.asarray(transfer, dtype=float)
        if compute.ndim != 2 or compute.shape[0] != n:
            raise PlacementError(f"compute must be [n_nodes={n}, n_devices], got {compute.shape}")
        if transfer.shape != (n,):
            raise PlacementError(f"transfer must be [n_nodes={n}], got {transfer.shape}")
        for name, arr in (("compute", compute), ("transfer", transfer)):
            if not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise PlacementError(f"{name} costs must be finite and >= 0")
        self.n, self.k = n, compute.shape[1]
        self.compute, self.transfer, self.host = compute, transfer, host
        preds: list[list[int]] = [[] for _ in range(n)]
        succs: list[list[int]] = [[] for _ in range(n)]
        for u, v in edges:
            u, v = int(u), int(v)
            if not (0 <= u < v < n):
                raise PlacementError(f"edge ({u}, {v}) is not a forward edge of a {n}-node topological order")
            if u not in preds[v]:
                preds[v].append(u)
                succs[u].append(v)
        self.preds = [np.array(p, dtype=np.int64) for p in preds]
        self.succs = [np.array(s, dtype=np.int64) for s in succs]
        self.sinks = np.array([v for v in range(n) if not succs[v]], dtype=np.int64)
        self.pinned = np.zeros(n, bool) if pinned is None else np.asarray(pinned, bool)

    # ------------------------------------------------------------------ checks
    def _check(self, place: np.ndarray) -> np.ndarray:
        place = np.asarray(place)
        if place.ndim == 1:
            place = place[None, :]
        if place.ndim != 2 or place.shape[1] != self.n:
            raise PlacementError(f"placement must be [batch, {self.n}], got {place.shape}")
        if not np.issubdtype(place.dtype, np.integer):
            raise PlacementError(f"placement must hold integer device ids, got {place.dtype}")
        if place.size and (place.min() < 0 or place.max() >= self.k):
            raise PlacementError(f"placement holds a device id outside [0, {self.k})")
        place = place.astype(np.int64, copy=True)
        place[:, self.pinned] = self.host
        return place

    # --------------------------------------------------------------- evaluate
    def evaluate(self, place: np.ndarray) -> np.ndarray:
        """Latency (s) of each placement of a ``[batch, n]`` array (or one ``[n]``)."""
        place = self._check(place)
        if self.order == "serial":
            return self._serial(place)
        if self.order == "ready":
            return np.array([self._run_ready(p.tolist())[0] for p in place])
        if self.order == "rank":
            return np.array([self._run_rank(p.tolist())[0] for p in place])
        if place.shape[0] < 64:  # the scalar loop is faster than numpy on small batches
            return np.array([self._run_one(p.tolist())[0] for p in place])
        return self._run(place, trace=False)[0]

    def trace(self, place: np.ndarray) -> Trace:
        place = self._check(place)
        if place.shape[0] != 1:
            raise PlacementError("trace takes one placement")
        run = {"ready": self._run_ready, "rank": self._run_rank,
               "serial": self._run_serial}.get(self.order, self._run_one)
        lat, start, finish, transfers = run(place[0].tolist())
        return Trace(lat, np.array(start), np.array(finish), transfers)

    def _lists_once(self):
        if not hasattr(self, "_lists"):
            self._lists = ([p.tolist() for p in self.preds], [s.tolist() for s in self.succs],
                           self.compute.tolist(), self.transfer.tolist(), set(self.sinks.tolist()))
        return self._lists

    # ---------------------------------------------------------- serial order
    def _serial(self, place: np.ndarray) -> np.ndarray:
        """Serial latency of a ``[batch, n]`` array: compute plus every transfer (vectorised:
        which devices each output must reach, as a ``[batch, n, k]`` mask)."""
        b = place.shape[0]
        lat = self.compute[np.arange(self.n)[None, :], place].sum(axis=1)
        if not hasattr(self, "_edge_arrays"):
            src = np.concatenate([np.full(s.size, v, dtype=np.int64) for v, s in enumerate(self.succs)] + [np.zeros(0, np.int64)])
            dst = np.concatenate([s for s in self.succs] + [np.zeros(0, np.int64)])
            self._edge_arrays = (src, dst)
        src, dst = self._edge_arrays
        need = np.zeros((b, self.n, self.k), bool)
        rows = np.arange(b)[:, None]
        need[rows, src[None, :], place[:, dst]] = True
        need[:, self.sinks, self.host] = True
        need[rows, np.arange(self.n)[None, :], place] = False  # an output is on its own device
        return lat + need.sum(axis=2) @ self.transfer

    def _run_serial(self, pl: list[int]):
        preds, succs, comp, xfer, sinks = self._lists_once()
        t, start_l, finish_l, transfers = 0.0, [0.0] * self.n, [0.0] * self.n, []
        for v in range(self.n):
            d = pl[v]
            start_l[v], t = t, t + comp[v][d]
            finish_l[v] = t
            dests = {pl[w] for w in succs[v]}
            if v in sinks:
                dests.add(self.host)
            dests.discard(d)
            for dst in sorted(dests):
                transfers.append((v, d, dst, t, t + xfer[v]))
                t += xfer[v]
        return t, start_l, finish_l, transfers

    # ------------------------------------------------------------ rank order
    def upward_rank(self) -> np.ndarray:
        """HEFT's upward rank of every operator: ``rank(v) = mean_d compute[v, d] +
        max over successors w of (transfer[v] + rank(w))``; a result (no successor) has the
        virtual exit on the host as its successor: ``rank = mean compute + transfer``.
        ``transfer[v]`` is the mean cost of an edge from ``v`` over pairs of distinct devices
        (one link model, so it is the same for every pair)."""
        if not hasattr(self, "_rank"):
            mean_c = self.compute.mean(axis=1)
            rank = np.zeros(self.n)
            for v in range(self.n - 1, -1, -1):
                s = self.succs[v]
                tail = max(rank[w] for w in s.tolist()) if s.size else 0.0
                rank[v] = mean_c[v] + (self.transfer[v] + tail)
            self._rank = rank
            self._rank_order = sorted(range(self.n), key=lambda v: (-rank[v], v))
        return self._rank

    def rank_order(self) -> list[int]:
        self.upward_rank()
        return list(self._rank_order)

    def _run_rank(self, pl: list[int]):
        sched = RankSchedule(self)
        for v in self.rank_order():
            sched.dispatch(v, pl[v])
        return sched.latency(), sched.start, sched.finish, sched.transfers

    def _run_ready(self, pl: list[int]):
        """Event-driven loop, device queues in order of readiness (Placeto's discipline).

        Events ``(time, seq, kind, a, b)`` in a heap, ties in the order they were pushed:
        kind 0 device ``a`` is free, 1 operator ``a`` finished, 2 bus ``a`` is free,
        3 output ``a`` arrived on device ``b``.  A finish frees its device, and an arrival its
        bus, at the same instant: that event would be the very next one popped, so it is
        handled in place instead of pushed.  Written out flat (no helper calls) for speed.
        """
        preds, succs, comp, xfer, sinks = self._lists_once()
        n, k, host, inf = self.n, self.k, self.host, float("inf")
        push, pop = heapq.heappush, heapq.heappop
        remaining = [len(p) for p in preds]
        arrive = [[inf] * k for _ in range(n)]
        start_l, finish_l, transfers = [0.0] * n, [0.0] * n, []
        events: list = []
        devq: list[list] = [[] for _ in range(k)]
        busq: list[list] = [[] for _ in range(k)]
        dev_on, bus_on = [False] * k, [False] * k
        seq = 0
        for v in range(n):
            if not preds[v]:
                d = pl[v]
                push(devq[d], (0.0, v))
                if not dev_on[d]:
                    dev_on[d] = True
                    seq += 1
                    push(events, (0.0, seq, 0, d, 0))
        while events:
            t, _, kind, a, b = pop(events)
            if kind == 1:                       # op a finished on device d
                d = pl[a]
                arrive[a][d] = t
                dests = None
                for w in succs[a]:
                    dw = pl[w]
                    if dw == d:
                        remaining[w] -= 1
                        if remaining[w] == 0:
                            push(devq[d], (t, w))
                    elif dests is None:
                        dests = [dw]
                    elif dw not in dests:
                        dests.append(dw)
                if d != host and a in sinks:
                    if dests is None:
                        dests = [host]
                    elif host not in dests:
                        dests.append(host)
                if dests:
                    if len(dests) > 1:
                        dests.sort()
                    bq = busq[d]
                    for dst in dests:
                        push(bq, (t, a, dst))
                    if not bus_on[d]:
                        bus_on[d] = True
                        seq += 1
                        push(events, (t, seq, 2, d, 0))
                a, kind = d, 0                  # then device d is free (the next event in order)
            elif kind == 3:                     # output a arrived on device b
                arrive[a][b] = t
                for w in succs[a]:
                    if pl[w] == b:
                        remaining[w] -= 1
                        if remaining[w] == 0:
                            push(devq[b], (t, w))
                            if not dev_on[b]:
                                dev_on[b] = True
                                seq += 1
                                push(events, (t, seq, 0, b, 0))
                a, kind = pl[a], 2              # then the sender's bus is free
            if kind == 0:                       # device a is free: run its earliest-ready op
                q = devq[a]
                if not q:
                    dev_on[a] = False
                    continue
                v = pop(q)[1]
                fin = t + comp[v][a]
                start_l[v] = t
                finish_l[v] = fin
                seq += 1
                push(events, (fin, seq, 1, v, 0))
            else:                               # bus a is free: send its earliest output
                q = busq[a]
                if not q:
                    bus_on[a] = False
                    continue
                _, v, dst = pop(q)
                done = t + xfer[v]
                transfers.append((v, a, dst, t, done))
                seq += 1
                push(events, (done, seq, 3, v, dst))
        lat = max(arrive[v][host] for v in sinks)
        return lat, start_l, finish_l, transfers

    def _run_one(self, pl: list[int]):
        """The same model for one placement, in plain Python (no numpy per node)."""
        preds, succs, comp, xfer, sinks = self._lists_once()
        k, host, inf = self.k, self.host, float("inf")
        dev_free = [0.0] * k
        bus_free = [0.0] * k
        avail = [None] * self.n
        start_l, finish_l, transfers = [0.0] * self.n, [0.0] * self.n, []
        for v in range(self.n):
            d = pl[v]
            t = dev_free[d]
            for u in preds[v]:
                a = avail[u][d]
                if a > t:
                    t = a
            fin = t + comp[v][d]
            dev_free[d] = fin
            start_l[v], finish_l[v] = t, fin
            av = [inf] * k
            av[d] = fin
            dests = {pl[w] for w in succs[v]}
            if v in sinks:
                dests.add(host)
            dests.discard(d)
            for dst in (sorted(dests) if len(dests) > 1 else dests):
                t0 = fin if fin > bus_free[d] else bus_free[d]
                done = t0 + xfer[v]
                bus_free[d] = done
                av[dst] = done
                transfers.append((v, d, dst, t0, done))
            avail[v] = av
        lat = max(avail[v][host] for v in sinks)
        return lat, start_l, finish_l, transfers

    def _run(self, place: np.ndarray, trace: bool):
        b, n, k = place.shape[0], self.n, self.k
        ar = np.arange(b)
        dev_free = np.zeros((b, k))
        bus_free = np.zeros((b, k))
        avail = np.full((b, n, k), np.inf)
        start_all = np.zeros((b, n)) if trace else None
        finish_all = np.zeros((b, n)) if trace else None
        transfers: list[tuple[int, int, int, float, float]] = []
        sink = np.zeros(n, bool)
        sink[self.sinks] = True
        comp, xfer, host = self.compute, self.transfer, self.host
        for v in range(n):
            dv = place[:, v]
            p = self.preds[v]
            free = dev_free[ar, dv]
            if p.size:
                ready = avail[ar[:, None], p[None, :], dv[:, None]].max(axis=1)
                start = np.maximum(ready, free)
            else:
                start = free
            fin = start + comp[v][dv]
            dev_free[ar, dv] = fin
            avail[ar, v, dv] = fin
            if trace:
                start_all[:, v], finish_all[:, v] = start, fin
            s = self.succs[v]
            cons = place[:, s] if s.size else None
            for d in range(k):
                need = dv != d
                if s.size:
                    want = (cons == d).any(axis=1)
                    if sink[v] and d == host:
                        want |= True
                else:
                    want = np.full(b, d == host)
                need &= want
                if not need.any():
                    continue
                t0 = np.maximum(fin, bus_free[ar, dv])
                done = t0 + xfer[v]
                bus_free[ar, dv] = np.where(need, done, bus_free[ar, dv])
                avail[:, v, d] = np.where(need, done, avail[:, v, d])
                if trace and need[0]:
                    transfers.append((v, int(dv[0]), d, float(t0[0]), float(done[0])))
        lat = avail[:, self.sinks, host].max(axis=1)
        return lat, start_all, finish_all, transfers


class Timeline:
    """One device's or one bus's busy time: the end of its last booking (``free``) and the
    idle gaps before it (sorted, disjoint), for insertion-based scheduling."""

    __slots__ = ("free", "gs", "ge")

    def __init__(self):
        self.free, self.gs, self.ge = 0.0, [], []

    def copy(self) -> Timeline:
        t = Timeline()
        t.free, t.gs, t.ge = self.free, list(self.gs), list(self.ge)
        return t

    def slot(self, t: float, dur: float) -> tuple[float, int]:
        """Earliest start >= ``t`` of an idle interval of length ``dur``: (start, gap index or -1)."""
        gs, ge = self.gs, self.ge
        i = bisect.bisect_left(ge, t + dur)  # earlier gaps end too soon
        while i < len(gs):
            s = gs[i] if gs[i] > t else t
            if s + dur <= ge[i]:
                return s, i
            i += 1
        return (t if t > self.free else self.free), -1

    def book(self, s: float, dur: float, i: int) -> None:
        e = s + dur
        if i < 0:
            if s > self.free:
                self.gs.append(self.free)
                self.ge.append(s)
            self.free = e
            return
        g0, g1 = self.gs[i], self.ge[i]
        new = [(a, b) for a, b in ((g0, s), (e, g1)) if b > a]
        self.gs[i:i + 1] = [a for a, _ in new]
        self.ge[i:i + 1] = [b for _, b in new]


class RankSchedule:
    """The partial schedule of ``order="rank"``: operators dispatched one at a time onto a
    device, each into the earliest idle slot after its inputs arrive; a missing input is sent
    on its producer's bus (earliest idle slot after the producer finishes), once per
    destination device; a result on another device is sent back to the host when dispatched."""

    def __init__(self, sim: Simulator):
        self.sim = sim
        n, k = sim.n, sim.k
        preds, succs, comp, xfer, sinks = sim._lists_once()
        self.preds, self.comp, self.xfer, self.sinks = preds, comp, xfer, sinks
        self.dev = [Timeline() for _ in range(k)]
        self.bus = [Timeline() for _ in range(k)]
        self.place = [-1] * n
        self.start, self.finish = [0.0] * n, [0.0] * n
        self.arrive: list[dict[int, float]] = [{} for _ in range(n)]
        self.host_at: dict[int, float] = {}
        self.transfers: list[tuple[int, int, int, float, float]] = []

    def copy(self) -> RankSchedule:
        c = RankSchedule.__new__(RankSchedule)
        c.sim, c.preds, c.comp, c.xfer, c.sinks = self.sim, self.preds, self.comp, self.xfer, self.sinks
        c.dev = [t.copy() for t in self.dev]
        c.bus = [t.copy() for t in self.bus]
        c.place, c.start, c.finish = list(self.place), list(self.start), list(self.finish)
        c.arrive = [dict(a) for a in self.arrive]
        c.host_at = dict(self.host_at)
        c.transfers = list(self.transfers)
        return c

    def _send(self, u: int, dst: int) -> float:
        a = self.arrive[u].get(dst)
        if a is None:
            src = self.place[u]
            bus, x = self.bus[src], self.xfer[u]
            s, i = bus.slot(self.finish[u], x)
            bus.book(s, x, i)
            a = s + x
            self.arrive[u][dst] = a
            self.transfers.append((u, src, dst, s, a))
        return a

    def dispatch(self, v: int, d: int) -> float:
        """Schedule ``v`` on device ``d``; returns its finish (for a result: its arrival on the
        host), the earliest finish time HEFT compares."""
        place, finish = self.place, self.finish
        t = 0.0
        for u in self.preds[v]:
            a = finish[u] if place[u] == d else self._send(u, d)
            if a > t:
                t = a
        c = self.comp[v][d]
        s, i = self.dev[d].slot(t, c)
        self.dev[d].book(s, c, i)
        place[v], self.start[v], finish[v] = d, s, s + c
        if v in self.sinks:
            h = self.sim.host
            self.host_at[v] = finish[v] if d == h else self._send(v, h)
            return self.host_at[v]
        return finish[v]

    def latency(self) -> float:
        return max(self.host_at.values())
