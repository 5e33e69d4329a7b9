"""The N workers' forward/backward passes of a simulated step as one batched computation.

On the simulated drivers the N workers used to run one after another; at the small GPTs of the
atlas and of DeMo a pass costs mostly the fixed cost of each op, paid N times.  Here the N passes
are one: each worker's parameters are stacked into ``(N, ...)`` leaves (the same weights copied N
times where the workers share them: AdamW-DDP, DeMo, PowerSGD, the codes' partitions; each
worker's own where they drift: DiLoCo's inner steps), :func:`distlab.models.gpt_stacked_logits`
runs the N forwards as batched matmuls, and the backward of the *sum* of the per-worker losses
gives each worker's gradient on its own leaf slice (worker ``n``'s loss depends on slice ``n``
only, so the sum's gradient at slice ``n`` is worker ``n``'s gradient, nothing of the others).
The per-worker losses and gradients are the loop's up to float reordering
(tests/test_batched.py compares them at N = 1, 2, 5).

Only where the simulated clock does not read the wall clock: the atlas with a stored compute
profile, DeMo with calibrated compute.  Where a worker's compute is measured (``atlas.compute:
measured``, ``demo.compute.mode: measured``) the drivers keep the per-worker timed loop.
:data:`LOOP` switches the batched path off (the benchmark's A/B, scripts/bench_batched.py).
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch import nn

from ..models import batch_losses, gpt_batchable, gpt_stacked_logits, lm_loss

LOOP = False  # True: every driver runs the per-worker loop (the benchmark's baseline)

_PARAMS: "weakref.WeakKeyDictionary[nn.Module, list]" = weakref.WeakKeyDictionary()
_STACKABLE: dict[tuple, tuple[list, bool]] = {}  # the models' ids -> (weak references to them, the answer)


def params_of(model: nn.Module) -> list[nn.Parameter]:
    """``list(model.parameters())``, built once per model."""
    ps = _PARAMS.get(model)
    if ps is None:
        ps = _PARAMS[model] = list(model.parameters())
    return ps


def stackable(models: list[nn.Module]) -> bool:
    """Whether :func:`worker_grads` computes these workers' passes: not switched off, GPTs the
    stacked forward computes (:func:`distlab.models.gpt_batchable`), every parameter trained, all
    of one shape.  Checked once per list of models (their modules are not walked every step)."""
    if LOOP or not models:
        return False
    key = tuple(id(m) for m in models)
    got = _STACKABLE.get(key)
    if got is None or got[0] != [weakref.ref(m) for m in models]:
        ok = all(gpt_batchable(m) for m in models)
        if ok:
            shapes = [[(n, p.shape, p.dtype, p.device, p.requires_grad) for n, p in m.named_parameters()]
                      for m in models]
            ok = all(s == shapes[0] for s in shapes) and all(rg for *_, rg in shapes[0])
        got = _STACKABLE[key] = ([weakref.ref(m) for m in models], ok)
    return got[1]


def worker_grads(models: list[nn.Module], xs: torch.Tensor, ys: torch.Tensor
                 ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Worker ``n`` runs ``models[n]`` (the same object repeated where workers share weights) on
    its windows ``xs[n]`` against ``ys[n]`` (``(N, B, T)``): its loss (``lm_loss``, the mean over
    its B*T tokens) ``losses[n]`` and its gradients ``grads[k][n]``, ``k`` over ``parameters()``."""
    N = len(models)
    names = [n for n, _ in models[0].named_parameters()]
    if all(m is models[0] for m in models):
        leaves = [p.detach().unsqueeze(0).expand(N, *p.shape).clone().requires_grad_() for p in params_of(models[0])]
    else:
        per = [params_of(m) for m in models]
        leaves = [torch.stack([ps[k].detach() for ps in per]).requires_grad_() for k in range(len(names))]
    with torch.enable_grad():
        logits = gpt_stacked_logits(models[0], dict(zip(names, leaves)), xs)
        tok = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ys.reshape(-1), reduction="none")
        losses = tok.view(N, -1).mean(1)
        grads = torch.autograd.grad(losses.sum(), leaves)
    # contiguous, so that worker n's slice has its parameter's layout: a fused optimizer step reads a
    # gradient as the parameter's memory (DiLoCo's inner AdamW), and autograd may hand back a
    # transposed one (the tied embedding's)
    return losses.detach(), [g.contiguous() for g in grads]


def set_grads(model: nn.Module, grads: list[torch.Tensor], n: int) -> None:
    """Give ``model``'s parameters worker ``n``'s gradients (contiguous views of the stacked ones)."""
    for p, g in zip(params_of(model), grads):
        p.grad = g[n]


def method_step(method, n: int, batch_of) -> bool:
    """A :class:`distlab.techniques.method.Method`'s ``n`` worker passes, batched: worker ``w``
    (local index) on ``batch_of(w)`` (its windows and targets), then ``after_backward(w, its
    loss)`` in worker order with its gradients in ``.grad``, as the per-worker loop leaves them.
    False (nothing done, no batch drawn) where the workers' models are not :func:`stackable`."""
    models = [method.model_for(w) for w in range(n)]
    if not stackable(models):
        return False
    batches = [batch_of(w) for w in range(n)]
    losses, grads = worker_grads(models, torch.stack([x for x, _ in batches]), torch.stack([y for _, y in batches]))
    for w, m in enumerate(models):
        set_grads(m, grads, w)
        method.after_backward(w, losses[w])
    return True


def eval_losses(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Each validation batch's mean loss, the batches in one forward
    (:func:`distlab.models.batch_losses`); one forward a batch under :data:`LOOP`."""
    if LOOP:
        return torch.stack([lm_loss(model(x), y) for x, y in batches])
    return batch_losses(model, batches)
