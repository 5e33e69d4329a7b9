"""Network cost model shared by every technique.

All costs are in seconds and follow the usual alpha-beta model: a message of
``b`` bytes between two nodes costs ``latency + b / bandwidth``.  Collectives
use the bandwidth-optimal ring algorithms, whose per-worker traffic is the
byte-accounting rule of the whole project (see :mod:`distlab.runtime.ledger`):

* ring all-reduce of a ``b``-byte tensor over ``N`` workers sends
  ``2 (N-1)/N * b`` bytes per worker in ``2 (N-1)`` latency-bound rounds;
* ring all-gather of a ``p``-byte payload per worker sends ``(N-1) * p``
  bytes per worker (each worker forwards every other worker's payload once)
  in ``N-1`` rounds;
* point-to-point send/receive costs one latency plus ``b / bandwidth``.

The master-worker schemes (gradient coding) assume the master's link is
full-duplex and that its sends to different workers overlap, so a model
broadcast to ``n`` workers costs one point-to-point time, as in a pipelined
tree broadcast.  This is stated in every figure that uses it.
"""

from __future__ import annotations

from dataclasses import dataclass


def ring_all_reduce_bytes(nbytes: int, n: int) -> float:
    """Bytes each worker sends in a ring all-reduce of an ``nbytes`` tensor."""
    if n <= 1:
        return 0.0
    return 2.0 * (n - 1) / n * nbytes


def all_gather_bytes(payload: int, n: int) -> float:
    """Bytes each worker sends in a ring all-gather of ``payload`` bytes each."""
    if n <= 1:
        return 0.0
    return float((n - 1) * payload)


@dataclass(frozen=True)
class NetworkModel:
    """Latency (s) and bandwidth (bytes/s) of every link of the simulated cluster."""

    latency_s: float = 1e-4
    bandwidth_Bps: float = 1.25e9  # 10 Gbit/s

    def __post_init__(self) -> None:
        if self.latency_s < 0:
            raise ValueError(f"network latency_s must be >= 0, got {self.latency_s}")
        if self.bandwidth_Bps <= 0:
            raise ValueError(f"network bandwidth_Bps must be > 0, got {self.bandwidth_Bps}")

    def p2p(self, nbytes):
        """One message (or an array of message sizes, element-wise)."""
        return self.latency_s + nbytes / self.bandwidth_Bps

    def all_reduce(self, nbytes: float, n: int) -> float:
        if n <= 1:
            return 0.0
        return 2 * (n - 1) * self.latency_s + ring_all_reduce_bytes(nbytes, n) / self.bandwidth_Bps

    def all_gather(self, payload: float, n: int) -> float:
        if n <= 1:
            return 0.0
        return (n - 1) * self.latency_s + all_gather_bytes(payload, n) / self.bandwidth_Bps

    def broadcast(self, nbytes: float, n: int) -> float:
        """Master to ``n`` workers, overlapping sends (see module docstring)."""
        return 0.0 if n < 1 else self.p2p(nbytes)
