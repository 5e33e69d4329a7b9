"""HSDAG's two variants and their negative control (the same learner fed a constant reward)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distlab.placement import coarsen, hsdag, learned, sim
from distlab.placement.problem import Problem


def _alternating(n=16, budget=200):
    """A graph built so that placement matters: a chain where every operator also reads the
    one before its predecessor (so each is a co-location group of its own), operators of two
    kinds alternating, each kind 3x faster on its own device (1 s against 3 s), transfers 0.05 s.
    The best placement puts every operator on its kind's device (15 operators: about 15.8 s);
    one device for all costs about 29-31 s, and a uniformly random placement gets half wrong."""
    edges = [(i - 1, i) for i in range(1, n)] + [(i - 2, i) for i in range(2, n)]
    comp = np.zeros((n, 2))
    for i in range(1, n):
        comp[i, i % 2], comp[i, 1 - i % 2] = 1.0, 3.0
    pinned = np.zeros(n, bool)
    pinned[0] = True
    s = sim.Simulator(n, edges, comp, np.full(n, 0.05), pinned, order="rank")
    nodes = [{"op": "input" if i == 0 else ("conv2d" if i % 2 else "relu"), "name": f"n{i}",
              "shape": [1, 4], "out_bytes": 16, "in_bytes": 16, "flops": 1, "param_bytes": 0}
             for i in range(n)]
    group = coarsen.coarsen(n, edges)
    assert group.max() + 1 == n - 1          # the input and the first operator share a group
    return Problem({"n_nodes": n, "edges": edges, "nodes": nodes}, s, group,
                   coarsen.coarse_edges(group, edges), 2, "allow", budget)


CORRECTED = {"samples": 10, "lr": 0.01, "advantage": "normalised", "hidden": 32, "gcn_layers": 2,
             "max_levels": 0, "pooling": False, "state_update": True}


def _run(p, opts, seed):
    p.reset()
    hsdag.train(p, opts, seed)
    h = np.asarray(p.history)
    return p.best, float(np.median(h[-20:]))


def test_corrected_learner_beats_its_constant_reward_control():
    """Same learner, budget (200 evaluations) and seeds; the control sees the first reward
    for every sample.  Groups are placed one by one (pooling off: a cluster that merges
    neighbours of different kinds could not reach the best placement)."""
    torch.set_num_threads(1)
    p = _alternating()
    opt = min(p.sim.evaluate(np.array([[0] + [i % 2 for i in range(1, 16)]])))
    for seed in range(3):
        best, final = _run(p, CORRECTED, seed)
        c_best, c_final = _run(p, dict(CORRECTED, reward="constant"), seed)
        assert best == pytest.approx(opt)    # it finds the best placement ...
        assert best < c_best - 1.0           # ... which its control does not
        assert final < c_final - 5.0         # and its policy ends there


def test_normalised_advantages_and_the_constant_reward():
    lp = torch.zeros(3, requires_grad=True)
    loss = hsdag.loss_of(lp, [1.0, 2.0, 3.0], {"advantage": "normalised"}, {})
    loss.backward()
    sd = np.std([1.0, 2.0, 3.0])
    assert lp.grad.tolist() == pytest.approx([1 / sd / 3, 0.0, -1 / sd / 3])
    lp.grad = None
    hsdag.loss_of(lp, [0.5, 0.5, 0.5], {"advantage": "normalised"}, {}).backward()
    assert lp.grad.tolist() == [0.0, 0.0, 0.0]          # a constant reward teaches nothing
    lp.grad = None
    # as released: every sample's log-probability times one discounted return
    hsdag.loss_of(lp, [1.0, 2.0], {"advantage": "none", "discount": 0.5}, {}).backward()
    assert lp.grad.tolist() == pytest.approx([-(2.0 + 0.5 * 1.0)] * 3)
    first: list = []
    assert [hsdag._reward(x, {"reward": "constant"}, first) for x in (2.0, 4.0)] == [0.5, 0.5]


def test_controls_see_a_constant_reward_but_are_scored_truly():
    p = _alternating(budget=30)
    hsdag.train(p, dict(CORRECTED, reward="constant"), 0)
    assert len(set(p.history)) > 1 and p.best == min(p.history)
    p.reset()
    learned.rnn(p, {"samples": 10, "hidden": 8, "reward": "constant"}, 0)
    assert len(p.history) == 30 and len(set(p.history)) > 1


def test_parsing_to_fixed_point():
    """``max_levels: fixed_point`` parses until a level merges nothing: one more level never
    changes the clusters."""
    p = _alternating()
    from distlab.placement.features import coarse_features

    x = torch.from_numpy(coarse_features(p.graph, p.group, p.cedges))
    adj = hsdag._dense_adj(p.n_groups, p.cedges)
    torch.manual_seed(0)
    net = hsdag.HSDAGNet(x.shape[1], 2, hidden=16, max_levels=hsdag._levels("fixed_point"))
    logits, assign, _ = net(x, adj)
    merged = net.merged_levels
    assert merged >= 2 and logits.shape[0] < p.n_groups
    net.max_levels = merged                  # the levels that merged give the same clusters
    assert net(x, adj)[1].tolist() == assign.tolist()
    net.max_levels = merged - 1              # one level fewer leaves more clusters
    assert net(x, adj)[0].shape[0] > logits.shape[0]


def test_without_self_loops_parsing_to_fixed_point_leaves_one_cluster():
    """The released config scores no self-loop (``link_ignore_self_loop``): every node joins a
    neighbour, so parsing to the fixed point ends with one cluster on a connected graph."""
    p = _alternating()
    from distlab.placement.features import coarse_features

    x = torch.from_numpy(coarse_features(p.graph, p.group, p.cedges))
    adj = hsdag._dense_adj(p.n_groups, p.cedges)
    torch.manual_seed(0)
    released = hsdag.HSDAGNet(x.shape[1], 2, hidden=16, max_levels=None, self_loops=False)
    logits, assign, _ = released(x, adj)
    assert logits.shape[0] == 1 and set(assign.tolist()) == {0}
    one = hsdag.HSDAGNet(x.shape[1], 2, hidden=16, max_levels=1, self_loops=False)
    assert one(x, adj)[0].shape[0] <= p.n_groups // 2      # each level at least halves the nodes


def test_a_run_is_the_same_twice_whatever_the_thread_count(tmp_path):
    """Same spec, stored profile and seeds: identical best latencies, curves and placements
    (what makes two runs of one commit give the same verdicts), even when the caller's torch
    used more threads."""
    import json

    from distlab.placement import costs, graphs
    from distlab.placement.train import run

    model = {"name": "bert", "batch": 1, "seq": 8, "layers": 1, "hidden": 16, "heads": 2, "ffn": 32, "vocab": 30}
    g = graphs.extract(model)
    graphs.save_graph(g, tmp_path / "g.json")
    (tmp_path / "p.json").write_text(json.dumps(costs.profile(model, repeats=1, warmup=0)))
    pair = {"devices": [{"name": "cpu", "kind": "profiled"},
                        {"name": "gpu", "kind": "roofline", "peak_gflops": 1, "mem_gbps": 1, "launch_us": 10}],
            "link": {"gbps": 1, "latency_us": 10}}
    spec = {"method": "hsdag_corrected", "algo": "hsdag", "options": dict(CORRECTED, max_levels=1, pooling=True),
            "reward": "latency", "drop_features": [], "pair_name": "p", "pair": pair, "model_name": "bert",
            "model": model, "seeds": [0, 1], "budget": 20, "single_device": "allow", "sim_order": "rank"}
    rows = []
    for i, threads in enumerate((1, 2)):
        torch.set_num_threads(threads)
        res = json.loads(run(spec, tmp_path / "g.json", tmp_path / "p.json", tmp_path / f"r{i}.json").read_text())
        rows.append([{k: v for k, v in r.items() if k != "wall_s"} for r in res["rows"]])
    torch.set_num_threads(1)
    assert rows[0] == rows[1]
