"""The shared baseline: data-parallel SGD equals single-process SGD on the same
global batch (simulated backend)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from distlab.baseline.train import run_simulated


def _spec(method, **over):
    spec = {"experiment": "baseline", "method": method, "backend": "simulated", "seed": 0,
            "model": {"name": "cnn"}, "n_workers": 4, "batch_size": 32, "lr": 0.1, "steps": 15,
            "eval_every": 5, "dtype": "float64",
            "cluster": {"compute": {"mode": "calibrated", "unit_seconds": 0.2},
                        "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                        "straggler": {"model": "none"}},
            "checkpoint": {"every_s": 0, "every_steps": 0}}
    spec.update(over)
    return spec


def test_dgd_equals_single_process(tmp_path, digits_dir):
    run_simulated(_spec("dgd"), digits_dir, tmp_path / "dgd")
    run_simulated(_spec("single"), digits_dir, tmp_path / "single")
    a = pd.read_csv(tmp_path / "dgd/metrics.csv")
    b = pd.read_csv(tmp_path / "single/metrics.csv")
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=0, atol=1e-12)
    ma = json.loads((tmp_path / "dgd/manifest.json").read_text())
    assert ma["backend"] == "simulated" and ma["clock"] == "simulated"
    assert ma["spec"]["seed"] == 0 and "git" in ma and "libraries" in ma and ma["peak_rss_mb"] > 0
    # clock: compute 0.2 s + ring all-reduce of the gradient over 4 workers
    numel = ma["bytes_total"] / len(a) / (2 * 3 / 4) / 8   # gradient + the loss scalar
    expected = 0.2 + 6 * 0.001 + 2 * 3 / 4 * numel * 8 / 1e9
    np.testing.assert_allclose(a["step_time"], expected, rtol=1e-9)
    assert (b["bytes"] == 0).all()      # one process sends nothing


def test_stragglers_slow_dgd_but_not_its_arithmetic(tmp_path, digits_dir):
    strag = {"model": "exponential", "mean": 1.0}
    slow = _spec("dgd", cluster={**_spec("dgd")["cluster"], "straggler": strag})
    run_simulated(_spec("dgd"), digits_dir, tmp_path / "fast")
    run_simulated(slow, digits_dir, tmp_path / "slow")
    a = pd.read_csv(tmp_path / "fast/metrics.csv")
    b = pd.read_csv(tmp_path / "slow/metrics.csv")
    np.testing.assert_array_equal(a["loss"], b["loss"])
    assert (b["step_time"] > a["step_time"]).all()
