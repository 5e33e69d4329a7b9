"""Predictive coding: its weight gradients equal backprop's in the limits where that is
provable, and not outside them; bad settings are refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from distlab.local import pc
from distlab.local.model import build_gpt, lm_loss, split_gpt


class Tanh(nn.Module):
    def __init__(self, i: int, o: int) -> None:
        super().__init__()
        self.lin = nn.Linear(i, o)

    def forward(self, x):
        return torch.tanh(self.lin(x))


def mlp_problem(seed=0):
    torch.manual_seed(seed)
    layers = nn.ModuleList([Tanh(5, 8), Tanh(8, 8), Tanh(8, 8), Tanh(8, 6)]).double()
    readout = nn.Linear(6, 3).double()
    x = torch.randn(16, 5, dtype=torch.float64)
    y = torch.randint(0, 3, (16,))

    def loss(h):
        return nn.functional.cross_entropy(readout(h), y, reduction="sum")

    params = list(layers.parameters()) + list(readout.parameters())
    h = x
    for layer in layers:
        h = layer(h)
    g_bp = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss(h), params)])
    return layers, readout, x, loss, params, g_bp


def pc_grad(params):
    return torch.cat([p.grad.reshape(-1) for p in params])


def rel(a, b):
    return float((a - b).norm() / b.norm())


def test_fixed_prediction_equals_bp_at_convergence():
    """Fixed prediction relaxes the errors to exactly BP's dL/dx_l (a triangular linear
    system); with a small step and many iterations the gradients agree to 1e-9 (float64)."""
    layers, readout, x, loss, params, g_bp = mlp_problem()
    pc.pc_gradients(list(layers), loss, readout, x, "fixed", T=300, eta=0.1)
    assert rel(pc_grad(params), g_bp) < 1e-9


def test_fixed_prediction_with_unit_step_is_exact_after_depth_iterations():
    layers, readout, x, loss, params, g_bp = mlp_problem(1)
    L = len(layers) - 1
    pc.pc_gradients(list(layers), loss, readout, x, "fixed", T=L + 1, eta=1.0)
    assert rel(pc_grad(params), g_bp) < 1e-12
    # one iteration short, the bottom layer has no error yet: its gradient is zero
    pc.pc_gradients(list(layers), loss, readout, x, "fixed", T=L, eta=1.0)
    assert float(layers[0].lin.weight.grad.abs().max()) == 0.0


@pytest.mark.parametrize("beta,tol", [(1e-3, 5e-3), (1e-4, 5e-4)])
def test_strict_pc_tends_to_bp_as_the_nudge_vanishes(beta, tol):
    """Strict PC (predictions and Jacobians at the current beliefs) matches BP only in the
    weak-nudge limit (Whittington & Bogacz 2017): with eta = 0.1 and 2000 iterations (the
    relaxation has converged) the relative error is O(beta); tolerance 5 beta."""
    layers, readout, x, loss, params, g_bp = mlp_problem()
    pc.pc_gradients(list(layers), loss, readout, x, "strict", T=2000, eta=0.1, beta=beta)
    assert rel(pc_grad(params), g_bp) < tol


def test_strict_pc_with_a_full_nudge_is_not_bp():
    layers, readout, x, loss, params, g_bp = mlp_problem()
    pc.pc_gradients(list(layers), loss, readout, x, "strict", T=2000, eta=0.1, beta=1.0)
    assert rel(pc_grad(params), g_bp) > 0.05


def gpt_problem():
    """A 3-block GPT as PC's chain (embedding + 3 blocks), a batch, and its parameters."""
    torch.manual_seed(0)
    m = {"name": "gpt", "n_layer": 3, "n_head": 2, "d_model": 16, "block_size": 8}
    split = split_gpt(build_gpt(m, 0), 1)
    x = torch.randint(0, 256, (2, 8))
    y = torch.randint(0, 256, (2, 8))
    layers, readout = pc.gpt_chain(split)
    return split, x, y, layers, readout, pc._params(list(layers) + [readout])


def test_gpt_chain_fixed_prediction_matches_bp():
    split, x, y, layers, readout, params = gpt_problem()
    assert len(layers) == 4  # embedding + 3 blocks
    assert len(params) == len(list(split.gpt.parameters()))
    g_bp = torch.cat([g.reshape(-1) for g in
                      torch.autograd.grad(lm_loss(split.forward(x), y, reduction="sum"), params)])
    info = pc.pc_gradients(layers, lambda h: lm_loss(readout(h), y, reduction="sum"), readout, x,
                           "fixed", T=4, eta=1.0)
    assert rel(pc_grad(params), g_bp) < 1e-5
    with torch.no_grad():
        ref = float(lm_loss(split.forward(x), y, reduction="sum"))
    assert info["loss"] == pytest.approx(ref, rel=1e-6)


@pytest.mark.parametrize("kw,msg", [
    ({"variant": "exact"}, "pc.variant"),
    ({"T": 0}, "T >= 1"),
    ({"eta": 0.0}, "eta > 0"),
    ({"beta": -1.0}, "beta > 0"),
])
def test_bad_pc_settings(kw, msg):
    layers, readout, x, loss, params, _ = mlp_problem()
    args = {"variant": "fixed", "T": 2, "eta": 0.5, "beta": 1.0, **kw}
    with pytest.raises(ValueError, match=msg):
        pc.pc_gradients(list(layers), loss, readout, x, **args)


@pytest.mark.parametrize("T,eta", [(1, 1.0), (2, 1.0), (3, 0.5), (4, 1.0), (6, 0.5)])
def test_fixed_prediction_skipping_the_zero_errors_gives_the_same_bits(T, eta):
    """skip_zero leaves out the products with errors that are still zero (the readout's error
    moves down one layer an iteration): every gradient and error norm is bit for bit the full
    computation's, truncated (T <= L) or exact (T >= L + 1)."""
    _, x, y, layers, readout, params = gpt_problem()
    out = []
    for skip in (False, True):
        info = pc.pc_gradients(layers, lambda h: lm_loss(readout(h), y, reduction="sum"), readout, x,
                               "fixed", T=T, eta=eta, skip_zero=skip)
        out.append((info, [None if p.grad is None else p.grad.clone() for p in params]))
    (full, g_full), (skip, g_skip) = out
    assert full == skip
    assert all((a is None and b is None) or torch.equal(a, b) for a, b in zip(g_full, g_skip))
    if T < len(layers):  # truncated: the bottom layers' gradients are exact zeros in both
        assert torch.count_nonzero(g_full[0]) == 0
