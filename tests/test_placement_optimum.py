"""Serial (HETERO-like) timing, its exact two-device optimum, and paper-like coarsening."""

import itertools

import numpy as np
import pytest

from distlab.placement import coarsen, optimum
from distlab.placement.sim import PlacementError, Simulator


def _random_dag(rng, n):
    edges = set()
    for v in range(1, n):
        for u in rng.choice(v, size=min(v, int(rng.integers(1, 3))), replace=False):
            edges.add((int(u), v))
    for _ in range(n // 3):  # a few extra forward edges
        u, v = sorted(rng.choice(n, size=2, replace=False))
        edges.add((int(u), int(v)))
    return sorted(edges)


def _brute(sim):
    free = [v for v in range(sim.n) if not sim.pinned[v]]
    places = []
    for bits in itertools.product((0, 1), repeat=len(free)):
        p = np.zeros(sim.n, dtype=np.int64)
        p[free] = bits
        places.append(p)
    lat = sim.evaluate(np.array(places))
    return float(lat.min())


@pytest.mark.parametrize("seed", range(12))
def test_min_cut_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 17))
    edges = _random_dag(rng, n)
    compute = rng.uniform(0.0, 3.0, size=(n, 2))
    transfer = rng.uniform(0.0, 2.0, size=n)
    pinned = np.zeros(n, bool)
    pinned[0] = True
    compute[0] = 0.0
    sim = Simulator(n, edges, compute, transfer, pinned, order="serial")
    place, lat = optimum.serial_optimum(sim)
    assert lat == pytest.approx(_brute(sim), rel=1e-9, abs=1e-12)
    assert float(sim.evaluate(place)[0]) == pytest.approx(lat, rel=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_min_cut_with_groups_equals_brute_force_over_groups(seed):
    rng = np.random.default_rng(100 + seed)
    n = 14
    edges = _random_dag(rng, n)
    sim = Simulator(n, edges, rng.uniform(0, 3, (n, 2)), rng.uniform(0, 2, n), order="serial")
    group = coarsen.coarsen(n, edges)
    n_groups = int(group.max()) + 1
    best = min(float(sim.evaluate(np.array(bits, dtype=np.int64)[group])[0])
               for bits in itertools.product((0, 1), repeat=n_groups))
    place, lat = optimum.serial_optimum(sim, group)
    assert lat == pytest.approx(best, rel=1e-9)
    for g in range(n_groups):  # the cut respects the groups
        assert np.unique(place[group == g]).size == 1


def test_serial_latency_by_hand():
    # 0 -> 1 -> 3, 0 -> 2 -> 3; node 3 is the result.  Placement [0, 1, 1, 0]:
    # compute 1 + 20 + 30 + 4; transfers: 0's output to device 1 once (0.5, though two
    # consumers sit there), 1's and 2's outputs back to device 0 (0.25 + 0.125); the result
    # is on the host already.
    compute = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0]])
    transfer = np.array([0.5, 0.25, 0.125, 8.0])
    sim = Simulator(4, [(0, 1), (0, 2), (1, 3), (2, 3)], compute, transfer, order="serial")
    assert sim.evaluate(np.array([0, 1, 1, 0]))[0] == pytest.approx(1 + 20 + 30 + 4 + 0.5 + 0.25 + 0.125)
    # all on device 1: the result goes back to the host (8.0)
    assert sim.evaluate(np.array([1, 1, 1, 1]))[0] == pytest.approx(10 + 20 + 30 + 40 + 8.0)
    tr = sim.trace(np.array([0, 1, 1, 0]))
    assert tr.latency == pytest.approx(55.875)
    assert tr.start[1] == pytest.approx(1.5)  # after node 0 and its one transfer
    # the batched path gives the same numbers
    many = np.array(list(itertools.product((0, 1), repeat=4)))
    assert np.allclose(sim.evaluate(many), [sim.trace(p).latency for p in many])


