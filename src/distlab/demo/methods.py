"""The four training methods of the DeMo comparison, written once for both backends.

A method sees ``n_local`` workers: all N on the simulated cluster (one
process), one (its own rank) on the real backend.  Every worker computes its
gradient (``after_backward``); then ``update`` communicates through a
:class:`Comm` and changes the parameters.  The comm of the simulated backend
gathers and averages in memory and charges the collective to the network
model and the ledger; the real one calls torch.distributed and charges the
same ledger rule.

* ``adamw`` — AdamW on the mean gradient: one flattened all-reduce a step.
* ``demo`` / ``demo-compact`` — :class:`distlab.demo.DeMo`, reference or
  compact payload: one all-gather a step.
* ``demo-allmean`` — the ablation: DeMo with the plain mean over all N
  workers at each index (``mean="all"``, Algorithm 1's "synchronize" read
  literally) instead of the reference's mean over the workers that sent it.
* ``powersgd`` — rank-r PowerSGD with error feedback (Vogels et al., 2019)
  feeding AdamW: matrices (the documented reshape) travel as ``P = M Q`` and
  ``Q = M^T P`` (two all-reduces a step), vectors and the rest dense in the
  first one.
* ``diloco`` — DiLoCo (Douillard et al., 2023): H local AdamW steps, then the
  mean of the workers' parameter deltas is the gradient of an outer Nesterov
  SGD step; one all-reduce every H steps.

Parameters stay identical on all workers for adamw, demo and powersgd (the
update is a deterministic function of what was communicated), so the
simulated backend keeps one copy of the model and N copies of the per-worker
state (DeMo's momentum, PowerSGD's error); DiLoCo's workers drift between
syncs, so it keeps N models.  The loss of the step travels with the step's
collective (4 bytes, or one element), as on the real backend.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..techniques.demo.optim import DeMo
from .spec import METHODS  # noqa: F401  (the names make_method builds, listed with the spec)
from ..techniques.demo.transforms import matrix_shape



def _params(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _flat_grad(params, extra: torch.Tensor | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Gradients (zeros where None) and ``extra`` in one flat buffer of ``dtype`` (default: the params')."""
    parts = [p.grad.reshape(-1) if p.grad is not None else torch.zeros_like(p).reshape(-1) for p in params]
    if extra is not None:
        parts.append(extra.reshape(-1).to(dtype or parts[0].dtype))
    return torch.cat(parts)


def _adamw(params, spec: dict) -> torch.optim.AdamW:
    o = spec.get("adamw", {})
    return torch.optim.AdamW(params, lr=float(spec["lr"]), betas=tuple(o.get("betas", (0.9, 0.95))),
                             eps=float(o.get("eps", 1e-8)), weight_decay=float(o.get("weight_decay", 0.0)))


