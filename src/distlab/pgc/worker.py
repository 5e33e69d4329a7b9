"""A gradient-coding worker's state and message, shared by both backends.

A worker holds the partitions its scheme's placement gives it.  At each step
it computes the gradients the scheme asks for (all of them for GC and IS-GC,
one round-robin partition for PGC, all at start-up) on the model it has, keeps
the latest gradient of each held partition with the step it was taken at, and
sends the encoded combination.  The simulated cluster and the torch.distributed
worker process both drive this same class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .coding import Scheme


@dataclass
class CodedWorker:
    scheme: Scheme
    worker: int
    latest: dict[int, torch.Tensor] = field(default_factory=dict)   # partition -> gradient
    taken_at: dict[int, int] = field(default_factory=dict)          # partition -> model step
    fresh_loss: dict[int, float] = field(default_factory=dict)      # losses computed this step

    def __post_init__(self) -> None:
        self.coef = self.scheme.encode_coefficients(self.worker)

    def to_compute(self, step: int) -> tuple[int, ...]:
        """Partitions to evaluate at ``step``; a worker that has never computed
        (start-up, or a restarted process) evaluates all its partitions."""
        if not self.latest:
            return tuple(self.coef)
        return self.scheme.partitions_to_compute(self.worker, step)

    def update(self, partition: int, grad: torch.Tensor, loss: float, model_step: int) -> None:
        self.latest[partition] = grad
        self.taken_at[partition] = model_step
        self.fresh_loss[partition] = loss

    def message(self) -> torch.Tensor:
        """The encoded combination of the latest gradients of the held partitions."""
        msg = None
        for j, c in self.coef.items():
            term = self.latest[j] if c == 1.0 else self.latest[j] * c
            msg = term.clone() if msg is None else msg.add_(term)
        return msg

    def staleness(self, step: int) -> int:
        """Age in steps of the oldest gradient in the message sent at ``step``."""
        return max(step - t for t in self.taken_at.values())

    def pop_fresh_loss(self) -> float:
        """Mean loss of the partitions computed this step (reported with the message)."""
        vals = list(self.fresh_loss.values())
        self.fresh_loss.clear()
        return sum(vals) / len(vals)

    def state_dict(self) -> dict:
        return {"latest": dict(self.latest), "taken_at": dict(self.taken_at)}

    def load_state_dict(self, state: dict) -> None:
        self.latest = dict(state["latest"])
        self.taken_at = {int(k): int(v) for k, v in state["taken_at"].items()}
