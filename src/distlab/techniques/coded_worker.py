"""A gradient-coding worker's state and message, shared by both backends.

A worker holds the partitions its scheme's placement gives it.  At each step
it computes the gradients the scheme asks for (all of them for GC and IS-GC,
one round-robin partition for PGC, all at start-up) on the model it has, keeps
the latest gradient of each held partition with the step it was taken at, and
sends the encoded combination.  The simulated cluster and the torch.distributed
worker process both drive this same class.

A worker processes the models it is sent *in order*, one per step, whether or
not it is late (the authors' Ray actors run queued tasks in order, and the
simulated cluster starts a busy worker's next step late): the round-robin
index is the step of the model being processed, so the gradients in one
message are at most ``s`` steps old.

For a model with buffers (BatchNorm), a worker also reports the mean of the
running statistics its fresh partitions produced at this step; the master
adopts the mean over the messages it used, so it evaluates with running
statistics of the data, not its initial ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .gradient_codes import Scheme


@dataclass
class CodedWorker:
    scheme: Scheme
    worker: int
    latest: dict[int, torch.Tensor] = field(default_factory=dict)   # partition -> gradient
    taken_at: dict[int, int] = field(default_factory=dict)          # partition -> model step
    fresh_loss: dict[int, float] = field(default_factory=dict)      # losses computed this step
    fresh_buf: dict[int, torch.Tensor] = field(default_factory=dict)  # buffers after each fresh partition
    encode_s: float = 0.0                                            # wall time of the last message()

    def __post_init__(self) -> None:
        self.coef = self.scheme.encode_coefficients(self.worker)

    def to_compute(self, step: int) -> tuple[int, ...]:
        """Partitions to evaluate at ``step``; a worker that has never computed
        (start-up, or a restarted process) evaluates all its partitions."""
        if not self.latest:
            return tuple(self.coef)
        return self.scheme.partitions_to_compute(self.worker, step)

    def update(self, partition: int, grad: torch.Tensor, loss: float, model_step: int,
               buffers: torch.Tensor | None = None) -> None:
        self.latest[partition] = grad
        self.taken_at[partition] = model_step
        self.fresh_loss[partition] = loss
        if buffers is not None:
            self.fresh_buf[partition] = buffers

    def message(self) -> torch.Tensor:
        """The encoded combination of the latest gradients of the held partitions
        (its wall time is kept in :attr:`encode_s`)."""
        t0 = time.perf_counter()
        msg = None
        for j, c in self.coef.items():
            term = self.latest[j] if c == 1.0 else self.latest[j] * c
            msg = term.clone() if msg is None else msg.add_(term)
        self.encode_s = time.perf_counter() - t0
        return msg

    def staleness(self, step: int) -> int:
        """Age in steps of the oldest gradient in the message sent at ``step``."""
        return max(step - t for t in self.taken_at.values())

    def pop_fresh_loss(self) -> float:
        """Mean loss of the partitions computed this step (reported with the message)."""
        vals = list(self.fresh_loss.values())
        self.fresh_loss.clear()
        return sum(vals) / len(vals)

    def pop_fresh_buffers(self) -> torch.Tensor | None:
        """Mean buffers over the partitions computed this step (None without buffers)."""
        if not self.fresh_buf:
            return None
        out = torch.stack(list(self.fresh_buf.values())).mean(0)
        self.fresh_buf.clear()
        return out

    def state_dict(self) -> dict:
        return {"latest": dict(self.latest), "taken_at": dict(self.taken_at)}

    def load_state_dict(self, state: dict) -> None:
        self.latest = dict(state["latest"])
        self.taken_at = {int(k): int(v) for k, v in state["taken_at"].items()}
