"""Device placement (P2): coarsening, cost model, simulator with hand-computed
makespans, graph extraction, HSDAG and baselines on small problems, real
two-CPU execution, config checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distlab.placement import baselines, coarsen, costs, graphs, hsdag, learned, sim
from distlab.placement.spec import check
from distlab.placement.problem import BudgetExhausted, Problem

# ------------------------------------------------------------------ coarsening


@pytest.mark.parametrize("n, edges, want", [
    (4, [(0, 1), (1, 2), (2, 3)], [0, 0, 0, 0]),                       # a chain is one group
    (4, [(0, 1), (0, 2), (1, 3), (2, 3)], [0, 0, 0, 1]),               # the join starts a group
    (4, [(0, 2), (1, 2), (2, 3)], [0, 1, 2, 2]),                       # two inputs, a join, its tail
    (5, [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4)], [0, 0, 0, 1, 1]),
    (3, [(0, 1), (0, 1), (1, 2)], [0, 0, 0]),                          # a duplicated edge is one predecessor
    (6, [(0, 1), (1, 2), (1, 3), (2, 4), (3, 4), (0, 5), (4, 5)], [0, 0, 0, 0, 1, 2]),
])
def test_coarsening_known_answers(n, edges, want):
    assert coarsen.coarsen(n, edges).tolist() == want


def test_coarse_edges_and_bad_graph():
    g = coarsen.coarsen(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    assert coarsen.coarse_edges(g, [(0, 1), (0, 2), (1, 3), (2, 3)]) == [(0, 1)]
    with pytest.raises(ValueError, match="forward edge"):
        coarsen.coarsen(3, [(2, 1)])


# ------------------------------------------------------------------ cost model

def _node(op, flops=0, inb=0, outb=0, params=0):
    return {"name": op, "op": op, "flops": flops, "in_bytes": inb, "out_bytes": outb,
            "param_bytes": params, "shape": [1]}


def test_roofline_units():
    g = {"nodes": [_node("conv2d", flops=2e9, inb=4e8, outb=4e8, params=2e8), _node("view", 1e9, 1e9, 1e9),
                   _node("relu", flops=1e6, inb=1e6, outb=1e6)]}
    dev = {"peak_gflops": 100, "mem_gbps": 10, "launch_us": 20, "default_efficiency": 0.5,
           "efficiency": {"conv2d": 1.0}}
    t = costs.roofline(g, dev)
    assert t[0] == pytest.approx(2e9 / 100e9 + 1e9 / 10e9 + 20e-6)      # 0.02 + 0.1 + 20 µs
    assert t[1] == 0.0                                                 # views cost nothing
    assert t[2] == pytest.approx(1e6 / 50e9 + 2e6 / 10e9 + 20e-6)
    assert costs.link_seconds(1e6, {"gbps": 10, "latency_us": 15}) == pytest.approx(1e-4 + 15e-6)


@pytest.mark.parametrize("dev, key", [
    ({"peak_gflops": 0, "mem_gbps": 1}, "peak_gflops"),
    ({"peak_gflops": float("nan"), "mem_gbps": 1}, "peak_gflops"),
    ({"peak_gflops": 1, "mem_gbps": 1, "launch_us": -1}, "launch_us"),
    ({"peak_gflops": 1, "mem_gbps": 1, "efficiency": {"conv2d": 1.5}}, "efficiency.conv2d"),
])
def test_roofline_refuses_bad_spec(dev, key):
    with pytest.raises(costs.CostError, match=key):
        costs.roofline({"nodes": [_node("conv2d", 1, 1, 1)]}, dev)


def test_profiled_device_needs_profile_and_scales():
    g = {"nodes": [_node("relu")]}
    with pytest.raises(costs.CostError, match="profile"):
        costs.device_costs(g, {"kind": "profiled"}, None)
    assert costs.device_costs(g, {"kind": "profiled", "scale": 2.0}, np.array([0.5]))[0] == 1.0
    with pytest.raises(costs.CostError, match="kind"):
        costs.device_costs(g, {"kind": "tpu"}, None)


# ------------------------------------------------------------------ simulator

def _sim(n, edges, comp, xfer, pinned=None):
    return sim.Simulator(n, edges, np.array(comp, float), np.array(xfer, float),
                         None if pinned is None else np.array(pinned))


def test_single_device_chain_is_sum_of_costs():
    s = _sim(3, [(0, 1), (1, 2)], [[1, 9], [2, 9], [3, 9]], [5, 5, 5])
    assert s.evaluate(np.zeros(3, dtype=int))[0] == pytest.approx(6.0)


def test_cross_device_chain_pays_each_transfer():
    # a (dev0, 1 s) -> b (dev1, 2 s); a's output takes 0.5 s over, b's result 0.25 s back
    s = _sim(2, [(0, 1)], [[1, 1], [2, 2]], [0.5, 0.25])
    assert s.evaluate(np.array([0, 1]))[0] == pytest.approx(1 + 0.5 + 2 + 0.25)
    tr = s.trace(np.array([0, 1]))
    assert tr.transfers == [(0, 0, 1, 1.0, 1.5), (1, 1, 0, 3.5, 3.75)]


def test_transfer_waits_for_busy_link():
    # in -> a, in -> b on dev0 (1 s each); a -> c, b -> d on dev1; c, d -> e (dev1, free)
    # a and b each take 3 s over the bus of dev0: b's transfer waits until a's is done.
    comp = [[0, 0], [1, 1], [1, 1], [1, 1], [1, 1], [0, 0]]
    xfer = [0, 3, 3, 0, 0, 0.5]
    edges = [(0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 5)]
    s = _sim(6, edges, comp, xfer, pinned=[True, False, False, False, False, False])
    place = np.array([0, 0, 0, 1, 1, 1])
    tr = s.trace(place)
    # a 0-1, b 1-2; bus: a 1-4, b 4-7 (not 2-5); c 4-5, d 7-8, e 8-8; result back 8-8.5
    assert tr.start.tolist() == [0, 0, 1, 4, 7, 8]
    assert tr.transfers[:2] == [(1, 0, 1, 1.0, 4.0), (2, 0, 1, 4.0, 7.0)]
    assert tr.latency == pytest.approx(8.5)
    assert s.evaluate(place)[0] == pytest.approx(8.5)


def test_inputs_pinned_to_host_and_results_returned():
    # placing everything on dev1 still pays the input's trip out and the result's trip back
    s = _sim(2, [(0, 1)], [[0, 0], [4, 1]], [0.5, 0.25], pinned=[True, False])
    assert s.evaluate(np.array([1, 1]))[0] == pytest.approx(0.5 + 1 + 0.25)


def test_batched_and_scalar_paths_agree():
    rng = np.random.default_rng(0)
    n = 40
    edges = sorted({(int(u), int(v)) for u, v in rng.integers(0, n, (80, 2)) if u < v})
    s = _sim(n, edges, rng.random((n, 3)), rng.random(n) * 0.3,
             pinned=[i == 0 for i in range(n)])
    place = rng.integers(0, 3, (100, n))
    batched = s.evaluate(place)                                # the numpy path (batch >= 64)
    scalar = np.array([s.evaluate(p[None])[0] for p in place])  # the plain-Python path
    np.testing.assert_allclose(batched, scalar)


@pytest.mark.parametrize("place, match", [
    (np.array([0, 2]), "outside"), (np.array([0, 1, 1]), "placement must be"),
    (np.array([0.0, 1.0]), "integer"),
])
def test_bad_placements_refused(place, match):
    s = _sim(2, [(0, 1)], [[1, 1], [1, 1]], [0, 0])
    with pytest.raises(sim.PlacementError, match=match):
        s.evaluate(place)


def test_bad_costs_refused():
    with pytest.raises(sim.PlacementError, match="finite"):
        _sim(2, [(0, 1)], [[1, np.nan], [1, 1]], [0, 0])


# ------------------------------------------------------------------ graphs

TINY_BERT = {"name": "bert", "batch": 1, "seq": 8, "layers": 1, "hidden": 16, "heads": 2, "ffn": 32,
             "vocab": 30}


@pytest.fixture(scope="module")
def tiny_graph():
    return graphs.extract(TINY_BERT)


def test_graph_extraction(tiny_graph):
    g = tiny_graph
    assert g["weights_as_nodes"] is False
    graphs.validate_graph(g)
    ops = [n["op"] for n in g["nodes"]]
    assert ops.count("input") == 2 and "get_attr" not in ops
    lin = next(n for n in g["nodes"] if n["op"] == "linear" and n["shape"] == [1, 8, 32])
    assert lin["flops"] == 2 * 8 * 16 * 32                  # 2 · tokens · in · out
    assert lin["param_bytes"] == (16 * 32 + 32) * 4
    assert lin["out_bytes"] == 8 * 32 * 4
    with pytest.raises(graphs.GraphError, match="model.name"):
        graphs.build_model({"name": "vgg"})


def _tiny_problem(graph, budget=40, single="allow"):
    prof = np.array([1e-4 * (1 + (n["flops"] > 0)) for n in graph["nodes"]])
    pair = {"devices": [{"name": "cpu", "kind": "profiled"},
                        {"name": "gpu", "kind": "roofline", "peak_gflops": 1, "mem_gbps": 1,
                         "launch_us": 10}],
            "link": {"gbps": 1, "latency_us": 10}}
    return Problem.build(graph, pair, prof, budget, single)


def test_hsdag_spends_exactly_the_budget(tiny_graph):
    p = _tiny_problem(tiny_graph, budget=12)
    info = hsdag.train(p, {"samples": 5, "hidden": 16, "max_levels": 2, "baseline": "none"}, seed=0)
    assert len(p.history) == 12 and info["episodes"] == 3
    assert p.best == min(p.history)
    with pytest.raises(BudgetExhausted):
        p.evaluate(np.zeros(p.graph["n_nodes"], dtype=np.int64))


def test_hsdag_pooling_partitions_every_node(tiny_graph):
    p = _tiny_problem(tiny_graph)
    torch.manual_seed(0)
    from distlab.placement.features import coarse_features

    x = torch.from_numpy(coarse_features(p.graph, p.group, p.cedges))
    net = hsdag.HSDAGNet(x.shape[1], 2, hidden=16, max_levels=3)
    logits, assign, emb = net(x, hsdag._dense_adj(p.n_groups, p.cedges))
    assert assign.shape == (p.n_groups,)
    assert sorted(set(assign.tolist())) == list(range(logits.shape[0]))  # every cluster used
    assert emb.shape == (logits.shape[0], x.shape[1])


def test_components():
    assert hsdag._components(5, np.array([[0, 1], [3, 4], [1, 1]])).tolist() == [0, 0, 1, 2, 2]


def test_single_device_invalid_rule(tiny_graph):
    p = _tiny_problem(tiny_graph, single="invalid")
    lat = p.evaluate(np.ones((1, p.graph["n_nodes"]), dtype=np.int64))
    assert lat[0] == Problem.INVALID_LATENCY
    q = _tiny_problem(tiny_graph, single="allow")
    assert q.evaluate(np.ones((1, q.graph["n_nodes"]), dtype=np.int64))[0] < 1.0


def test_heft_prefers_the_faster_device():
    g = {"n_nodes": 3, "n_edges": 2, "edges": [[0, 1], [1, 2]],
         "nodes": [_node("input"), _node("relu", flops=1e9), _node("relu", flops=1e9)]}
    pair = {"devices": [{"name": "cpu", "kind": "profiled"},
                        {"name": "gpu", "kind": "roofline", "peak_gflops": 100, "mem_gbps": 100}],
            "link": {"gbps": 100, "latency_us": 1}}
    p = Problem.build(g, pair, np.array([0.0, 1.0, 1.0]), 1)
    baselines.heft(p)
    assert p.best_placement.tolist() == [0, 1, 1]


@pytest.mark.parametrize("method", ["random", "rnn", "placeto"])
def test_learned_baselines_respect_budget(tiny_graph, method):
    p = _tiny_problem(tiny_graph, budget=15)
    fn = {"random": baselines.random_search, "rnn": learned.rnn, "placeto": learned.placeto}[method]
    fn(p, {"samples": 4, "hidden": 8}, 0)
    assert len(p.history) == 15 and np.isfinite(p.best)


# ------------------------------------------------------------------ real execution

def test_two_processes_pinned_apart_compute_the_same_output(tiny_graph):
    """The workflow's real backend: two device processes, each pinned to its own core."""
    from distlab.placement.realexec import TwoProcessExecutor

    n = tiny_graph["n_nodes"]
    with TwoProcessExecutor(TINY_BERT, tiny_graph) as ex:
        assert ex.cores[0] != ex.cores[1] or ex.cores == (None, None)
        assert ex.run(np.zeros(n, dtype=np.int64), outputs=True) > 0
        assert ex.last_cpu[0] > 0 and ex.last_cpu[1] >= 0             # each device's own CPU time
        ref = {k: v.clone() for k, v in ex.last_outputs.items()}
        for place in (np.arange(n) % 2, np.ones(n, dtype=np.int64)):   # split, and all on device 1
            assert ex.run(place, outputs=True) > 0
            for k, v in ex.last_outputs.items():
                torch.testing.assert_close(v, ref[k])


