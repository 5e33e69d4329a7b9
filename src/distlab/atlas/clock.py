"""The cluster clock of the atlas, vectorised over cells (networks x one straggler draw).

State per cell: ``now`` (the clock) and ``ready`` (when each worker is free).
The formulas are the shared runtime's (:mod:`distlab.runtime.network`, the
alpha-beta ring collectives, and :class:`distlab.runtime.sim.SimulatedCluster`'s
``sync_step``/``master_step``), in the same floating-point order, so a step
costs exactly what the runtime's simulator charges (tested against it):

* sync step with collectives: ``end = max_w((ready_w + compute_w * f_w) + delay_w) + coll``,
  ``coll`` the sum of the step's collectives in order; every worker is then ready at ``end``;
* sync step without a collective (DiLoCo between synchronisations): each worker
  runs ahead, ``ready_w += compute_w * f_w + delay_w``; ``now = max_w ready_w``;
* master step: ``model_at = now + (lat + bcast / bw)``; ``start = max(model_at, ready)``;
  ``finish = (start + compute * f) + delay``; ``arrival = finish + (lat + msg / bw)``;
  ``end`` = the ``wait_for``-th arrival + the master's own work; ``ready = finish``.

``f`` is the straggler model's compute factor (persistently slow workers).
"""

from __future__ import annotations

import numpy as np

from ..runtime.sim import TIE_STREAM


def coll_seconds(kind: str, nbytes: float, n: int, lat, bw):
    """One collective's seconds, as :class:`distlab.runtime.network.NetworkModel` computes it."""
    if n <= 1:
        return 0.0 * lat
    if kind == "all_reduce":
        return 2 * (n - 1) * lat + (2.0 * (n - 1) / n * nbytes) / bw
    if kind == "all_gather":
        return (n - 1) * lat + float((n - 1) * nbytes) / bw
    raise ValueError(f"unknown collective {kind!r}")


def tie_order(seed: int, step: int, n: int) -> np.ndarray:
    """The runtime's seeded per-step priority (ties in arrival broken by it)."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), TIE_STREAM, int(step)])).permutation(n)


class Clock:
    """``C`` cells of ``n`` workers; ``lat``/``bw`` arrays of length C (or scalars)."""

    def __init__(self, n: int, lat, bw, factor=None):
        self.n = n
        self.lat = np.atleast_1d(np.asarray(lat, dtype=float))
        self.bw = np.atleast_1d(np.asarray(bw, dtype=float))
        C = max(self.lat.size, self.bw.size)
        self.lat, self.bw = np.broadcast_to(self.lat, (C,)), np.broadcast_to(self.bw, (C,))
        self.now = np.zeros(C)
        self.ready = np.zeros((C, n))
        self.factor = np.ones(n) if factor is None else np.asarray(factor, dtype=float)

    def sync(self, compute, delays, colls) -> np.ndarray:
        """A sync step; ``colls`` a list of (kind, bytes); returns the step time per cell."""
        fin = (self.ready + np.asarray(compute) * self.factor) + np.asarray(delays)
        before = self.now
        if colls:
            c = 0.0
            for k, b in colls:
                c = c + coll_seconds(k, b, self.n, self.lat, self.bw)
            end = fin.max(axis=1) + c
            self.ready = np.repeat(end[:, None], self.n, axis=1)
        else:
            end = fin.max(axis=1)
            self.ready = fin
        self.now = end
        return end - before

    def master(self, compute, delays, msg_bytes, bcast_bytes, wait_for: int, master_s: float = 0.0,
               tie: np.ndarray | None = None):
        """A master step; returns (step time per cell, received mask (C, n))."""
        before = self.now
        model_at = self.now + (self.lat + bcast_bytes / self.bw)
        start = np.maximum(model_at[:, None], self.ready)
        finish = (start + np.asarray(compute) * self.factor) + np.asarray(delays)
        arrival = finish + (self.lat + msg_bytes / self.bw)[:, None]
        tie = np.arange(self.n) if tie is None else tie
        order = np.lexsort((np.broadcast_to(tie, arrival.shape), arrival), axis=-1)
        kth = np.take_along_axis(arrival, order[:, wait_for - 1:wait_for], axis=1)[:, 0]
        received = np.zeros(arrival.shape, dtype=bool)
        np.put_along_axis(received, order[:, :wait_for], True, axis=1)
        self.ready = finish
        self.now = kth + master_s
        return self.now - before, received
