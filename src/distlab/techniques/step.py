"""Every data-parallel technique behind one step interface, written once for both drivers.

A technique sees ``n`` workers of which ``local`` run in this process (all of
them on the simulated driver, one rank on gloo).  Per step:

* :meth:`Technique.compute` — worker ``w`` (local index ``i``) does its
  forward/backward passes on the step's data and prepares its message;
  returns the number of passes (its FLOPs are ``passes * flops_per_pass``);
* :meth:`Technique.update` — communicate through the comm and update, given
  ``received`` (the workers whose messages the master uses, master kind only).

The message pattern of the step (collectives and their bytes for sync kinds;
message and broadcast bytes and ``wait_for`` for master kinds) is what the
comm recorded plus :meth:`Technique.master_pattern`.

Data: worker ``w`` of a sync technique draws ``text_batch(seed, w, step)``;
partition ``j`` of a coded technique draws ``text_batch(seed, j, step)``, so
DDP and every code see the same windows (partition ``j`` is worker ``j``'s data).

The sync techniques wrap the methods of :mod:`distlab.techniques.method` unchanged
(AdamW-DDP, DeMo, DiLoCo, PowerSGD); the codes (GC, PGC, IS-SGD, IS-GC) take placement,
encoding and decoding from :mod:`distlab.techniques.gradient_codes`, keep each worker's
gradients in a :class:`~distlab.techniques.coded_worker.CodedWorker` and feed AdamW; the two
combinations (DiLoCo-DeMo, IS-DeMo) are :mod:`distlab.techniques.combinations`.  The atlas
(:mod:`distlab.atlas.train`) drives them on its simulated and gloo backends.
"""

from __future__ import annotations

import time

import torch

from ..data import text_batch
from ..models import lm_loss
from . import batched
from .catalogue import kind
from .coded_worker import CodedWorker
from .gradient_codes import make_scheme
from .method import adamw, flat_grad, trainable_params
from .methods import make_method
from .options import defaults, value


def _demo_spec(spec: dict, method: str) -> dict:
    """The method spec of a wrapped technique: the atlas sets DeMo's compression only, AdamW's
    and DeMo's other options keep their defaults."""
    demo = {**defaults("demo"), **{k: value(spec, "demo", k) for k in ("topk", "chunk", "decay")}}
    return {"method": method, "lr": spec["lr"], "seed": spec["seed"], "adamw": defaults("adamw"), "demo": demo,
            "diloco": spec.get("diloco", {}), "powersgd": spec.get("powersgd", {})}


class Technique:
    """Base: the data, the passes and the loss bookkeeping every technique shares."""

    def __init__(self, name, model, n, local, spec, comm, train, block, bs, device):
        self.name, self.model, self.n, self.local, self.spec, self.comm = name, model, n, list(local), spec, comm
        self.train, self.block, self.bs, self.device = train, block, bs, device
        self.seed = int(spec["seed"])
        self.kind = kind(name)
        self._param_cache: dict[int, list] = {}

    def grads_to_none(self, model) -> None:
        """``model.zero_grad(set_to_none=True)`` without walking the modules every pass
        (the parameter lists are cached per model)."""
        params = self._param_cache.get(id(model))
        if params is None:
            params = self._param_cache[id(model)] = list(model.parameters())
        for p in params:
            p.grad = None

    def batch(self, stream: int, step: int):
        x, y = text_batch(self.train, self.block, self.bs, self.seed, stream, step)
        return x.to(self.device), y.to(self.device)

    def eval_model(self):
        return self.model

    def master_pattern(self) -> dict:
        return {}

    def compute_all(self, step: int) -> list[int] | None:
        """Every local worker's :meth:`compute` at ``step`` as one batched computation
        (:mod:`distlab.techniques.batched`): the passes of each, or None (nothing done) where the
        technique's workers cannot be batched; the driver then runs :meth:`compute` per worker."""
        return None


