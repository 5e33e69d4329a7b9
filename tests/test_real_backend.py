"""The training drivers on real gloo processes (forked ranks by default, torchrun on request)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from conftest import bin_path, pgc_spec

ENV = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}


RUNTIME = {"timeout_s": 5, "job_timeout_s": 240, "checkpoint": {"every_s": 0, "every_steps": 0}}


def _train(experiment, spec, data, out, timeout=300, runtime=None):
    cmd = [sys.executable, "-m", "distlab", "train", "--experiment", experiment, "--threads", "2",
           "--spec", json.dumps(spec), "--runtime", json.dumps(runtime or RUNTIME),
           "--data", str(data), "--out", str(out)]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["fork", "torchrun"])
def test_dgd_on_four_gloo_processes_keeps_parameters_identical(tmp_path, digits_dir, launcher):
    from distlab.baseline.train import run_simulated

    spec = {"experiment": "baseline", "method": "dgd", "backend": "gloo", "seed": 0,
            "model": {"name": "cnn"}, "n_workers": 4, "batch_size": 32, "lr": 0.1, "steps": 8,
            "eval_every": 4, "dtype": "float32",
            "cluster": {"compute": {"mode": "calibrated", "unit_seconds": 0.1},
                        "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                        "straggler": {"model": "none"}}}
    r = _train("baseline", spec, digits_dir, tmp_path / "gloo",
               runtime={"timeout_s": 30, "job_timeout_s": 240, "launcher": launcher})
    assert r.returncode == 0, r.stderr[-3000:]
    man = json.loads((tmp_path / "gloo/manifest.json").read_text())
    assert man["backend"] == "gloo" and man["clock"] == "measured"
    assert man["params_max_abs_diff_across_ranks"] == 0.0
    # the same arithmetic as the simulated backend, up to the all-reduce's float rounding
    run_simulated({**spec, "backend": "simulated"}, digits_dir, tmp_path / "sim", {})
    real = pd.read_csv(tmp_path / "gloo/metrics.csv")
    sim = pd.read_csv(tmp_path / "sim/metrics.csv")
    assert (real["loss"] - sim["loss"]).abs().max() < 1e-4
    # one accounting rule: both backends count the same bytes
    assert real["bytes"].iloc[1] == pytest.approx(sim["bytes"].iloc[1])


def _real_pgc(scheme, s, **over):
    spec = pgc_spec(scheme, s, backend="gloo", dtype="float32", steps=6, model={"name": "cnn"},
                    cluster={"compute": {"mode": "measured", "unit_seconds": 0.0, "scale": 1.0},
                             "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                             "straggler": {"model": "dead", "slow_workers": [2]}})
    spec.pop("checkpoint", None)
    return {**spec, **over}


@pytest.mark.slow
def test_a_worker_that_never_answers_does_not_stop_pgc(tmp_path, digits_dir):
    r = _train("pgc", _real_pgc("pgc-cr", 1), digits_dir, tmp_path / "pgc")
    assert r.returncode == 0, r.stderr[-3000:]
    m = pd.read_csv(tmp_path / "pgc/metrics.csv")
    assert len(m) == 6 and (m["n_received"] == 3).all()
    assert set(m["clock"]) == {"measured"}


@pytest.mark.slow
def test_a_worker_that_never_answers_fails_dgd_with_a_clear_timeout(tmp_path, digits_dir):
    r = _train("pgc", _real_pgc("dgd", 0), digits_dir, tmp_path / "dgd")
    assert r.returncode != 0
    assert "worker 2 never answered" in r.stderr
    assert "scheme dgd waits for 4 of 4 workers" in r.stderr
    assert not (tmp_path / "dgd/manifest.json").exists()


@pytest.mark.slow
def test_a_killed_real_run_resumes_from_the_masters_checkpoint(tmp_path, digits_dir):
    import signal
    import time

    import psutil

    spec = _real_pgc("pgc-cr", 1, steps=150,
                     cluster={**_real_pgc("pgc-cr", 1)["cluster"],
                              "straggler": {"model": "exponential", "mean": 0.01}})
    out = tmp_path / "run"
    runtime = {"timeout_s": 20, "job_timeout_s": 240, "checkpoint": {"every_s": 0, "every_steps": 10}}
    cmd = [sys.executable, "-m", "distlab", "train", "--experiment", "pgc", "--threads", "2",
           "--spec", json.dumps(spec), "--runtime", json.dumps(runtime),
           "--data", str(digits_dir), "--out", str(out)]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    while not (out / "checkpoint.pt").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert proc.poll() is None, "the run ended before it could be killed"
    tree = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    for pid in tree:   # the whole job: launcher, torchrun, master and workers
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    assert not (out / "manifest.json").exists()
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    man = json.loads((out / "manifest.json").read_text())
    assert man["resumed"] == 1
    # the workers' measured costs were checkpointed with the master: every step counted once
    assert man["calibration"]["decode_s"] > 0
    m = pd.read_csv(out / "metrics.csv")
    assert m["step"].tolist() == list(range(150))   # every step once, none lost or repeated
    assert not (out / "checkpoint.pt").exists()
