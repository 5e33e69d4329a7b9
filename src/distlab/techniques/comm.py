"""The communication layer every data-parallel technique talks through: one contract, two backends.

A technique holds the tensors of the workers that run in this process as a list, one per
local worker, and communicates only through its comm:

* ``all_reduce_mean(xs)``: the mean over all ``n`` workers of one tensor each (a ring
  all-reduce);
* ``all_gather(xs)``: every worker's tensor stacked, shape ``(n, *x.shape)`` (a ring
  all-gather);
* ``gather(xs)``: the same stack as a master sees the workers' messages; it is not recorded,
  since a master-worker step is costed by the technique's own message pattern;
* ``pop()``: the collectives recorded since the last ``pop``, in order, as a list of
  :class:`Collective` ``(kind, nbytes)`` (``nbytes``: what one worker contributes), and
  the record emptied;
* ``totals(colls)``: those collectives summed as ``(rounds, seconds, payload)``: ring
  rounds (``2(n-1)`` an all-reduce, ``n-1`` an all-gather), the network model's seconds
  (0.0 without one) and the bytes one worker contributed.

:class:`SimComm` runs the collectives in memory over ``n`` local workers (``len(xs) == n``);
given a :class:`~distlab.runtime.ledger.ByteLedger` it books each collective's bytes on it
as the collective runs, and given a :class:`~distlab.runtime.network.NetworkModel` its
:meth:`~SimComm.totals` prices them.  :class:`DistComm` is the same contract over
torch.distributed with one local worker (``len(xs) == 1``): the collectives are real, the
record and the ledger the same, no seconds (the caller measures wall time).

:class:`StragglerTimeout` (a master that cannot get the messages its scheme needs) is
defined once, in :mod:`distlab.runtime.stragglers`, where the simulator and the
torch.distributed transport raise it; it is importable from here too.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..runtime.stragglers import StragglerTimeout

__all__ = ["Collective", "DistComm", "SimComm", "StragglerTimeout"]


class Collective(NamedTuple):
    """One collective as a comm records it: ``kind`` (``"all_reduce"`` or ``"all_gather"``)
    and ``nbytes``, the bytes one worker contributes."""

    kind: str
    nbytes: int


_ROUNDS = {"all_reduce": lambda n: 2 * (n - 1), "all_gather": lambda n: n - 1}


class SimComm:
    """In-memory collectives over the ``n`` local workers, recorded (and booked on ``ledger``)."""

    def __init__(self, n: int, ledger=None, network=None) -> None:
        self.n, self.ledger, self.network = n, ledger, network
        self.colls: list[Collective] = []

    def _record(self, kind: str, x: torch.Tensor) -> None:
        nbytes = x.numel() * x.element_size()
        if self.ledger is not None:
            getattr(self.ledger, kind)(nbytes, self.n)
        self.colls.append(Collective(kind, nbytes))

    def all_reduce_mean(self, xs: list[torch.Tensor]) -> torch.Tensor:
        self._record("all_reduce", xs[0])
        return torch.stack(xs).mean(0)

    def all_gather(self, xs: list[torch.Tensor]) -> torch.Tensor:
        self._record("all_gather", xs[0])
        return torch.stack(xs)

    def gather(self, xs: list[torch.Tensor]) -> torch.Tensor:
        """The master's view of every worker's message (costed by the master pattern, not here)."""
        return torch.stack(xs)

    def pop(self) -> list[Collective]:
        colls, self.colls = self.colls, []
        return colls

    def totals(self, colls: list[Collective]) -> tuple[int, float, int]:
        """(ring rounds, network seconds, bytes one worker contributed) of ``colls``."""
        rounds, seconds, payload = 0, 0.0, 0
        for kind, nbytes in colls:
            rounds += _ROUNDS[kind](self.n)
            if self.network is not None:
                seconds += getattr(self.network, kind)(nbytes, self.n)
            payload += nbytes
        return rounds, seconds, payload


class DistComm(SimComm):
    """The same contract over torch.distributed: one local worker, one collective a call."""

    def __init__(self, n: int, ledger=None) -> None:
        super().__init__(n, ledger, None)

    def all_reduce_mean(self, xs: list[torch.Tensor]) -> torch.Tensor:
        import torch.distributed as dist

        (x,) = xs
        buf = x.detach().clone()
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        buf.div_(self.n)
        self._record("all_reduce", buf)
        return buf

    def all_gather(self, xs: list[torch.Tensor]) -> torch.Tensor:
        out = self.gather(xs)
        self._record("all_gather", xs[0])
        return out

    def gather(self, xs: list[torch.Tensor]) -> torch.Tensor:
        import torch.distributed as dist

        (x,) = xs
        out = torch.empty((self.n, *x.shape), dtype=x.dtype, device=x.device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # the newer name
        gather(out.view(-1), x.contiguous().view(-1))  # straight into the stack: no list, no copy
        return out
