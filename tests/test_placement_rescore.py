"""The placers' learners sample without autograd and score the sampled placements in one
batched pass: the same placements for a fixed seed, the same log-probabilities and gradients
as scoring them step by step while sampling."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distlab.placement import hsdag, hsdag_dense, learned
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


def _random_dag(n=40, seed=0, budget=60):
    """A random DAG (each operator reads one to three earlier ones, some none), operators of
    four kinds with device-dependent costs: coarse groups of several sizes, isolated groups."""
    from distlab.placement import coarsen, sim
    from distlab.placement.problem import Problem

    rng = np.random.default_rng(seed)
    edges = sorted({(int(u), v) for v in range(1, n) if rng.random() > 0.1
                    for u in rng.choice(v, size=min(v, int(rng.integers(1, 4))), replace=False)})
    comp = rng.uniform(0.5, 3.0, (n, 2))
    pinned = np.zeros(n, bool)
    pinned[0] = True
    s = sim.Simulator(n, edges, comp, np.full(n, 0.05), pinned, order="rank")
    kinds = ["conv2d", "relu", "add", "linear"]
    nodes = [{"op": "input" if i == 0 else kinds[i % 4], "name": f"n{i}", "shape": [1, 4 + i % 3],
              "out_bytes": 16, "in_bytes": 16, "flops": 1, "param_bytes": 8 * (i % 4 == 0)} for i in range(n)]
    graph = {"n_nodes": n, "edges": edges, "nodes": nodes}
    group = coarsen.coarsen(n, edges, coarsen.weighted_nodes(graph))
    return Problem(graph, s, group, coarsen.coarse_edges(group, edges), 2, "allow", budget)


CONFIGS = [{"max_levels": 1}, {"max_levels": None}, {"max_levels": 3, "self_loops": False},
           {"max_levels": 0, "pooling": False}]


@pytest.mark.parametrize("kw", CONFIGS)
@pytest.mark.parametrize("build", [lambda: _alternating(n=24), lambda: _random_dag(seed=1)])
def test_sparse_hsdag_samples_and_scores_as_the_dense_reference(build, kw):
    """The sparse implementation against the dense one (``hsdag_dense``), the same parameters:
    the same clusters, parsing and placements for a seed; log-probabilities and their gradients
    within 1e-5 (on the machines measured they are bit-identical)."""
    from distlab.placement.hsdag_dense import DenseHSDAGNet

    torch.manual_seed(0)
    p = build()
    x = torch.from_numpy(coarse_features(p.graph, p.group, p.cedges))
    adj, graph = hsdag._dense_adj(p.n_groups, p.cedges), hsdag.Graph(p.n_groups, p.cedges, kw.get("self_loops", True))
    new = hsdag.HSDAGNet(x.shape[1], 2, hidden=16, **kw)
    ref = DenseHSDAGNet(x.shape[1], 2, hidden=16, **kw)
    ref.load_state_dict(new.state_dict())
    runs = {}
    for name, net, g in (("new", new, graph), ("ref", ref, adj)):
        torch.manual_seed(3)
        xs, parsings, acts, xx = [], [], [], x
        with torch.no_grad():
            for _ in range(6):
                logits, assign, emb = net(xx, g)
                xs.append(xx)
                parsings.append(net.parsing)
                acts.append(hsdag._draw(logits, 0.1))
                xx = xx + emb[torch.from_numpy(assign)]
        lp = net.log_prob(torch.stack(xs), g, parsings, acts, 0.1)
        runs[name] = (acts, parsings, lp, torch.autograd.grad(lp.sum(), list(net.parameters()), allow_unused=True))
    (a_new, p_new, lp_new, g_new), (a_ref, p_ref, lp_ref, g_ref) = runs["new"], runs["ref"]
    assert all(torch.equal(u, v) for u, v in zip(a_new, a_ref))
    for u, v in zip(p_new, p_ref):
        assert u["broke"] == v["broke"] and len(u["levels"]) == len(v["levels"])
        for lu, lv in zip(u["levels"], v["levels"]):
            assert all(np.array_equal(np.asarray(lu[k]), np.asarray(lv[k])) for k in ("label", "dom", "alone"))
    if kw.get("pooling", True):
        assert any(pa["levels"] for pa in p_new)
    assert torch.allclose(lp_new, lp_ref, atol=1e-5, rtol=0)
    for u, v in zip(g_new, g_ref):
        assert (u is None) == (v is None)
        if u is not None:
            assert torch.allclose(u, v, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("opts", [
    {"advantage": "none", "max_levels": 1, "samples": 8},
    {"advantage": "steady", "explore": 0.05, "max_levels": 1, "final_greedy": True},
    {"advantage": "normalised", "max_levels": 1, "partition": "operators"},
    {"advantage": "steady", "explore": 0.05, "max_levels": None},
])
def test_hsdag_learner_evaluates_what_the_dense_reference_does(opts):
    """A short run of each variant (as released, corrected, fine) from one seed: the same
    latencies in the same order, so the same best, as the dense reference's run."""
    torch.set_num_threads(1)
    opts = {"samples": 6, "hidden": 16, "lr": 0.01, **opts}
    p = _random_dag(seed=2, budget=37)
    if opts.get("partition") == "operators":
        p.group = np.arange(p.graph["n_nodes"])
        p.cedges = [tuple(e) for e in p.graph["edges"]]
    new = hsdag.train(p, opts, 4)
    fast, best = list(p.history), p.best
    p.reset()
    ref = hsdag_dense.train(p, opts, 4)
    assert fast == p.history and best == p.best
    assert new["assign_last"] == ref["assign_last"] and new.get("final_greedy_s") == ref.get("final_greedy_s")


def test_dominant_edges_are_the_dense_row_argmax():
    """Ties (scores drawn from a few values) go to the lowest neighbour, as the dense argmax;
    a node without a scored pair (no self-loops, no neighbour) stays alone."""
    rng = np.random.default_rng(0)
    for self_loops in (True, False):
        for _ in range(30):
            n = int(rng.integers(1, 30))
            edges = rng.integers(0, n, (int(rng.integers(0, 2 * n)), 2))
            g = hsdag.Graph(n, edges, self_loops)
            score = torch.from_numpy(rng.choice([0.2, 0.5, 0.9], len(g.su)).astype(np.float32))
            dense = torch.full((n, n), -1.0)
            dense[g.su, g.sv] = score
            dense[g.sv, g.su] = score
            dom, alone, pick = g.dominant(score)
            ref_alone = (dense.max(dim=1).values < 0).numpy() if n else np.zeros(0, bool)
            ref_dom = np.where(ref_alone, np.arange(n), dense.argmax(dim=1).numpy())
            assert np.array_equal(alone, ref_alone) and np.array_equal(dom, ref_dom)
            on = ~alone
            assert (pick[alone] == -1).all()
            assert np.array_equal(score.numpy()[pick[on]], dense[np.flatnonzero(on), dom[on]].numpy())


def test_dominant_components_match_the_general_clustering():
    """Clusters of one edge per node (``i -> dom[i]``), by pointer doubling: the labels of the
    general union-find, on random maps and on maps like dominant edges (mutual pairs, self-loops)."""
    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 9, 64, 200):
        for _ in range(40):
            dom = rng.integers(0, n, n)
            if rng.random() < 0.5:
                dom = np.where(rng.random(n) < 0.3, np.arange(n), dom)
            ref = hsdag._components(n, np.stack([np.arange(n), dom], 1))
            assert hsdag._dominant_components(dom).tolist() == ref.tolist()
