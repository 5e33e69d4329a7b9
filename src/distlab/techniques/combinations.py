"""The combinations of techniques none of the anchors measured (the atlas's own).

* :class:`DiLoCoDeMo` — DiLoCo whose outer step is DeMo: each worker's parameter delta is the
  gradient of a per-worker DeMo state, payloads all-gathered every H steps (sync kind);
* :class:`ISDeMo` — DeMo whose master applies the payloads of the fastest n-s workers only
  (master kind).

Both are :class:`~distlab.techniques.step.Wrapped` methods of :mod:`distlab.techniques.method`
with their own update.
"""

from __future__ import annotations

import torch

from .demo.optim import DeMo
from .method import trainable_params
from .options import value
from .step import Wrapped


class DiLoCoDeMo(Wrapped):
    """Ours: DiLoCo whose outer step is DeMo — each worker's parameter delta is the
    'gradient' of a per-worker DeMo state (decoupled momentum = error feedback, top-k
    of the DCT), payloads all-gathered every H steps, a sign step of ``outer_lr``."""

    def __init__(self, name, model, n, local, spec, comm, *a, method: str):
        super().__init__(name, model, n, local, spec, comm, *a, method=method)
        gp = self.method.global_params
        self.outer = [DeMo(gp, lr=float(value(spec, "diloco", "outer_lr")) * float(spec["lr"]),
                           compression_decay=float(value(spec, "demo", "decay")),
                           compression_topk=int(value(spec, "demo", "topk")),
                           compression_chunk=int(value(spec, "demo", "chunk"))) for _ in self.local]

    def update(self, step, received=None):
        me = self.method
        if (step + 1) % me.H:
            return float(torch.stack(me.losses).mean())
        payloads = []
        for i, wm in enumerate(me.workers):
            for g, p in zip(me.global_params, trainable_params(wm)):
                g.grad = (g.detach() - p.detach()).clone()
            pl = self.outer[i].encode()
            payloads.append(torch.cat([pl, me.losses[i].to(torch.float32).reshape(1).view(torch.uint8)]))
        gathered = self.comm.all_gather(payloads)
        loss = float(gathered[:, -4:].flatten().clone().view(torch.float32).mean())
        self.outer[0].apply(gathered[:, :-4])
        with torch.no_grad():
            for wm in me.workers:
                for g, p in zip(me.global_params, trainable_params(wm)):
                    p.copy_(g)
        return loss


class ISDeMo(Wrapped):
    """Ours: DeMo where the master applies the payloads of the fastest n-s workers only
    (mean over the senders among them) and broadcasts them (master kind)."""

    def __init__(self, name, model, n, local, spec, comm, *a, method: str):
        super().__init__(name, model, n, local, spec, comm, *a, method=method)
        self.s = int(spec.get("s", 1))

    def update(self, step, received):
        me = self.method
        allp = self.comm.gather(me.payloads)
        rows = allp[list(received)]
        losses = rows[:, -4:].flatten().clone().view(torch.float32)
        me.opts[0].apply(rows[:, :-4])
        me.payloads = [None] * len(self.local)
        return float(losses.mean())

    def master_pattern(self):
        nb = self.method.payload_nbytes()
        return {"msg_bytes": nb, "bcast_bytes": (self.n - self.s) * nb, "wait_for": self.n - self.s}
