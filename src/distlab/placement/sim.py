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
"""

from __future__ import annotations

import heapq

from dataclasses import dataclass

import numpy as np


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
        if order not in ("topological", "ready"):
            raise PlacementError(f"order: {order!r} is not 'topological' or 'ready'")
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
        if self.order == "ready":
            return np.array([self._run_ready(p.tolist())[0] for p in place])
        if place.shape[0] < 64:  # the scalar loop is faster than numpy on small batches
            return np.array([self._run_one(p.tolist())[0] for p in place])
        return self._run(place, trace=False)[0]

    def trace(self, place: np.ndarray) -> Trace:
        place = self._check(place)
        if place.shape[0] != 1:
            raise PlacementError("trace takes one placement")
        run = self._run_ready if self.order == "ready" else self._run_one
        lat, start, finish, transfers = run(place[0].tolist())
        return Trace(lat, np.array(start), np.array(finish), transfers)

    def _lists_once(self):
        if not hasattr(self, "_lists"):
            self._lists = ([p.tolist() for p in self.preds], [s.tolist() for s in self.succs],
                           self.compute.tolist(), self.transfer.tolist(), set(self.sinks.tolist()))
        return self._lists

    def _run_ready(self, pl: list[int]):
        """Event-driven loop, device queues in order of readiness (Placeto's discipline)."""
        preds, succs, comp, xfer, sinks = self._lists_once()
        n, k, host, inf = self.n, self.k, self.host, float("inf")
        remaining = [len(p) for p in preds]
        arrive = [[inf] * k for _ in range(n)]
        start_l, finish_l, transfers = [0.0] * n, [0.0] * n, []
        events: list = []
        devq: list[list] = [[] for _ in range(k)]
        busq: list[list] = [[] for _ in range(k)]
        dev_on, bus_on = [False] * k, [False] * k
        seq = 0

        def push(t, kind, a, b=0):
            nonlocal seq
            seq += 1
            heapq.heappush(events, (t, seq, kind, a, b))

        def ready(v, t):
            d = pl[v]
            heapq.heappush(devq[d], (t, v))
            if not dev_on[d]:
                dev_on[d] = True
                push(t, 0, d)

        def resolved(w, t):
            remaining[w] -= 1
            if remaining[w] == 0:
                ready(w, t)

        for v in range(n):
            if not preds[v]:
                ready(v, 0.0)
        while events:
            t, _, kind, a, b = heapq.heappop(events)
            if kind == 0:                       # device a is free: run its earliest-ready op
                if not devq[a]:
                    dev_on[a] = False
                    continue
                _, v = heapq.heappop(devq[a])
                fin = t + comp[v][a]
                start_l[v], finish_l[v] = t, fin
                push(fin, 1, v)
                push(fin, 0, a)
            elif kind == 1:                     # op a finished
                d = pl[a]
                arrive[a][d] = t
                dests = set()
                for w in succs[a]:
                    if pl[w] == d:
                        resolved(w, t)
                    else:
                        dests.add(pl[w])
                if a in sinks and d != host:
                    dests.add(host)
                for dst in sorted(dests):
                    heapq.heappush(busq[d], (t, a, dst))
                    if not bus_on[d]:
                        bus_on[d] = True
                        push(t, 2, d)
            elif kind == 2:                     # bus a is free: send its earliest output
                if not busq[a]:
                    bus_on[a] = False
                    continue
                _, v, dst = heapq.heappop(busq[a])
                done = t + xfer[v]
                transfers.append((v, a, dst, t, done))
                push(done, 3, v, dst)
                push(done, 2, a)
            else:                               # output a arrived on device b
                arrive[a][b] = t
                for w in succs[a]:
                    if pl[w] == b:
                        resolved(w, t)
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
