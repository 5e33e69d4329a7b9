"""The placers' learners sample without autograd and score the sampled placements in one
batched pass: the same placements for a fixed seed, the same log-probabilities and gradients
as scoring them step by step while sampling."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distlab.placement import hsdag, learned
from distlab.placement.features import coarse_features

from test_placement_learn import _alternating


def _rnn_stepwise(problem, opts, seed):
    """The RNN placer's learner with the log-probabilities of the sampling pass (autograd at
    every decode step): the reference for the batched scoring."""
    torch.manual_seed(seed)
    x = torch.from_numpy(coarse_features(problem.graph, problem.group, problem.cedges))
    net = learned.RNNPlacer(x.shape[1], problem.n_devices, int(opts.get("hidden", 64)))
    optim, decay, seen = learned._learning(net, opts)
    baseline = None
    while problem.left > 0:
        acts, logp = net.sample(x, min(int(opts.get("samples", 20)), problem.left))
        lat = problem.evaluate_groups(acts.numpy())
        baseline = learned._reinforce(optim, logp, torch.from_numpy(seen(1.0 / lat)).float(), baseline, decay)


def test_rnn_log_prob_equals_the_sampling_pass_and_its_gradient():
    torch.manual_seed(0)
    p = _alternating()
    x = torch.from_numpy(coarse_features(p.graph, p.group, p.cedges))
    net = learned.RNNPlacer(x.shape[1], 2, 16)
    torch.manual_seed(1)
    acts, logp = net.sample(x, 6)
    g_ref = torch.autograd.grad(logp.sum(), list(net.parameters()))
    torch.manual_seed(1)
    with torch.no_grad():
        acts2, logp_ng = net.sample(x, 6)
    assert torch.equal(acts, acts2)
    assert not logp_ng.requires_grad
    lp = net.log_prob(x, acts)
    assert torch.allclose(lp, logp, atol=1e-5, rtol=0)
    for a, b in zip(torch.autograd.grad(lp.sum(), list(net.parameters())), g_ref):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("seed", [0, 1])
def test_rnn_learner_samples_the_same_placements(seed):
    torch.set_num_threads(1)
    opts = {"samples": 10, "hidden": 16, "lr": 0.01}
    p = _alternating(budget=60)
    learned.rnn(p, opts, seed)
    fast = list(p.history)
    p.reset()
    _rnn_stepwise(p, opts, seed)
    assert fast == p.history


def test_categorical_draws_as_torch_distributions_does():
    logits = torch.randn(7, 3, generator=torch.Generator().manual_seed(0)) * 3
    torch.manual_seed(5)
    a, lp = learned.categorical(logits)
    torch.manual_seed(5)
    d = torch.distributions.Categorical(logits=logits)
    ref = d.sample()
    assert torch.equal(a, ref)
    assert torch.equal(lp, d.log_prob(ref))


def _hsdag_inputs(p, net, samples, seed):
    """``samples`` inputs as an episode makes them (each moved by the last cluster embedding),
    with their sampled placements and the log-probabilities of the sampling pass (autograd)."""
    x = torch.from_numpy(coarse_features(p.graph, p.group, p.cedges))
    adj = hsdag._dense_adj(p.n_groups, p.cedges)
    torch.manual_seed(seed)
    xs, parsings, acts, ref = [], [], [], []
    for _ in range(samples):
        logits, assign, emb = net(x, adj)
        d = torch.distributions.Categorical(logits=logits)
        a = d.sample()
        xs.append(x)
        parsings.append(net.parsing)
        acts.append(a)
        ref.append(d.log_prob(a).sum())
        x = x + emb.detach()[torch.from_numpy(assign)]
    return torch.stack(xs), adj, parsings, acts, torch.stack(ref)


@pytest.mark.parametrize("kw", [{"max_levels": 1}, {"max_levels": None}, {"max_levels": 3, "self_loops": False},
                                {"max_levels": 0, "pooling": False}])
def test_hsdag_log_prob_equals_the_sampling_passes_and_their_gradient(kw):
    torch.manual_seed(0)
    p = _alternating(n=24)
    x0 = torch.from_numpy(coarse_features(p.graph, p.group, p.cedges))
    net = hsdag.HSDAGNet(x0.shape[1], 2, hidden=16, **kw)
    xs, adj, parsings, acts, ref = _hsdag_inputs(p, net, 6, 3)
    if kw.get("pooling", True):
        assert any(pa["levels"] for pa in parsings)   # something was merged: the pooling is replayed
    if kw.get("max_levels", 1) is None:
        assert max(len(pa["levels"]) for pa in parsings) >= 2
    params = list(net.parameters())
    g_ref = torch.autograd.grad(ref.sum(), params, allow_unused=True)
    lp = net.log_prob(xs, adj, parsings, acts)
    assert torch.allclose(lp, ref, atol=1e-4, rtol=0)
    for a, b in zip(torch.autograd.grad(lp.sum(), params, allow_unused=True), g_ref):
        assert (a is None) == (b is None) or float((a if a is not None else b).abs().max()) == 0.0
        if a is not None and b is not None:
            assert torch.allclose(a, b, atol=1e-4, rtol=1e-3)


def _hsdag_stepwise(p, opts, seed):
    """HSDAG's learner scoring each sample in its own sampling pass (autograd throughout):
    the reference for the batched scoring."""
    torch.manual_seed(seed)
    x0 = torch.from_numpy(coarse_features(p.graph, p.group, p.cedges))
    adj = hsdag._dense_adj(p.n_groups, p.cedges)
    net = hsdag.HSDAGNet(x0.shape[1], p.n_devices, hidden=opts["hidden"], max_levels=opts["max_levels"])
    optim = torch.optim.Adam(net.parameters(), lr=opts["lr"], fused=True)
    explore, state, first = opts.get("explore", 0.0), {}, []
    while p.left > 0:
        x, logps, rewards = x0.clone(), [], []
        for _ in range(min(opts["samples"], p.left)):
            logits, assign, emb = net(x, adj)
            probs = (1 - explore) * torch.softmax(logits, dim=-1) + explore / logits.shape[-1]
            cat = torch.distributions.Categorical
            d = cat(probs=probs) if explore else cat(logits=logits)
            a = d.sample()
            logps.append(d.log_prob(a).sum())
            rewards.append(hsdag._reward(float(p.evaluate_groups(a.numpy()[assign])[0]), opts, first))
            x = x + emb.detach()[torch.from_numpy(assign)]
        optim.zero_grad()
        hsdag.loss_of(torch.stack(logps), rewards, opts, state).backward()
        optim.step()


@pytest.mark.parametrize("opts", [
    {"advantage": "none", "max_levels": 1},
    {"advantage": "steady", "explore": 0.05, "max_levels": None},
])
def test_hsdag_learner_samples_the_same_placements(opts):
    torch.set_num_threads(1)
    opts = {"samples": 8, "hidden": 16, "lr": 0.01, **opts}
    p = _alternating(n=24, budget=48)
    hsdag.train(p, opts, 2)
    fast = list(p.history)
    p.reset()
    _hsdag_stepwise(p, opts, 2)
    assert fast == p.history


def test_components_match_union_find_on_random_dominant_edges():
    rng = np.random.default_rng(0)
    for n in (1, 7, 60):
        for _ in range(20):
            pairs = np.stack([np.arange(n), rng.integers(0, n, n)], 1)
            parent = list(range(n))

            def find(a):
                while parent[a] != a:
                    a = parent[a]
                return a

            for a, b in pairs.tolist():
                ra, rb = find(a), find(b)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)
            first: dict = {}
            ref = [first.setdefault(find(i), len(first)) for i in range(n)]
            assert hsdag._components(n, pairs).tolist() == ref
