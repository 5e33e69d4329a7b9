"""PGC's rules and specs: one figure needs only its own runs, the paper-scale
configuration resolves and runs (shrunk), specs are checked by key, the
threshold rules, the regime map's clock and the trace fit."""

from __future__ import annotations

import math
import os
import subprocess

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import ROOT, bin_path, pgc_spec, workflow_tree
from test_pgc_resnet import cifar_dir  # noqa: F401  (fixture)

ENV = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}


def _jobs(*args) -> dict[str, int]:
    r = subprocess.run(["snakemake", *args, "-n", "--forceall", "--quiet", "rules"], cwd=workflow_tree(),
                       env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return {line.split()[0]: int(line.split()[1]) for line in r.stdout.splitlines()
            if len(line.split()) == 2 and line.split()[1].isdigit() and line.split()[0] != "total"}


def test_fig7_needs_only_its_simulation_runs():
    jobs = _jobs("paper/figures/pgc_fig7.png")
    # the default config reads the coding profile versioned with the code: no job measures it
    assert set(jobs) == {"prepare_data", "pgc_train_sim", "pgc_summarize", "pgc_fig7"}
    measured = _jobs("paper/figures/pgc_fig7.png", "--config", "pgc={'coding': {'source': 'measured'}}")
    # with source: measured, the profile every simulated job's clock reads is measured first
    assert set(measured) == set(jobs) | {"pgc_coding_profile"}
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())["pgc"]["simulation"]
    # one job per (delay, scheme, s): every seed of a setting runs in one process
    n_jobs = len(cfg["delay_means"]) * sum(1 if sc == "dgd" else len(cfg["s"]) for sc in cfg["schemes"])
    assert jobs["pgc_train_sim"] == n_jobs and jobs["pgc_summarize"] == 1


def test_the_paper_scale_target_resolves():
    jobs = _jobs("pgc", "--configfile", "config/paper.yaml")
    assert {"pgc_train_real", "pgc_train_sim_real", "pgc_regime", "pgc_trace_fit", "pgc_fig8"} <= set(jobs)


@pytest.mark.parametrize(("over", "key"), [
    ({"scheme": "pgc-xx"}, "scheme"),
    ({"lr": math.nan}, "lr"),
    ({"n": 4.0}, "n"),
    ({"backend": "mpi"}, "backend"),
    ({"cluster": {"compute": {}, "network": {}, "straggler": {"model": "lazy"}}}, "cluster.straggler.model"),
    ({"checkpoint": {"every_s": 1}}, "checkpoint"),   # run-time settings travel apart
])
def test_bad_specs_are_refused_naming_the_key(over, key):
    from distlab.pgc.train import SPEC_SCHEMA
    from distlab.config.specs import SpecError, validate_spec

    spec = pgc_spec("pgc-cr", 1)
    spec.pop("checkpoint")
    spec.update(over)
    with pytest.raises(SpecError, match=key.split(".")[-1]):
        validate_spec(spec, SPEC_SCHEMA, "pgc")


