"""PowerSGD (Vogels et al., 2019): rank-r compression with error feedback feeding AdamW;
matrices (the documented reshape) travel as ``P = M Q`` and ``Q = M^T P`` (two all-reduces
a step), vectors and the rest dense in the first one."""

from __future__ import annotations

import torch

from .demo.transforms import matrix_shape
from .method import Method, adamw, flat_grad, trainable_params
from .options import value


class PowerSGD(Method):
    collectives_per_step = 2

    def __init__(self, model, n_local, spec, comm):
        super().__init__(model, n_local, spec, comm)
        self.rank = int(value(spec, "powersgd", "rank"))
        self.params = trainable_params(model)
        self.opt = adamw(self.params, spec)
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
        self.vgrads[w] = flat_grad(self.vec, loss.detach(), self.params[0].dtype)

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