# ------------------------------------------------------------------ config checks

def _cfg(**over):
    import yaml

    from conftest import ROOT

    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    cfg["placement"].update(over)
    return cfg


def test_default_config_passes_checks():
    assert check(_cfg()) == []


@pytest.mark.parametrize("over, key", [
    ({"default_pair": "nope"}, "placement.default_pair"),
    ({"methods": ["hsdag"]}, "placement.methods"),
    ({"methods": ["cpu_only"], "ablations": ["no_shape"]}, "placement.ablation_of"),
    ({"controls": ["hsdag_corrected"], "methods": ["cpu_only", "hsdag"]}, "placement.controls"),
    ({"real": {"enabled": True, "models": ["vgg"], "repeats": 1, "warmup": 0}}, "placement.real.models"),
    ({"seeds": [0]}, "placement.seeds"),
])
def test_checks_name_the_key(over, key):
    errs = check(_cfg(**over))
    assert any(e.startswith(key) for e in errs), errs


def test_checks_refuse_roofline_keys_on_profiled_host():
    cfg = _cfg()
    cfg["placement"]["pairs"]["cpu_igpu"]["devices"][0]["peak_gflops"] = 5
    assert any("devices[0].peak_gflops" in e for e in check(cfg))


def test_measured_cuda_times_replace_the_roofline_only_when_asked():
    g = {"nodes": [_node("relu", flops=1e9, inb=1, outb=1)]}
    dev = {"kind": "roofline", "peak_gflops": 1, "mem_gbps": 1, "measure_on_cuda": True}
    assert costs.device_costs(g, dev, None, cuda=np.array([7e-6]))[0] == 7e-6
    assert costs.device_costs(g, dev, None, cuda=None)[0] == pytest.approx(1.0 + 2e-9)   # no GPU: roofline
    dev.pop("measure_on_cuda")
    assert costs.device_costs(g, dev, None, cuda=np.array([7e-6]))[0] == pytest.approx(1.0 + 2e-9)