def test_cross_field_spec_errors_name_the_key(digits_dir, tmp_path):
    from distlab.pgc.train import run_simulated

    # checked once where the spec enters the trainer, before any set-up
    with pytest.raises(ValueError, match="slow_workers"):
        run_simulated(pgc_spec("pgc-cr", 1, cluster={**pgc_spec("pgc-cr", 1)["cluster"],
                                                     "straggler": {"model": "dead", "slow_workers": [7]}}),
                      digits_dir, tmp_path / "a")
    with pytest.raises(ValueError, match="^s:"):
        run_simulated(pgc_spec("pgc-cr", 4), digits_dir, tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_both_threshold_rules():
    from distlab.results.summarize import steps_to_threshold, steps_to_threshold_ma

    loss = np.array([3, 1, 3, 1, 1, 3, 1, 1, 1, 1], dtype=float)
    assert steps_to_threshold(loss, 1.0, 3) == 9            # three in a row
    assert steps_to_threshold_ma(loss, 2.0, 3) == 4          # mean of (1, 3, 1) = 1.67
    assert steps_to_threshold_ma(loss, 0.5, 3) is None


def test_regime_clock_matches_the_trained_runs_clock(tmp_path, digits_dir):
    """The regime map's clock-only time per step is the training run's, step for
    step, when no coding cost is charged (same seed, same delays, same tie-breaks)."""
    from distlab.pgc.regime import clock_time_per_step
    from distlab.pgc.train import run_simulated

    spec = pgc_spec("gc-cr", 1, steps=20)
    run_simulated(spec, digits_dir, tmp_path, {})
    trained = pd.read_csv(tmp_path / "metrics.csv")["step_time"].mean()
    clock = clock_time_per_step("gc", 4, 1, 0.5, 1.0, 0, 20,
                                network=spec["cluster"]["network"])
    # the trained run also charges the message bytes on the network: a few microseconds
    assert clock == pytest.approx(trained, abs=1e-3)


def test_regime_orderings_are_read_off_the_clock():
    from distlab.pgc.regime import orderings, sweep

    df = sweep(6, [1, 2], [0.05, 3.0], [0, 1], 60)
    o = orderings(df).set_index(["c_over_mu", "s", "ordering"])["holds"]
    assert o[(3.0, 2, "gc_grows_with_s")]                    # compute-bound: more units, slower
    assert o[(3.0, 2, "gc_slowest")]
    assert not o[(3.0, 1, "gc_slowest")]                     # at s = 1 GC and IS-GC both hold c = 2
    assert not o[(0.05, 2, "gc_slowest")]                    # delay-bound: DGD (waits for all) slowest
    assert o[(0.05, 1, "is_sgd_fastest")] and o[(3.0, 1, "pgc_faster_than_is_gc")]


def test_trace_replay_and_fit(tmp_path):
    from distlab.pgc.trace import fit
    from distlab.runtime.stragglers import StragglerModel

    path = ROOT / "data/traces/gloo_delays.csv"
    trace = pd.read_csv(path)
    m = StragglerModel.from_config({"model": "trace", "trace": str(path), "scale": 2.0}, seed=0)
    first = trace[trace["step"] == trace["step"].min()].sort_values("worker")["delay"].to_numpy()
    assert np.allclose(m.delays(0, 4), 2.0 * first)
    assert np.allclose(m.delays(0, 6)[4:], 2.0 * first[:2])   # workers beyond the trace's wrap
    t = fit(trace["delay"].to_numpy()).set_index("model")
    assert t.loc["exponential", "mean_s"] == pytest.approx(trace["delay"].mean())
    assert 0 <= t.loc["pareto (Lomax)", "ks_distance"] <= 1
    bad = tmp_path / "bad.csv"
    bad.write_text("step,worker,delay\n0,0,0.1\n0,0,0.2\n")
    with pytest.raises(ValueError, match="duplicate"):
        StragglerModel.from_config({"model": "trace", "trace": str(bad)}, seed=0)


def test_shrunk_paper_config_runs_resnet18(tmp_path, cifar_dir):  # noqa: F811
    """config/paper.yaml's simulation experiment (ResNet-18, n = 12, float64, lr, coding
    cost on ResNet-18's own gradients), shrunk to a few CIFAR-shaped images and 2 steps."""
    from distlab.pgc.train import SPEC_SCHEMA, run_simulated
    from distlab.config.specs import validate_spec

    paper = yaml.safe_load((ROOT / "config/paper.yaml").read_text())["pgc"]
    spec = {"experiment": "pgc", "group": "simulation", "scheme": "pgc-cr", "backend": "simulated",
            "n": paper["n"], "s": 2, "seed": 0, "model": paper["model"], "lr": paper["lr"],
            "dtype": paper["dtype"], "code_seed": paper["code_seed"], "eval_every": 100,
            "batch_size": 2 * paper["n"], "steps": 2,
            "cluster": {"compute": {"mode": "measured", "unit_seconds": 0.0, "scale": 1.0},
                        "network": {"latency_s": 0.001, "bandwidth_Bps": 1.25e9},
                        "straggler": {"model": "exponential", "mean": 1.0},
                        "coding": paper["coding"]}}
    validate_spec(spec, SPEC_SCHEMA, "pgc")
    run_simulated(spec, cifar_dir, tmp_path, {})
    m = pd.read_csv(tmp_path / "metrics.csv")
    assert len(m) == 2 and (m["n_received"] == 10).all() and np.isfinite(m["loss"]).all()
