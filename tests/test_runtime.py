"""The simulated cluster: cost formulas, straggler draws, the clock's rules."""

from __future__ import annotations

import math

import numpy as np
import pytest

from distlab.runtime.compute import ComputeModel
from distlab.runtime.ledger import ByteLedger
from distlab.runtime.network import NetworkModel, all_gather_bytes, ring_all_reduce_bytes
from distlab.runtime.sim import SimulatedCluster, StragglerTimeout
from distlab.runtime.stragglers import StragglerModel


# ----------------------------------------------------------- cost formulas
def test_ring_all_reduce_bytes_known_answers():
    assert ring_all_reduce_bytes(1000, 1) == 0
    assert ring_all_reduce_bytes(1000, 2) == 1000          # 2 * 1/2 * b
    assert ring_all_reduce_bytes(1000, 4) == 1500          # 2 * 3/4 * b
    assert ring_all_reduce_bytes(800, 8) == pytest.approx(1400)


def test_all_gather_bytes_known_answers():
    assert all_gather_bytes(100, 1) == 0
    assert all_gather_bytes(100, 4) == 300                 # (N-1) * payload


def test_network_times_known_answers():
    net = NetworkModel(latency_s=0.01, bandwidth_Bps=1000.0)
    assert net.p2p(500) == pytest.approx(0.51)
    # ring all-reduce: 2(N-1) latency rounds + 2(N-1)/N * b / bw
    assert net.all_reduce(1000, 4) == pytest.approx(6 * 0.01 + 1.5)
    assert net.all_gather(100, 4) == pytest.approx(3 * 0.01 + 0.3)
    assert net.all_reduce(1000, 1) == 0.0


def test_network_rejects_bad_values():
    with pytest.raises(ValueError, match="bandwidth"):
        NetworkModel(latency_s=0.0, bandwidth_Bps=0.0)
    with pytest.raises(ValueError, match="latency"):
        NetworkModel(latency_s=-1.0)


def test_ledger_accounts_with_the_same_rule():
    led = ByteLedger()
    led.all_reduce(1000, 4)
    led.all_gather(100, 4)
    led.send(10, count=3)
    assert led.pop_step() == pytest.approx(1500 + 300 + 30)
    assert led.pop_step() == 0
    assert led.total_bytes == pytest.approx(1830)
    assert led.by_op["all_reduce"] == 1500


# --------------------------------------------------------------- stragglers
def test_straggler_draws_are_deterministic_and_step_addressable():
    a = StragglerModel(model="exponential", mean=1.0, seed=3)
    b = StragglerModel(model="exponential", mean=1.0, seed=3)
    seq = [a.delays(t, 12) for t in range(5)]
    # any order of asking gives the same draws: a pure function of (seed, step)
    assert np.array_equal(b.delays(4, 12), seq[4])
    assert np.array_equal(b.delays(0, 12), seq[0])
    assert not np.array_equal(seq[0], seq[1])
    c = StragglerModel(model="exponential", mean=1.0, seed=4)
    assert not np.array_equal(c.delays(0, 12), seq[0])


@pytest.mark.parametrize("model,kw", [("exponential", {}), ("pareto", {"shape": 3.0})])
def test_straggler_means(model, kw):
    m = StragglerModel(model=model, mean=2.0, seed=0, **kw)
    draws = np.concatenate([m.delays(t, 50) for t in range(2000)])
    assert draws.min() >= 0
    assert draws.mean() == pytest.approx(2.0, rel=0.05)


def test_persistent_and_dead_workers():
    p = StragglerModel(model="persistent", slowdown=3.0, slow_workers=(1,), mean=0.0)
    assert p.compute_factor(3).tolist() == [1.0, 3.0, 1.0]
    assert p.delays(0, 3).tolist() == [0.0, 0.0, 0.0]
    d = StragglerModel(model="dead", slow_workers=(2,))
    assert math.isinf(d.delays(7, 4)[2]) and d.delays(7, 4)[:2].tolist() == [0.0, 0.0]


def test_straggler_config_errors_name_the_key():
    with pytest.raises(ValueError, match="straggler.model"):
        StragglerModel(model="gaussian")
    with pytest.raises(ValueError, match="straggler.shape"):
        StragglerModel(model="pareto", mean=1.0, shape=1.0)


# ------------------------------------------------------------------- clock
def _cluster(n, unit=1.0, latency=0.0, straggler=None, seed=0):
    return SimulatedCluster(n, ComputeModel("calibrated", unit_seconds=unit),
                            NetworkModel(latency_s=latency, bandwidth_Bps=1e12),
                            straggler or StragglerModel(seed=seed))


def test_sync_step_waits_for_the_slowest_then_the_collective():
    cl = _cluster(3, unit=0.5)
    for w, units in enumerate([1, 2, 4]):
        cl.charge(w, units, measured_s=123.0)   # calibrated: the measured time is ignored
    assert cl.sync_step(0, collective_s=0.25) == pytest.approx(2.0 + 0.25)
    assert cl.now == pytest.approx(2.25)


