"""The synchronous data-parallel techniques as *methods*, one contract for both backends.

A method sees ``n_local`` workers: all N on the simulated cluster (one
process), one (its own rank) on the real backend.  Every worker computes its
gradient (``after_backward``); then ``update`` communicates through a
comm (:class:`~distlab.techniques.comm.SimComm` or :class:`~distlab.techniques.comm.DistComm`)
and changes the parameters.  The comm of the simulated backend gathers and
averages in memory and charges the collective to the network model and the
ledger; the real one calls torch.distributed and charges the same ledger rule.

* ``adamw`` — :mod:`.ddp`, AdamW on the mean gradient: one flattened all-reduce a step.
* ``demo`` / ``demo-compact`` — :mod:`.demo.method`, :class:`distlab.techniques.DeMo`,
  reference or compact payload: one all-gather a step.
* ``demo-allmean`` — the ablation: DeMo with the plain mean over all N
  workers at each index (``mean="all"``, Algorithm 1's "synchronize" read
  literally) instead of the reference's mean over the workers that sent it.
* ``powersgd`` — :mod:`.powersgd`, rank-r PowerSGD with error feedback (Vogels et al., 2019)
  feeding AdamW: matrices (the documented reshape) travel as ``P = M Q`` and
  ``Q = M^T P`` (two all-reduces a step), vectors and the rest dense in the
  first one.
* ``diloco`` — :mod:`.diloco`, DiLoCo (Douillard et al., 2023): H local AdamW steps, then the
  mean of the workers' parameter deltas is the gradient of an outer Nesterov
  SGD step; one all-reduce every H steps.

Parameters stay identical on all workers for adamw, demo and powersgd (the
update is a deterministic function of what was communicated), so the
simulated backend keeps one copy of the model and N copies of the per-worker
state (DeMo's momentum, PowerSGD's error); DiLoCo's workers drift between
syncs, so it keeps N models.  The loss of the step travels with the step's
collective (4 bytes, or one element), as on the real backend.

This module holds the contract (:class:`Method`) and the helpers every method shares;
:func:`distlab.techniques.methods.make_method` builds a method by its name
(``spec["method"]``).  The DeMo paper (:mod:`distlab.demo`) and the atlas use them;
neither defines a method of its own.
"""

from __future__ import annotations

import torch
from torch import nn

from .options import value


def trainable_params(model: nn.Module) -> list[nn.Parameter]:
    """The parameters a method updates (those that require a gradient), in model order."""
    return [p for p in model.parameters() if p.requires_grad]


def flat_grad(params, extra: torch.Tensor | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Gradients (zeros where None) and ``extra`` in one flat buffer of ``dtype`` (default: the params')."""
    parts = [p.grad.reshape(-1) if p.grad is not None else torch.zeros_like(p).reshape(-1) for p in params]
    if extra is not None:
        parts.append(extra.reshape(-1).to(dtype or parts[0].dtype))
    return torch.cat(parts)


def adamw(params, spec: dict) -> torch.optim.AdamW:
    """AdamW at ``spec["lr"]`` with the spec's ``adamw`` options (betas, eps, weight decay)."""
    return torch.optim.AdamW(params, lr=float(spec["lr"]), betas=tuple(value(spec, "adamw", "betas")),
                             eps=float(value(spec, "adamw", "eps")), weight_decay=float(value(spec, "adamw", "weight_decay")),
                             fused=True)


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
