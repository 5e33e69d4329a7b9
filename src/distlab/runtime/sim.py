"""The simulated cluster: one process, n workers, a virtual clock.

The algorithms do their arithmetic for real (every gradient is computed);
only *time* is modelled.  Each worker's compute time comes from the work it
really did, charged through :meth:`SimulatedCluster.charge` (calibrated per
unit or measured, see :mod:`distlab.runtime.compute`), plus a straggler delay
drawn from :mod:`distlab.runtime.stragglers`, plus network costs from
:mod:`distlab.runtime.network`.  Two step patterns cover the techniques:

* :meth:`sync_step` — SPMD: every worker computes, then a collective; the
  step ends when the slowest worker's contribution has been combined.
* :meth:`master_step` — a master broadcasts the model, workers compute and
  send one message each, and the master proceeds as soon as the messages it
  has received satisfy ``ready`` (e.g. the fastest ``n - s``).  A worker
  that is still busy with an earlier step starts the next one late; the
  step time is the arrival time of the last message the master needed, plus
  the master's own work on them (``master_s``, e.g. decoding).  Workers whose
  messages arrive at the same instant (no stragglers, equal compute) are
  ordered by a seeded draw per step, a pure function of ``(seed, step)``, so
  no worker is favoured by its index.

Everything is deterministic given the seed (calibrated compute): the clock
state is part of the checkpoint, so a resumed run reproduces the times of
an uninterrupted one.  The simulator's own bookkeeping time is measured
(:attr:`overhead_s`) so its cost can be reported against gradient compute.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .compute import ComputeModel
from .ledger import ByteLedger
from .network import NetworkModel
from .stragglers import StragglerModel, StragglerTimeout  # noqa: F401 (raised here, caught by callers)

BACKEND = "simulated"
TIE_STREAM = 0x7459  # namespaces the per-step tie-breaking draws


@dataclass(frozen=True)
class MasterStep:
    received: list[int]        # workers whose messages the master used, in arrival order
    step_time: float           # simulated seconds from the previous step's end
    end_time: float            # simulated clock at the end of the step
    compute: np.ndarray        # compute seconds charged to each worker this step
    delays: np.ndarray         # straggler delay of each worker this step
    started_late: np.ndarray   # bool: worker was still busy when the step began


class SimulatedCluster:
    """Virtual clock and network of ``n`` workers (plus a master)."""

    backend = BACKEND
    clock = "simulated"

    def __init__(self, n: int, compute: ComputeModel, network: NetworkModel,
                 stragglers: StragglerModel, compute_factor: Sequence[float] | None = None) -> None:
        if n < 1:
            raise ValueError(f"a cluster needs at least one worker, got n={n}")
        self.n = n
        self.compute_model = compute
        self.network = network
        self.stragglers = stragglers
        self.ledger = ByteLedger()
        self.now = 0.0
        self.free_at = np.zeros(n)
        self._charged = np.zeros(n)
        self._factor = stragglers.compute_factor(n)
        if compute_factor is not None:  # e.g. per-worker speeds measured on the real backend
            f = np.asarray(compute_factor, dtype=float)
            if f.shape != (n,) or not np.all(np.isfinite(f)) or np.any(f <= 0):
                raise ValueError(f"compute_factor must be {n} positive finite numbers, got {f}")
            self._factor = self._factor * f
        self.tie_seed = int(stragglers.seed)
        self.overhead_s = 0.0      # wall time spent in the simulator's own bookkeeping
        self.measured_compute_s = 0.0  # wall time of the work charged (both modes)

    # -- compute -------------------------------------------------------------
    def charge(self, worker: int, units: float, measured_s: float) -> None:
        """Worker ``worker`` did ``units`` of work that really took ``measured_s``."""
        t0 = time.perf_counter()
        self._charged[worker] += self.compute_model.cost(units, measured_s) * self._factor[worker]
        self.measured_compute_s += measured_s
        self.overhead_s += time.perf_counter() - t0

    def charge_seconds(self, worker: int, seconds: float) -> None:
        """Worker ``worker`` spent ``seconds`` of simulated time on work outside
        the compute model (e.g. encoding its message); not scaled."""
        self._charged[worker] += seconds

    def tie_break(self, step: int) -> np.ndarray:
        """A seeded random priority per worker for ``step`` (pure in seed and step)."""
        return np.random.default_rng(np.random.SeedSequence([self.tie_seed, TIE_STREAM, int(step)])
                                     ).permutation(self.n)

    def _take_charged(self) -> np.ndarray:
        c, self._charged = self._charged, np.zeros(self.n)
        return c

    # -- step patterns -------------------------------------------------------
    def sync_step(self, step: int, collective_s: float) -> float:
        """SPMD step: compute, then a collective costing ``collective_s``; returns the step time."""
        t0 = time.perf_counter()
        compute = self._take_charged()
        finish = self.now + compute + self.stragglers.delays(step, self.n)
        if not np.all(np.isfinite(finish)):
            dead = [int(w) for w in np.flatnonzero(~np.isfinite(finish))]
            raise StragglerTimeout(
                f"step {step}: workers {dead} never answered; a synchronous collective "
                "waits for every worker")
        end = float(finish.max()) + collective_s
        step_time, self.now = end - self.now, end
        self.free_at[:] = end
        self.overhead_s += time.perf_counter() - t0
        return step_time

    def master_step(self, step: int, msg_bytes: Sequence[float] | float, bcast_bytes: float,
                    ready: Callable[[list[int]], bool], master_s: float = 0.0) -> MasterStep:
        """Master–worker step; see the module docstring for the timing rules."""
        t0 = time.perf_counter()
        n = self.n
        compute = self._take_charged()
        delays = self.stragglers.delays(step, n)
        model_at = self.now + self.network.broadcast(bcast_bytes, n)
        start = np.maximum(model_at, self.free_at)
        finish = start + compute + delays
        msg = np.asarray(msg_bytes, dtype=float)
        arrival = finish + self.network.p2p(msg)
        order = np.lexsort((self.tie_break(step), arrival))  # by arrival, ties by a seeded draw
        received: list[int] = []
        for w in order:
            if not math.isfinite(arrival[w]):
                break
            received.append(int(w))
            if ready(received):
                break
        if not received or not ready(received):
            dead = [int(w) for w in np.flatnonzero(~np.isfinite(arrival))]
            raise StragglerTimeout(
                f"step {step}: the master needs more messages than can ever arrive; "
                f"workers {dead} never answer")
        end = float(arrival[received[-1]]) + master_s
        self.ledger.send(bcast_bytes, count=n)
        sent = np.isfinite(arrival)  # every worker that answers sends, late or not
        self.ledger.send(float((msg * sent).sum()) if msg.ndim else float(msg) * int(sent.sum()))
        result = MasterStep(received=received, step_time=end - self.now, end_time=end,
                            compute=compute, delays=delays, started_late=self.free_at > model_at)
        self.free_at, self.now = finish, end
        self.overhead_s += time.perf_counter() - t0
        return result

    # -- checkpointing -------------------------------------------------------
    def state_dict(self) -> dict:
        return {"now": self.now, "free_at": self.free_at.tolist(), "ledger": self.ledger.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.now = float(state["now"])
        self.free_at = np.asarray(state["free_at"], dtype=float)
        self.ledger.load_state_dict(state["ledger"])

    def describe(self) -> str:
        return (f"simulated cluster, n={self.n}; {self.compute_model.describe()}; "
                f"{self.stragglers.describe()}; network {self.network.latency_s:g} s + "
                f"{self.network.bandwidth_Bps / 1e9:g} GB/s")
