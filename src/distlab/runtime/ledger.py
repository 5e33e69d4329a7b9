"""One byte-accounting rule for both backends.

Every communication call of an algorithm goes through :class:`ByteLedger`,
on the simulated cluster and under torch.distributed alike, so a figure of
bytes means the same thing whichever backend produced it.  The unit is bytes
*sent per worker* by the algorithm the backend implements (ring collectives,
see :mod:`distlab.runtime.network`); point-to-point messages count their
payload once, at the sender.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .network import all_gather_bytes, ring_all_reduce_bytes


@dataclass
class ByteLedger:
    """Running totals of communicated bytes, per operation kind and per step."""

    by_op: Counter = field(default_factory=Counter)
    step_bytes: float = 0.0
    total_bytes: float = 0.0

    def _add(self, op: str, nbytes: float) -> float:
        self.by_op[op] += nbytes
        self.step_bytes += nbytes
        self.total_bytes += nbytes
        return nbytes

    def all_reduce(self, nbytes: int, n: int) -> float:
        """Per-worker bytes of a ring all-reduce over ``n`` workers."""
        return self._add("all_reduce", ring_all_reduce_bytes(nbytes, n))

    def all_gather(self, payload: int, n: int) -> float:
        """Per-worker bytes of a ring all-gather of ``payload`` bytes each."""
        return self._add("all_gather", all_gather_bytes(payload, n))

    def send(self, nbytes: int, count: int = 1) -> float:
        """``count`` point-to-point messages of ``nbytes`` each."""
        return self._add("p2p", float(nbytes) * count)

    def pop_step(self) -> float:
        """Bytes since the previous call (one training step), then reset."""
        b, self.step_bytes = self.step_bytes, 0.0
        return b

    def state_dict(self) -> dict:
        return {"by_op": dict(self.by_op), "total_bytes": self.total_bytes}

    def load_state_dict(self, state: dict) -> None:
        self.by_op = Counter(state["by_op"])
        self.total_bytes = float(state["total_bytes"])
        self.step_bytes = 0.0