class Method:
    collectives_per_step = 1

    def __init__(self, model: nn.Module, n_local: int, spec: dict, comm) -> None:
        self.model, self.n_local, self.spec, self.comm = model, n_local, spec, comm
        self.losses: list[torch.Tensor] = [torch.zeros(()) for _ in range(n_local)]

    def model_for(self, w: int) -> nn.Module:
        return self.model

    def eval_model(self) -> nn.Module:
        return self.model

    def after_backward(self, w: int, loss: torch.Tensor) -> None:
        raise NotImplementedError

    def update(self, step: int) -> float:
        """Communicate and update; returns the step's mean loss over all workers."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError


class AdamWDDP(Method):
    def __init__(self, model, n_local, spec, comm):
        super().__init__(model, n_local, spec, comm)
        self.params = _params(model)
        self.opt = _adamw(self.params, spec)
        self.grads: list[torch.Tensor | None] = [None] * n_local

    def after_backward(self, w, loss):
        self.grads[w] = _flat_grad(self.params, loss.detach())

    def update(self, step):
        g = self.comm.all_reduce_mean(self.grads)
        i = 0
        for p in self.params:
            p.grad = g[i:i + p.numel()].view_as(p).clone()
            i += p.numel()
        self.opt.step()
        self.grads = [None] * self.n_local
        return float(g[-1])

    def payload_nbytes(self) -> int:
        return (sum(p.numel() for p in self.params) + 1) * self.params[0].element_size()

    def state_dict(self):
        return {"opt": self.opt.state_dict()}

    def load_state_dict(self, state):
        self.opt.load_state_dict(state["opt"])


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
        self.opts = [DeMo(_params(model), **kw) for _ in range(n_local)]
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


class PowerSGD(Method):
    collectives_per_step = 2

    def __init__(self, model, n_local, spec, comm):
        super().__init__(model, n_local, spec, comm)
        self.rank = int(spec.get("powersgd", {}).get("rank", 4))
        self.params = _params(model)
        self.opt = _adamw(self.params, spec)
        self.mat, self.vec = [], []
        for p in self.params:
            m, n = matrix_shape(p.shape)
            (self.mat if p.dim() >= 2 and (m + n) * self.rank < m * n else self.vec).append(p)
        g = torch.Generator().manual_seed(int(spec["seed"]))  # same Q on every worker
        self.Q = [torch.randn(matrix_shape(p.shape)[1], self.rank, generator=g, dtype=p.dtype).to(p.device)
                  for p in self.mat]
        self.err = [[torch.zeros(matrix_shape(p.shape), dtype=p.dtype, device=p.device) for p in self.mat]
                    for _ in range(n_local)]
        self.M: list = [None] * n_local
        self.vgrads: list = [None] * n_local

    def after_backward(self, w, loss):
        self.M[w] = [p.grad.reshape(e.shape) + e for p, e in zip(self.mat, self.err[w])]
        self.vgrads[w] = _flat_grad(self.vec, loss.detach(), self.params[0].dtype)

    @staticmethod
    def _orthonormalize(P: torch.Tensor) -> torch.Tensor:
        return torch.linalg.qr(P, mode="reduced").Q

    def update(self, step):
        first = [torch.cat([(M @ Q).reshape(-1) for M, Q in zip(Ms, self.Q)] + [v])
                 for Ms, v in zip(self.M, self.vgrads)]
        red = self.comm.all_reduce_mean(first)
        Ps, i = [], 0
        for M0 in self.M[0]:
            n = M0.shape[0] * self.rank
            Ps.append(self._orthonormalize(red[i:i + n].view(M0.shape[0], self.rank)))
            i += n
        vmean = red[i:]
        if self.mat:
            second = [torch.cat([(M.T @ P).reshape(-1) for M, P in zip(Ms, Ps)]) for Ms in self.M]
            qred = self.comm.all_reduce_mean(second)
            j = 0
            for k, p in enumerate(self.mat):
                n = matrix_shape(p.shape)[1] * self.rank
                self.Q[k] = qred[j:j + n].view(-1, self.rank).clone()
                j += n
            for k, p in enumerate(self.mat):
                approx = Ps[k] @ self.Q[k].T
                for w in range(self.n_local):
                    self.err[w][k] = self.M[w][k] - approx
                p.grad = approx.reshape(p.shape).clone()
        j = 0
        for p in self.vec:
            p.grad = vmean[j:j + p.numel()].view_as(p).clone()
            j += p.numel()
        self.opt.step()
        return float(vmean[-1])

    def payload_nbytes(self) -> int:
        es = self.params[0].element_size()
        first = sum(matrix_shape(p.shape)[0] for p in self.mat) * self.rank + sum(p.numel() for p in self.vec) + 1
        return (first + sum(matrix_shape(p.shape)[1] for p in self.mat) * self.rank) * es

    def state_dict(self):
        return {"opt": self.opt.state_dict(), "Q": self.Q, "err": self.err}

    def load_state_dict(self, state):
        self.opt.load_state_dict(state["opt"])
        self.Q = [q.clone() for q in state["Q"]]
        self.err = [[e.clone() for e in es] for es in state["err"]]


class DiLoCo(Method):
    def __init__(self, model, n_local, spec, comm):
        super().__init__(model, n_local, spec, comm)
        d = spec.get("diloco", {})
        self.H = int(d.get("H", 10))
        self.workers = [copy.deepcopy(model) for _ in range(n_local)]
        self.inner = [_adamw(_params(m), spec) for m in self.workers]
        self.global_params = _params(model)
        self.outer = torch.optim.SGD(self.global_params, lr=float(d.get("outer_lr", 0.7)),
                                     momentum=float(d.get("outer_momentum", 0.9)), nesterov=True)

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
                             zip(self.global_params, _params(m))] + [self.losses[w].reshape(1).to(dtype)])
                  for w, m in enumerate(self.workers)]
        mean = self.comm.all_reduce_mean(deltas)
        i = 0
        for g in self.global_params:
            g.grad = mean[i:i + g.numel()].view_as(g).clone()
            i += g.numel()
        self.outer.step()
        with torch.no_grad():
            for m in self.workers:
                for g, p in zip(self.global_params, _params(m)):
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


def make_method(model: nn.Module, n_local: int, spec: dict, comm) -> Method:
    cls = {"adamw": AdamWDDP, "demo": DeMoMethod, "demo-compact": DeMoMethod, "demo-allmean": DeMoMethod,
           "powersgd": PowerSGD,
           "diloco": DiLoCo}[spec["method"]]
    return cls(model, n_local, spec, comm)
