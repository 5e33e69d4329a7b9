"""DiLoCo (Douillard et al., 2023): H local AdamW steps per worker, then the mean of the
workers' parameter deltas is the gradient of an outer Nesterov SGD step; one all-reduce
every H steps.  Its workers drift between synchronisations, so it keeps one model each."""

from __future__ import annotations

import copy

import torch

from .method import Method, adamw, trainable_params
from .options import value


class DiLoCo(Method):
    def __init__(self, model, n_local, spec, comm):
        super().__init__(model, n_local, spec, comm)
        self.H = int(value(spec, "diloco", "H"))
        self.workers = [copy.deepcopy(model) for _ in range(n_local)]
        self.inner = [adamw(trainable_params(m), spec) for m in self.workers]
        self.global_params = trainable_params(model)
        self.outer = torch.optim.SGD(self.global_params, lr=float(value(spec, "diloco", "outer_lr")),
                                     momentum=float(value(spec, "diloco", "outer_momentum")), nesterov=True)

    def model_for(self, w):
        return self.workers[w]

    def after_backward(self, w, loss):
        self.inner[w].step()
        self.losses[w] = loss.detach()

    def update(self, step):
        if (step + 1) % self.H:
            # no communication between syncs; the loss is this process's workers' mean
            return float(torch.stack(self.losses).mean())
        dtype = self.global_params[0].dtype
        deltas = [torch.cat([(g.detach() - p.detach()).reshape(-1) for g, p in
                             zip(self.global_params, trainable_params(m))] + [self.losses[w].reshape(1).to(dtype)])
                  for w, m in enumerate(self.workers)]
        mean = self.comm.all_reduce_mean(deltas)
        i = 0
        for g in self.global_params:
            g.grad = mean[i:i + g.numel()].view_as(g).clone()
            i += g.numel()
        self.outer.step()
        with torch.no_grad():
            for m in self.workers:
                for g, p in zip(self.global_params, trainable_params(m)):
                    p.copy_(g)
        return float(mean[-1])

    def payload_nbytes(self) -> int:
        return (sum(p.numel() for p in self.global_params) + 1) * self.global_params[0].element_size()

    def state_dict(self):
        return {"workers": [m.state_dict() for m in self.workers], "inner": [o.state_dict() for o in self.inner],
                "outer": self.outer.state_dict()}

    def load_state_dict(self, state):
        for m, s in zip(self.workers, state["workers"]):
            m.load_state_dict(s)
        for o, s in zip(self.inner, state["inner"]):
            o.load_state_dict(s)
        self.outer.load_state_dict(state["outer"])