class Wrapped(Technique):
    """A :class:`distlab.techniques.method.Method` (sync kind), unchanged: ``method`` is its name
    (the technique's spec gives it)."""

    def __init__(self, name, model, n, local, spec, comm, *a, method: str):
        super().__init__(name, model, n, local, spec, comm, *a)
        self.method = make_method(model, len(self.local), _demo_spec(spec, method), comm)

    def compute(self, i, w, step):
        m = self.method.model_for(i)
        x, y = self.batch(w, step)
        self.grads_to_none(m)
        loss = lm_loss(m(x), y)
        loss.backward()
        self.method.after_backward(i, loss.detach())
        return 1

    def compute_all(self, step):
        if not batched.method_step(self.method, len(self.local), lambda i: self.batch(self.local[i], step)):
            return None
        return [1] * len(self.local)

    def update(self, step, received=None):
        return self.method.update(step)

    def eval_model(self):
        return self.method.eval_model()


class Coded(Technique):
    """Gradient codes (GC, PGC, IS-SGD, IS-GC): master kind, AdamW on the decoded gradient."""

    def __init__(self, name, model, n, local, spec, comm, *a, scheme: str):
        super().__init__(name, model, n, local, spec, comm, *a)
        self.scheme = make_scheme(scheme, n, int(spec.get("s", 1)), seed=self.seed)
        self.params = trainable_params(model)
        self.opt = adamw(self.params, _demo_spec(spec, "adamw"))
        self.P = sum(p.numel() for p in self.params)
        self.workers = {w: CodedWorker(self.scheme, w) for w in self.local}  # each one's latest gradients
        self.msgs: dict[int, torch.Tensor] = {}

    def compute(self, i, w, step):
        cw = self.workers[w]
        parts = self.scheme.partitions_to_compute(w, step)
        for j in parts:
            x, y = self.batch(j, step)
            self.grads_to_none(self.model)
            loss = lm_loss(self.model(x), y)
            loss.backward()
            cw.update(j, flat_grad(self.params).detach().clone(), float(loss.detach()), step)
        self._send(w)
        return len(parts)

    def compute_all(self, step):
        """Every partition some local worker computes at ``step``, once, in one batch (every
        worker computes at the master's current model, so a partition two workers hold has one
        gradient); each worker then keeps and encodes its own, as :meth:`compute` does.  The
        passes are still each worker's own count (the clock charges them)."""
        if not batched.stackable([self.model]):
            return None
        parts = {w: self.scheme.partitions_to_compute(w, step) for w in self.local}
        uniq = sorted({j for ps in parts.values() for j in ps})
        data = [self.batch(j, step) for j in uniq]
        losses, grads = batched.worker_grads([self.model] * len(uniq), torch.stack([x for x, _ in data]),
                                             torch.stack([y for _, y in data]))
        flat = torch.cat([g.reshape(len(uniq), -1) for g in grads], 1)
        row, lv = {j: k for k, j in enumerate(uniq)}, losses.tolist()
        for w in self.local:
            for j in parts[w]:
                self.workers[w].update(j, flat[row[j]].clone(), lv[row[j]], step)
            self._send(w)
        return [len(parts[w]) for w in self.local]

    def _send(self, w):
        """Worker ``w``'s message: its encoded combination and the mean loss of its fresh partitions."""
        cw = self.workers[w]
        msg = cw.message()
        lt = torch.tensor([cw.pop_fresh_loss()], dtype=msg.dtype, device=msg.device)
        self.msgs[w] = torch.cat([msg, lt])

    def update(self, step, received):
        allm = self.comm.gather([self.msgs[w] for w in self.local])  # (n, P + 1): every worker's message
        weights = self.scheme.decode_weights(list(received))
        g = sum(wk * allm[k, :-1] for k, wk in weights.items() if wk != 0.0)
        i = 0
        for p in self.params:
            p.grad = g[i:i + p.numel()].view_as(p).clone()
            i += p.numel()
        self.opt.step()
        self.msgs = {}
        return float(allm[list(received), -1].mean())

    def master_pattern(self):
        nb = (self.P + 1) * self.params[0].element_size()
        return {"msg_bytes": nb, "bcast_bytes": self.P * self.params[0].element_size(),
                "wait_for": self.scheme.wait_for}


def flops_per_pass(model: torch.nn.Module, tokens: int) -> float:
    """Forward + backward FLOPs of one pass: 6 per parameter per token (the usual estimate)."""
    return 6.0 * sum(p.numel() for p in model.parameters()) * tokens


def timed(fn, *a):
    t0 = time.perf_counter()
    r = fn(*a)
    return r, time.perf_counter() - t0
