"""Optimizers that are not overhead: the fused AdamW where a technique's definition allows it,
and gradients cleared from a cached parameter list."""

from __future__ import annotations

import torch
from torch import nn

from distlab.demo.train import grads_to_none
from distlab.local.model import make_optimizer
from distlab.techniques.method import adamw


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))


def test_p3_and_the_techniques_use_the_fused_adamw():
    assert make_optimizer(_net().parameters(), {"lr": 1e-3}).defaults["fused"] is True
    assert adamw(list(_net().parameters()), {"lr": 1e-3}).defaults["fused"] is True
    # plain SGD keeps the single-tensor path: an update is exactly -lr * grad
    assert make_optimizer(_net().parameters(), {"lr": 1e-3, "optimizer": "sgd"}).defaults["foreach"] is False


def test_fused_adamw_steps_as_the_single_tensor_adamw_within_rounding():
    a, b = _net(), _net()
    oa = make_optimizer(a.parameters(), {"lr": 1e-2, "weight_decay": 0.1})
    ob = torch.optim.AdamW(b.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)
    for step in range(5):
        x = torch.randn(4, 5, generator=torch.Generator().manual_seed(step))
        for m, o in ((a, oa), (b, ob)):
            o.zero_grad()
            m(x).square().sum().backward()
            o.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p, q, atol=1e-6, rtol=1e-5)


def test_grads_to_none_clears_every_gradient_of_a_cached_list():
    net = _net()
    net(torch.randn(2, 5)).sum().backward()
    grads_to_none(net)
    assert all(p.grad is None for p in net.parameters())
    net(torch.randn(2, 5)).sum().backward()
    grads_to_none(net)                           # the second pass reads the cached list
    assert all(p.grad is None for p in net.parameters())
