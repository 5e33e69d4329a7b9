"""The corrected learner that keeps learning (``advantage: steady`` with an exploration floor)
against the episode-normalised one, on a crafted two-cluster problem whose policy starts
collapsed onto the wrong device."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distlab.placement import hsdag, sim
from distlab.placement.problem import Problem


def _two_clusters(budget: int) -> Problem:
    """input -> 1 -> 2 -> 3 -> 4, clusters {0, 1, 2} and {3, 4}; every operator costs 3 s on
    device 0 and 1 s on device 1 (serial timing, transfers 0.05 s): both clusters on device 1
    take 4.1 s, everything on device 0 12 s."""
    n, edges = 5, [(0, 1), (1, 2), (2, 3), (3, 4)]
    comp = np.array([[0.0, 0.0]] + [[3.0, 1.0]] * 4)
    pinned = np.zeros(n, bool)
    pinned[0] = True
    s = sim.Simulator(n, edges, comp, np.full(n, 0.05), pinned, order="serial")
    nodes = [{"op": "input" if i == 0 else "conv2d", "name": f"n{i}", "shape": [1, 4], "out_bytes": 16,
              "in_bytes": 16, "flops": 1, "param_bytes": 0} for i in range(n)]
    return Problem({"n_nodes": n, "edges": edges, "nodes": nodes}, s, np.array([0, 0, 0, 1, 1]),
                   [(0, 1)], 2, "allow", budget)


class _Collapsed(hsdag.HSDAGNet):
    """The policy starts collapsed onto device 0: P(device 1) = 6e-6 for every cluster."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        with torch.no_grad():
            self.policy[-1].weight.zero_()
            self.policy[-1].bias.copy_(torch.tensor([6.0, -6.0]))


BASE = {"samples": 10, "lr": 0.01, "hidden": 32, "gcn_layers": 2, "max_levels": 0, "pooling": False,
        "state_update": True, "final_greedy": True}


@pytest.fixture
def collapsed(monkeypatch):
    torch.set_num_threads(1)
    monkeypatch.setattr(hsdag, "HSDAGNet", _Collapsed)


def test_normalised_learner_freezes_at_collapse(collapsed):
    p = _two_clusters(200)
    info = hsdag.train(p, dict(BASE, advantage="normalised"), 0)
    assert max(info["mean_abs_advantage"]) == 0.0      # every sample alike: no gradient, ever
    assert info["final_greedy_s"] == pytest.approx(12.0)


@pytest.mark.parametrize("seed", [0, 1])
def test_steady_learner_keeps_learning_and_leaves_a_bad_collapse(collapsed, seed):
    p = _two_clusters(300)
    info = hsdag.train(p, dict(BASE, advantage="steady", explore=0.2), seed)
    adv = np.asarray(info["mean_abs_advantage"])
    assert adv.size == 30 and np.all(adv > 0)           # no episode without a learning signal
    assert info["final_greedy_s"] == pytest.approx(4.1)  # its final policy left device 0
    assert p.history[-1] == pytest.approx(4.1)           # the reserved last evaluation is that policy


def test_steady_advantages_do_not_vanish_on_identical_rewards():
    """A collapsed episode (every reward equal) after a better one: the moving baseline still
    sees a difference, where the episode-normalised advantage is 0."""
    lp = torch.zeros(4, requires_grad=True)
    state: dict = {}
    hsdag.loss_of(lp, [1.0, 0.5, 1.0, 0.5], {"advantage": "steady"}, state)
    hsdag.loss_of(lp, [0.4] * 4, {"advantage": "steady"}, state)
    assert all(a < 0 for a in state["advantages"])
    norm: dict = {}
    hsdag.loss_of(lp, [0.4] * 4, {"advantage": "normalised"}, norm)
    assert norm["advantages"] == [0.0] * 4


def test_explore_must_be_a_fraction():
    with pytest.raises(ValueError, match="explore"):
        hsdag.train(_two_clusters(20), dict(BASE, advantage="steady", explore=1.5), 0)