def test_ready_order_is_work_conserving():
    # in(dev0) -> x (dev1, 2 s) -> y (dev0, 1 s); in -> z (dev0, 3 s); y, z -> w (dev0, free)
    comp = [[0, 0], [2, 2], [1, 1], [3, 3], [0, 0]]
    edges = [(0, 1), (1, 2), (0, 3), (2, 4), (3, 4)]
    place = np.array([0, 1, 0, 0, 0])
    topo = _sim(5, edges, comp, [0] * 5, pinned=[True, 0, 0, 0, 0])
    ready = sim.Simulator(5, edges, np.array(comp, float), np.zeros(5), np.array([True, 0, 0, 0, 0]),
                          order="ready")
    # topological queue: y (waits for x until 2) before z: y 2-3, z 3-6
    assert topo.trace(place).start.tolist() == [0, 0, 2, 3, 6] and topo.evaluate(place)[0] == 6
    # ready-order queue: z is ready at 0 and runs first: z 0-3, y 3-4
    assert ready.trace(place).start.tolist() == [0, 0, 3, 0, 4] and ready.evaluate(place)[0] == 4


def test_ready_order_agrees_on_the_busy_link_case_and_chains():
    comp = [[0, 0], [1, 1], [1, 1], [1, 1], [1, 1], [0, 0]]
    edges = [(0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 5)]
    ready = sim.Simulator(6, edges, np.array(comp, float), np.array([0, 3, 3, 0, 0, 0.5]),
                          np.array([True] + [False] * 5), order="ready")
    assert ready.evaluate(np.array([0, 0, 0, 1, 1, 1]))[0] == pytest.approx(8.5)
    chain = sim.Simulator(2, [(0, 1)], np.array([[1.0, 1], [2, 2]]), np.array([0.5, 0.25]), order="ready")
    assert chain.evaluate(np.array([0, 1]))[0] == pytest.approx(3.75)
    with pytest.raises(sim.PlacementError, match="order"):
        sim.Simulator(2, [(0, 1)], np.ones((2, 2)), np.zeros(2), order="lifo")