def test_min_cut_needs_two_devices():
    sim = Simulator(2, [(0, 1)], np.ones((2, 3)), np.ones(2), order="serial")
    with pytest.raises(PlacementError, match="two devices"):
        optimum.serial_optimum(sim)


def test_weight_nodes_split_groups():
    # input 0 -> conv 1 -> bn 2 -> relu 3 -> conv 4 -> relu 5 ; 3 -> conv 6 ; 5, 6 -> add 7
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (3, 6), (5, 7), (6, 7)]
    weightless = coarsen.coarsen(8, edges)
    # without weight nodes every operator but the add has one predecessor: {0..6}, {7}
    assert weightless.tolist() == [0, 0, 0, 0, 0, 0, 0, 1]
    weighted = [False, True, True, False, True, False, True, False]  # convs and the bn read weights
    paper = coarsen.coarsen(8, edges, weighted)
    # each weighted operator has a second (weight) predecessor: {0}, {1}, {2,3}, {4,5}, {6}, {7}
    assert paper.tolist() == [0, 1, 2, 2, 3, 3, 4, 5]
    assert int(paper.max()) + 1 == 6 and int(weightless.max()) + 1 == 2


def test_weighted_nodes_reads_param_bytes():
    graph = {"nodes": [{"param_bytes": 0}, {"param_bytes": 12}, {}]}
    assert coarsen.weighted_nodes(graph).tolist() == [False, True, False]


def test_regime_scales_the_weighted_operators_to_the_ratio():
    from distlab.placement import regime

    nodes = [{"op": "input", "flops": 0, "in_bytes": 0, "out_bytes": 16, "param_bytes": 0},
             {"op": "conv2d", "flops": 10**9, "in_bytes": 16, "out_bytes": 16, "param_bytes": 64},
             {"op": "relu", "flops": 10**6, "in_bytes": 16, "out_bytes": 16, "param_bytes": 0},
             {"op": "linear", "flops": 10**9, "in_bytes": 16, "out_bytes": 16, "param_bytes": 64}]
    graph = {"n_nodes": 4, "edges": [[0, 1], [1, 2], [2, 3]], "nodes": nodes}
    pair = {"devices": [{"name": "cpu", "kind": "profiled"},
                        {"name": "g", "kind": "roofline", "peak_gflops": 100, "mem_gbps": 10}],
            "link": {"gbps": 10, "latency_us": 1}}
    cpu = np.array([0.0, 0.02, 1e-6, 0.03])  # the relu is faster on the CPU
    for r in (0.5, 2.0):
        comp, _ = regime.scaled_costs(graph, pair, cpu, r)
        assert comp[[1, 3], 1].sum() == pytest.approx(r * 0.05)
        assert comp[2, 1] == pytest.approx(1e6 / 100e9 + 32 / 10e9, rel=1e-6)  # relu: untouched roofline
    rows = regime.model_rows(graph, pair, cpu, ratios=(0.5, 4.0), heft=False)
    # fast weighted operators on the GPU: the optimum beats CPU-only; slow ones: it is CPU-only
    assert rows[0]["serial_optimum_ms"] < rows[0]["cpu_only_ms"]
    assert rows[1]["serial_optimum_ms"] == pytest.approx(rows[1]["cpu_only_ms"])
    assert rows[1]["serial_headroom_pct"] == pytest.approx(0.0)


def test_regime_command_refuses_a_pair_without_a_roofline_gpu(tmp_path):
    import json
    import subprocess
    import sys

    spec = {"pair": {"devices": [{"name": "cpu", "kind": "profiled"}, {"name": "h", "kind": "measured_cuda"}],
                     "link": {"gbps": 1, "latency_us": 1}}}
    r = subprocess.run([sys.executable, "-m", "distlab", "placement-regime", "--spec", json.dumps(spec),
                        "--graphs", "{}", "--profiles", "{}", "--out", str(tmp_path / "x.csv")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "roofline" in r.stderr
