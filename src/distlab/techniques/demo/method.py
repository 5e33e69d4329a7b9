"""DeMo as a data-parallel method: one :class:`~distlab.techniques.demo.optim.DeMo` state
(momentum) per worker over the same parameters; the workers' payloads (the step's loss
appended, 4 bytes) are all-gathered and applied once.  A variant (its spec in
:data:`distlab.techniques.catalogue.METHODS`) names its ``encoding`` (``demo-compact`` sends the
compact payload) and its ``mean`` (``demo-allmean``: the plain mean over all workers)."""

from __future__ import annotations

import torch

from ..method import Method, trainable_params
from ..options import value
from .optim import DeMo


class DeMoMethod(Method):
    def __init__(self, model, n_local, spec, comm, encoding=None, mean=None):
        super().__init__(model, n_local, spec, comm)
        # a variant says how it encodes and averages (DeMo checks the values); none is assumed for it
        if encoding is None or mean is None:
            raise ValueError(f"DeMo method {spec.get('method')!r}: its spec gives no "
                             f"{'encoding' if encoding is None else 'mean'} (distlab.techniques.catalogue)")
        kw = dict(lr=float(spec["lr"]), compression_decay=float(value(spec, "demo", "decay")),
                  compression_topk=int(value(spec, "demo", "topk")), compression_chunk=int(value(spec, "demo", "chunk")),
                  weight_decay=float(value(spec, "demo", "weight_decay")), encoding=encoding,
                  value_dtype=value(spec, "demo", "value_dtype"), mean=mean)
        # one DeMo state (momentum) per worker over the same parameters
        self.opts = [DeMo(trainable_params(model), **kw) for _ in range(n_local)]
        self.payloads: list[torch.Tensor | None] = [None] * n_local

    def after_backward(self, w, loss):
        payload = self.opts[w].encode()
        lt = loss.detach().to(torch.float32).reshape(1).to(payload.device)
        self.payloads[w] = torch.cat([payload, lt.view(torch.uint8)])

    def update(self, step):
        gathered = self.comm.all_gather(self.payloads)
        losses = gathered[:, -4:].flatten().clone().view(torch.float32)
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
