"""Predictive coding (PC) for a chain of layers, and its use on the GPT.

A chain ``f_0, f_1, ..., f_L`` (``f_0`` reads the input, ``f_l`` reads the
value node ``x_{l-1}``) gets one free value node ``x_l`` per layer and the
energy

    E(x) = sum_l 1/2 ||x_l - f_l(x_{l-1})||^2  +  beta * loss(x_L),

whose prediction errors are ``eps_l = x_l - f_l(x_{l-1})``.  Inference starts
at the feed-forward values (all errors zero) and takes ``T`` steps of size
``eta`` on the value nodes; the weights then receive ``dE/dtheta / beta``,
which only uses each layer's own error and input (local).  Two variants
(names after Rosenbaum's Torch2PC, reimplemented here):

* ``strict``: gradient descent on ``E`` in the value nodes, predictions and
  Jacobians re-evaluated at the current beliefs every iteration (one forward
  and one input-gradient backward per iteration);
* ``fixed`` (fixed prediction): predictions and Jacobians stay at the
  feed-forward values; errors relax as
  ``eps_l <- eps_l - eta (eps_l - J_{l+1}^T eps_{l+1})`` and
  ``eps_L <- eps_L - eta (eps_L + beta dloss/dx_L)``.

All value nodes update at once (Jacobi: every layer acts on its neighbours'
errors of the previous iteration, the local, parallel form of PC), so with
``eta = 1`` the error needs ``L`` iterations to reach the bottom.  Limits in
which PC's weight gradients equal backprop's: ``fixed`` for every ``beta``
once the errors have converged (any ``0 < eta <= 1``, enough iterations);
``strict`` as ``beta -> 0`` (the output nudged only slightly, so the errors
stay in the linear regime; Whittington & Bogacz 2017), with ``O(beta)`` error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from .spec import PC_VARIANTS as VARIANTS  # named with the run spec


def _params(modules: Sequence[nn.Module]) -> list[nn.Parameter]:
    seen, out = set(), []
    for m in modules:
        for p in m.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def pc_gradients(layers: Sequence[nn.Module], readout_loss: Callable[[torch.Tensor], torch.Tensor],
                 readout: nn.Module, x_in: torch.Tensor, variant: str, T: int, eta: float,
                 beta: float = 1.0, skip_zero: bool = False) -> dict:
    """Set ``.grad`` of every parameter of ``layers`` and ``readout`` to PC's estimate of
    d loss / d theta (``readout_loss`` maps ``x_L`` to a scalar; it should use ``readout``).

    ``skip_zero`` (fixed prediction only): the errors start at zero and the one from the
    readout moves down one layer an iteration, so after t iterations only the top t layers'
    errors are non-zero; skip the products with the zero ones (the same bits: each layer's
    error and weight gradient depend on its own terms only; the skipped weight gradients are
    exact zeros).  Training turns it on for fixed prediction (truncated fixed prediction at
    T = 4 of 12 blocks then does about a third of the layer products: 13 + 6 + 4 against
    13 + 48 + 13 a step), so a training run's tokens/s is not PC's cost; the claim on that cost
    (``local.pc.cost``) reads :func:`distlab.local.bench.pc_cost`, which leaves it off.

    Returns ``{"loss": loss at the feed-forward state, "energy": E after inference,
    "error_norms": [||eps_l||] after inference}``.
    """
    if variant not in VARIANTS:
        raise ValueError(f"pc.variant: {variant!r} is not one of {VARIANTS}")
    if T < 1 or not eta > 0 or not beta > 0:
        raise ValueError(f"pc: need T >= 1, eta > 0, beta > 0 (got T={T}, eta={eta}, beta={beta})")
    L = len(layers) - 1
    params = _params(list(layers) + [readout])
    for p in params:
        p.grad = None
    if variant == "strict":
        return _strict(layers, readout_loss, params, x_in, L, T, eta, beta)
    return _fixed(layers, readout_loss, params, x_in, L, T, eta, beta, skip_zero)


def _strict(layers, readout_loss, params, x_in, L, T, eta, beta) -> dict:
    with torch.no_grad():
        mu0 = layers[0](x_in)
        x = [mu0]
        for l in range(1, L + 1):
            x.append(layers[l](x[-1]))
        loss0 = float(readout_loss(x[L]))
    x = [xi.clone() for xi in x]
    for _ in range(T):
        xs = [xi.detach().requires_grad_(True) for xi in x]
        energy = 0.5 * (xs[0] - mu0).pow(2).sum()
        for l in range(1, L + 1):
            energy = energy + 0.5 * (xs[l] - layers[l](xs[l - 1])).pow(2).sum()
        energy = energy + beta * readout_loss(xs[L])
        grads = torch.autograd.grad(energy, xs)
        x = [(xi - eta * g).detach() for xi, g in zip(xs, grads)]
    # weights: dE/dtheta at the relaxed beliefs, each layer from its own error and input
    eps = [x[0] - layers[0](x_in)] + [x[l] - layers[l](x[l - 1]) for l in range(1, L + 1)]
    energy = sum(0.5 * e.pow(2).sum() for e in eps) + beta * readout_loss(x[L])
    grads = torch.autograd.grad(energy, params, allow_unused=True)
    for p, g in zip(params, grads):
        p.grad = None if g is None else g / beta
    return {"loss": loss0, "energy": float(energy.detach()),
            "error_norms": [float(e.detach().norm()) for e in eps]}


def _fixed(layers, readout_loss, params, x_in, L, T, eta, beta, skip_zero=False) -> dict:
    ins = [x_in]
    mus = [layers[0](x_in)]
    for l in range(1, L + 1):
        ins.append(mus[-1].detach().requires_grad_(True))
        mus.append(layers[l](ins[-1]))
    top = mus[L].detach().requires_grad_(True)
    loss = readout_loss(top)
    top_grad = torch.autograd.grad(beta * loss, top, retain_graph=True)[0]
    eps = [torch.zeros_like(m) for m in mus]
    lo = L + 1  # eps[l] is exactly zero for l < lo (skip_zero's bookkeeping)
    for _ in range(T):
        first = max(lo, 1) if skip_zero else 1  # back[l - 1] comes from eps[l] through layer l
        back = [torch.zeros_like(e) for e in eps[:first - 1]]
        if first <= L:
            back += list(torch.autograd.grad(mus[first:], ins[first:], grad_outputs=eps[first:],
                                             retain_graph=True))
        new = [e - eta * (e - b) for e, b in zip(eps[:L], back)]
        new.append(eps[L] - eta * (eps[L] + top_grad))
        eps = new
        lo = max(lo - 1, 0)  # the readout's error has moved down one more layer
    # weights: -J_theta^T eps_l at the feed-forward values, plus the readout's own gradient
    live = [(m, e) for l, (m, e) in enumerate(zip(mus, eps)) if not skip_zero or l >= lo]
    surrogate = -sum((m * e.detach()).sum() for m, e in live) + beta * loss
    grads = torch.autograd.grad(surrogate, params, allow_unused=True)
    skipped = {id(q) for layer in layers[:lo] for q in layer.parameters()} if skip_zero else set()
    for p, g in zip(params, grads):
        if g is None and id(p) in skipped:
            g = torch.zeros_like(p)  # a skipped layer's gradient: exactly zero, as computed in full
        p.grad = None if g is None else g / beta
    loss = float(loss.detach())
    energy = 0.5 * sum(float(e.pow(2).sum()) for e in eps) + beta * loss
    return {"loss": loss, "energy": energy, "error_norms": [float(e.norm()) for e in eps]}


def gpt_chain(split) -> tuple[list[nn.Module], nn.Module]:
    """The GPT as a PC chain: the embedding, then one layer per block; and its readout."""
    layers: list[nn.Module] = [split.sections[0].embed]
    for s in split.sections:
        layers.extend(s.blocks)
    return layers, split.readout
