"""DeMo as a data-parallel method: one :class:`~distlab.techniques.demo.optim.DeMo` state
(momentum) per worker over the same parameters; the workers' payloads (the step's loss
appended, 4 bytes) are all-gathered and applied once.  ``demo-compact`` sends the compact
payload, ``demo-allmean`` is the ablation with the plain mean over all workers."""

from __future__ import annotations

import torch

from ..method import Method, trainable_params
from .optim import DeMo


class DeMoMethod(Method):
    def __init__(self, model, n_local, spec, comm):
        super().__init__(model, n_local, spec, comm)
        d = spec.get("demo", {})
        kw = dict(lr=float(spec["lr"]), compression_decay=float(d.get("decay", 0.999)),
                  compression_topk=int(d.get("topk", 32)), compression_chunk=int(d.get("chunk", 64)),
                  weight_decay=float(d.get("weight_decay", 0.0)),
                  encoding="compact" if spec["method"] == "demo-compact" else "reference",
                  value_dtype=d.get("value_dtype", "bfloat16"),
                  mean="all" if spec["method"] == "demo-allmean" else "senders")
        # one DeMo state (momentum) per worker over the same parameters
        self.opts = [DeMo(trainable_params(model), **kw) for _ in range(n_local)]
        self.payloads: list[torch.Tensor | None] = [None] * n_local

    def after_backward(self, w, loss):
        payload = self.opts[w].encode()
        lt = loss.detach().to(torch.float32).reshape(1).to(payload.device)
        self.payloads[w] = torch.cat([payload, lt.view(torch.uint8)])

    def update(self, step):
        gathered = self.comm.all_gather(self.payloads)
        losses = gathered[:, -4:].clone().view(torch.float32)
        self.opts[0].apply(gathered[:, :-4].to(next(self.model.parameters()).device))
        self.payloads = [None] * self.n_local
        return float(losses.mean())

    def payload_nbytes(self) -> int:
        return self.opts[0].payload_nbytes() + 4

    def state_dict(self):
        return {"opts": [o.state_dict() for o in self.opts]}

    def load_state_dict(self, state):
        for o, s in zip(self.opts, state["opts"]):
            o.load_state_dict(s)
