"""DDP: AdamW on the all-reduced mean gradient (one flattened all-reduce a step, the
step's loss travelling as its last element)."""

from __future__ import annotations

from .method import Method, adamw, flat_grad, trainable_params


class AdamWDDP(Method):
    def __init__(self, model, n_local, spec, comm):
        super().__init__(model, n_local, spec, comm)
        self.params = trainable_params(model)
        self.opt = adamw(self.params, spec)
        self.grads: list[torch.Tensor | None] = [None] * n_local

    def after_backward(self, w, loss):
        self.grads[w] = flat_grad(self.params, loss.detach())

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