def test_measured_mode_charges_scaled_wall_time():
    cl = SimulatedCluster(2, ComputeModel("measured", scale=10.0), NetworkModel(0.0, 1e12),
                          StragglerModel())
    cl.charge(0, 1, measured_s=0.01)
    cl.charge(1, 1, measured_s=0.03)
    assert cl.sync_step(0, 0.0) == pytest.approx(0.3)


def test_master_step_time_is_arrival_of_last_needed_message():
    cl = _cluster(3, unit=1.0, latency=0.1)
    for w, units in enumerate([1, 1, 3]):
        cl.charge(w, units, 0.0)
    res = cl.master_step(0, msg_bytes=0, bcast_bytes=0, ready=lambda r: len(r) >= 2)
    # model reaches workers at 0.1; workers 0 and 1 finish at 1.1 and arrive at 1.2
    assert res.received == [0, 1]
    assert res.step_time == pytest.approx(1.2)
    # worker 2 is still busy until 3.1: it starts step 1 late, at 3.1 instead of 1.3
    for w in range(3):
        cl.charge(w, 1, 0.0)
    res = cl.master_step(1, msg_bytes=0, bcast_bytes=0, ready=lambda r: len(r) >= 3)
    assert res.started_late.tolist() == [False, False, True]
    assert res.end_time == pytest.approx(3.1 + 1.0 + 0.1)


def test_master_step_with_a_dead_worker():
    dead = StragglerModel(model="dead", slow_workers=(1,))
    cl = _cluster(3, straggler=dead)
    for w in range(3):
        cl.charge(w, 1, 0.0)
    res = cl.master_step(0, 0, 0, ready=lambda r: len(r) >= 2)
    assert 1 not in res.received
    for w in range(3):
        cl.charge(w, 1, 0.0)
    with pytest.raises(StragglerTimeout, match=r"workers \[1\] never answer"):
        cl.master_step(1, 0, 0, ready=lambda r: len(r) >= 3)
    cl2 = _cluster(3, straggler=dead)
    with pytest.raises(StragglerTimeout, match=r"\[1\]"):
        cl2.sync_step(0, 0.0)


def test_simulation_is_deterministic_given_the_seed():
    def run(seed):
        cl = _cluster(6, unit=0.2, straggler=StragglerModel("exponential", mean=1.0, seed=seed))
        times = []
        for t in range(50):
            for w in range(6):
                cl.charge(w, 1, 0.0)
            times.append(cl.master_step(t, 0, 0, ready=lambda r: len(r) >= 4).step_time)
        return times

    assert run(1) == run(1)
    assert run(1) != run(2)


def _harmonic(k):
    return sum(1.0 / i for i in range(1, k + 1))


@pytest.mark.parametrize("n,k,c,mu", [(12, 12, 0.5, 1.0), (12, 12, 0.25, 2.0), (8, 8, 1.0, 1.0)])
def test_waiting_for_all_matches_order_statistics(n, k, c, mu):
    """No backlog when the master waits for everyone: E[step] = c + mu * H_n."""
    cl = _cluster(n, unit=c, straggler=StragglerModel("exponential", mean=mu, seed=0))
    times = []
    for t in range(4000):
        for w in range(n):
            cl.charge(w, 1, 0.0)
        times.append(cl.master_step(t, 0, 0, ready=lambda r: len(r) >= k).step_time)
    expected = c + mu * (_harmonic(n) - _harmonic(n - k))
    assert np.mean(times) == pytest.approx(expected, rel=0.03)


@pytest.mark.parametrize("s", [1, 2, 3])
def test_waiting_for_fastest_is_bounded_below_by_order_statistics(s):
    """Waiting for n-s of n: the order-statistics formula ignores the backlog of
    late workers, so the simulator's mean can only be larger, and by little when
    compute dominates."""
    n, c, mu = 12, 1.0, 1.0
    cl = _cluster(n, unit=c, straggler=StragglerModel("exponential", mean=mu, seed=0))
    times = []
    for t in range(3000):
        for w in range(n):
            cl.charge(w, 1, 0.0)
        times.append(cl.master_step(t, 0, 0, ready=lambda r: len(r) >= n - s).step_time)
    formula = c + mu * (_harmonic(n) - _harmonic(s))
    assert np.mean(times) >= formula * 0.98
    assert np.mean(times) <= formula * 1.35


def test_cluster_state_round_trips():
    cl = _cluster(4, unit=0.3, straggler=StragglerModel("exponential", mean=1.0, seed=5))
    for w in range(4):
        cl.charge(w, 1, 0.0)
    cl.master_step(0, 10, 10, ready=lambda r: len(r) >= 3)
    other = _cluster(4, unit=0.3, straggler=StragglerModel("exponential", mean=1.0, seed=5))
    other.load_state_dict(cl.state_dict())
    for c in (cl, other):
        for w in range(4):
            c.charge(w, 1, 0.0)
    a = cl.master_step(1, 10, 10, ready=lambda r: len(r) >= 3)
    b = other.master_step(1, 10, 10, ready=lambda r: len(r) >= 3)
    assert a.end_time == b.end_time and a.received == b.received
    assert cl.ledger.total_bytes == other.ledger.total_bytes
