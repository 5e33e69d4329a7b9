"""One rule on both backends: seeded tie-breaking, every step processed in order
(staleness <= s), and dead workers tolerated up to s (DGD fails fast, naming them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

from conftest import bin_path, pgc_spec

from distlab.runtime.compute import ComputeModel
from distlab.runtime.network import NetworkModel
from distlab.runtime.sim import SimulatedCluster
from distlab.runtime.stragglers import StragglerModel

ENV = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}
RUNTIME = {"timeout_s": 60, "job_timeout_s": 300, "checkpoint": {"every_s": 0, "every_steps": 0}}


def _train(spec, data, out, runtime=RUNTIME):
    cmd = [sys.executable, "-m", "distlab", "train", "--experiment", "pgc", "--threads", "2",
           "--spec", json.dumps(spec), "--runtime", json.dumps(runtime),
           "--data", str(data), "--out", str(out)]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=400)


def _spec(scheme, s, **over):
    spec = pgc_spec(scheme, s, **over)
    spec.pop("checkpoint", None)
    return spec


def _usage(received: pd.Series, n: int) -> np.ndarray:
    counts = np.zeros(n)
    for r in received:
        for w in str(r).split():
            counts[int(w)] += 1
    return counts / len(received)


def test_equal_arrivals_are_ordered_by_a_seeded_draw_per_step():
    cl = SimulatedCluster(4, ComputeModel("calibrated", 1.0), NetworkModel(0.0, 1e12),
                          StragglerModel("none", seed=3))
    firsts = []
    for step in range(400):
        for w in range(4):
            cl.charge(w, 1, 0.0)
        firsts.append(cl.master_step(step, 0.0, 0.0, lambda r: len(r) >= 3).received)
    left_out = np.bincount([({0, 1, 2, 3} - set(r)).pop() for r in firsts], minlength=4) / 400
    assert np.all(np.abs(left_out - 0.25) < 0.07), left_out   # no worker favoured by its index
    again = SimulatedCluster(4, ComputeModel("calibrated", 1.0), NetworkModel(0.0, 1e12),
                             StragglerModel("none", seed=3))
    assert again.tie_break(17).tolist() == cl.tie_break(17).tolist()   # pure in (seed, step)


@pytest.mark.parametrize("scheme", ["is-sgd", "pgc-cr"])
def test_with_no_stragglers_every_partition_is_used_at_frequency_n_minus_s_over_n(
        tmp_path, digits_dir, scheme):
    from distlab.pgc.train import run_simulated

    n, s = 4, 1
    spec = _spec(scheme, s, steps=300, eval_every=1000,
                 cluster={**pgc_spec(scheme, s)["cluster"], "straggler": {"model": "none"}})
    run_simulated(spec, digits_dir, tmp_path)
    m = pd.read_csv(tmp_path / "metrics.csv")
    freq = _usage(m["received"], n)
    # binomial sd sqrt(.75 * .25 / 300) = 0.025: 3 sd
    assert np.all(np.abs(freq - (n - s) / n) < 0.075), freq


def test_simulated_staleness_never_exceeds_s(tmp_path, digits_dir):
    from distlab.pgc.train import run_simulated

    for s in (1, 2):
        run_simulated(_spec("pgc-cr", s, steps=40), digits_dir, tmp_path / f"s{s}")
        m = pd.read_csv(tmp_path / f"s{s}/metrics.csv")
        assert m["staleness"].max() == s


@pytest.mark.slow
def test_real_workers_process_every_step_in_order_so_staleness_stays_within_s(tmp_path, digits_dir):
    """Delays comparable to a step make workers late; they work through their
    queue in order, so no message mixes gradients older than s steps."""
    spec = _spec("pgc-cr", 1, backend="gloo", n=3, steps=40, dtype="float32",
                 cluster={"compute": {"mode": "measured", "unit_seconds": 0.0, "scale": 1.0},
                          "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                          "straggler": {"model": "exponential", "mean": 0.03}})
    r = _train(spec, digits_dir, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    m = pd.read_csv(tmp_path / "metrics.csv")
    assert m["step"].tolist() == list(range(40))
    assert m["staleness"].max() <= 1
    assert (m["n_received"] == 2).all()


def _crash(scheme, s, backend, n=3, at=3, steps=14, workers=(1,)):
    return _spec(scheme, s, backend=backend, n=n, steps=steps, dtype="float32", batch_size=24,
                 cluster={"compute": {"mode": "measured", "unit_seconds": 0.0, "scale": 1.0},
                          "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                          "straggler": {"model": "crash", "slow_workers": list(workers),
                                        "from_step": at, "mean": 0.1}})


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["gc-cr", "pgc-cr", "is-sgd", "is-gc-cr"])
def test_coded_schemes_survive_s_killed_workers_on_gloo(tmp_path, digits_dir, scheme):
    """Worker 1's process is SIGKILLed at step 3 of 14 (n = 3, s = 1; every worker
    also suffers exponential delays of mean 0.1 s, so the run cannot end before
    the worker reaches step 3): the run
    finishes with every step once, and its loss follows the simulated run with
    that worker dead from step 4 (after it, both use exactly the two others)."""
    from distlab.pgc.train import run_simulated

    r = _train(_crash(scheme, 1, "gloo"), digits_dir, tmp_path / "gloo")
    assert r.returncode == 0, r.stderr[-3000:]
    man = json.loads((tmp_path / "gloo/manifest.json").read_text())
    assert list(man["lost_workers"]) == ["1"]
    real = pd.read_csv(tmp_path / "gloo/metrics.csv")
    assert real["step"].tolist() == list(range(14))
    after = real[real["step"] >= 4]
    assert (after["received"].astype(str).map(lambda r: sorted(r.split())) == [["0", "2"]] * len(after)).all()
    run_simulated(_crash(scheme, 1, "simulated"), digits_dir, tmp_path / "sim")
    sim = pd.read_csv(tmp_path / "sim/metrics.csv")
    rel = np.abs(real["loss"].to_numpy() - sim["loss"].to_numpy()) / sim["loss"].to_numpy()
    assert rel.max() < 0.15, rel
    sman = json.loads((tmp_path / "sim/manifest.json").read_text())
    assert abs(man["final"]["train_loss_full"] - sman["final"]["train_loss_full"]) < 0.05 * sman["final"]["train_loss_full"]


@pytest.mark.slow
def test_dgd_fails_fast_naming_the_dead_worker(tmp_path, digits_dir):
    t0 = time.monotonic()
    r = _train(_crash("dgd", 0, "gloo"), digits_dir, tmp_path)
    took = time.monotonic() - t0
    assert r.returncode != 0
    lost = [line for line in r.stderr.splitlines() if "WorkerLostError: " in line]
    assert lost and "worker 1 died" in lost[0], r.stderr[-2000:]
    assert took < RUNTIME["timeout_s"]        # not by the straggler timeout
    assert not (tmp_path / "manifest.json").exists()


@pytest.mark.slow
def test_pgc_survives_a_sigkilled_rank_process_on_gloo(tmp_path, digits_dir):
    """kill -9 of a worker's *rank process* (the one the launcher started, not its forked
    work child), as an operator or the OOM killer would, once training is under way
    (n = 3, s = 1): the launcher logs the death in one line, the job finishes with every
    step once, the master decodes from the two others from then on, and the losses follow
    the simulated run with that worker dead from the same step."""
    import signal

    import psutil

    from distlab.pgc.train import run_simulated

    spec = _spec("pgc-cr", 1, backend="gloo", n=3, steps=60, dtype="float32", batch_size=24,
                 cluster={"compute": {"mode": "measured", "unit_seconds": 0.0, "scale": 1.0},
                          "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                          "straggler": {"model": "exponential", "mean": 0.05}})
    out = tmp_path / "gloo"
    runtime = {**RUNTIME, "launcher": "fork", "checkpoint": {"every_s": 0, "every_steps": 1}}
    cmd = [sys.executable, "-m", "distlab", "train", "--experiment", "pgc", "--threads", "2",
           "--spec", json.dumps(spec), "--runtime", json.dumps(runtime),
           "--data", str(digits_dir), "--out", str(out)]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not (out / "checkpoint.pt").exists():   # the master has finished a step
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.02)
        ranks = {p.name(): p for p in psutil.Process(proc.pid).children()}
        victim = ranks["distlab-rank2"]                # worker 1
        assert [c.name() for c in victim.children()] == ["distlab-work2"]
        os.kill(victim.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    told = [ln for ln in err.splitlines() if ln.startswith("[launcher]: rank 2 died")]
    assert len(told) == 1 and "SIGKILL" in told[0] and "carries on" in told[0], err[-3000:]
    man = json.loads((out / "manifest.json").read_text())
    assert list(man["lost_workers"]) == ["1"]
    real = pd.read_csv(out / "metrics.csv")
    assert real["step"].tolist() == list(range(60))
    has1 = real["received"].astype(str).map(lambda r: "1" in r.split()).to_numpy()
    k = int(np.max(np.nonzero(has1)[0]) + 1) if has1.any() else 0   # worker 1's last step, + 1
    assert k < 50, k
    after = real[real["step"] >= k]
    assert (after["received"].astype(str).map(lambda r: sorted(r.split())) == [["0", "2"]] * len(after)).all()
    assert (after["n_received"] == 2).all()
    sim_spec = _spec("pgc-cr", 1, n=3, steps=60, dtype="float32", batch_size=24,
                     cluster={"compute": {"mode": "measured", "unit_seconds": 0.0, "scale": 1.0},
                              "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                              "straggler": {"model": "crash", "slow_workers": [1], "from_step": k,
                                            "mean": 0.05}})
    run_simulated(sim_spec, digits_dir, tmp_path / "sim")
    sim = pd.read_csv(tmp_path / "sim/metrics.csv")
    rel = np.abs(real["loss"].to_numpy() - sim["loss"].to_numpy()) / sim["loss"].to_numpy()
    assert rel.max() < 0.15, rel


def _dies(kill: set[int], fail: set[int] = frozenset()):
    def target():
        import signal

        rank = int(os.environ["RANK"])
        if rank in kill:
            os.kill(os.getpid(), signal.SIGKILL)
        if rank in fail:
            raise RuntimeError(f"rank {rank} has a bug")
        time.sleep(0.5)
    return target


@pytest.mark.parametrize("kill, fail, ok", [
    ({2}, set(), True),          # one expendable rank killed: tolerated
    ({1, 3}, set(), False),      # two: one more than tolerated
    ({0}, set(), False),         # the master is not expendable
    (set(), {2}, False),         # an expendable rank's own error is a failure, not a death
])
def test_the_fork_launcher_tolerates_up_to_max_lost_deaths_of_expendable_ranks(kill, fail, ok):
    import io

    from distlab.runtime.launch import run_forked

    log = io.StringIO()
    run = lambda: run_forked(_dies(kill, fail), nprocs=4, threads=4, timeout_s=60, stream=log,  # noqa: E731
                             expendable=[1, 2, 3], max_lost=1)
    if ok:
        run()
        assert [ln for ln in log.getvalue().splitlines() if ln.startswith("[launcher]")] == [
            "[launcher]: rank 2 died of signal 9 (SIGKILL); the job carries on without it "
            "(1 of at most 1 such deaths tolerated)"]
    else:
        with pytest.raises(RuntimeError, match="rank"):
            run()
