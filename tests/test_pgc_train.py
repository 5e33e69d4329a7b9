"""Training under the gradient-coding schemes on the simulated cluster."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from distlab.pgc.train import Setup, run_simulated

from conftest import pgc_spec


def _run(tmp_path, digits_dir, name, spec):
    out = tmp_path / name
    run_simulated(spec, digits_dir, out)
    return pd.read_csv(out / "metrics.csv"), json.loads((out / "manifest.json").read_text())


def test_pgc_with_s0_is_exactly_dgd(tmp_path, digits_dir):
    dgd, _ = _run(tmp_path, digits_dir, "dgd", pgc_spec("dgd", 0))
    for scheme in ("pgc-fr", "pgc-cr"):
        pgc, _ = _run(tmp_path, digits_dir, scheme, pgc_spec(scheme, 0))
        for col in ("loss", "time", "train_loss_full"):
            np.testing.assert_array_equal(pgc[col].to_numpy(), dgd[col].to_numpy())


@pytest.mark.parametrize("scheme", ["gc-fr", "gc-cr"])
def test_gc_follows_the_dgd_trajectory_at_more_compute(tmp_path, digits_dir, scheme):
    dgd, dgd_m = _run(tmp_path, digits_dir, "dgd", pgc_spec("dgd", 0))
    gc, gc_m = _run(tmp_path, digits_dir, scheme, pgc_spec(scheme, 1))
    # exact decoding: the same full gradient every step (float64, up to rounding)
    assert np.abs(gc_m["final"]["train_loss_full"] - dgd_m["final"]["train_loss_full"]) < 1e-10
    # each GC worker evaluates s+1 = 2 partitions a step; DGD one
    assert gc_m["units_per_worker_step"] == pytest.approx(2.0)
    assert dgd_m["units_per_worker_step"] == pytest.approx(1.0)
    assert (gc["compute_max"] >= 2 * 0.5 - 1e-12).all()
    assert (dgd["compute_max"] == 0.5).all()


@pytest.mark.parametrize("scheme,s", [("pgc-cr", 1), ("pgc-cr", 3), ("pgc-fr", 1)])
def test_pgc_computes_one_partition_a_step_with_bounded_staleness(tmp_path, digits_dir, scheme, s):
    steps = 12
    m, man = _run(tmp_path, digits_dir, scheme, pgc_spec(scheme, s, steps=steps))
    # start-up computes all s+1 partitions once; then one a step
    assert man["units_per_worker_step"] == pytest.approx((steps + s) / steps)
    assert m["staleness"].max() == s
    assert (m["staleness"] <= s).all()


def test_master_uses_the_fastest_n_minus_s(tmp_path, digits_dir):
    m, _ = _run(tmp_path, digits_dir, "is", pgc_spec("is-sgd", 1))
    assert (m["n_received"] == 3).all()
    d, _ = _run(tmp_path, digits_dir, "dgd", pgc_spec("dgd", 0))
    assert (d["n_received"] == 4).all()
    # same seed, same delays: waiting for 3 of 4 is never slower than for all 4
    assert (m["time"].to_numpy() <= d["time"].to_numpy() + 1e-12).all()


def test_each_step_draws_fresh_mini_batches(digits_dir):
    S = Setup(pgc_spec("dgd", 0), digits_dir)
    b = S.batchers[0]
    first = [tuple(b.batch(t)) for t in range(b.steps_per_epoch)]
    assert len(set(first)) == len(first)        # no mini-batch re-read within an epoch
    seen = np.concatenate([b.batch(t) for t in range(b.steps_per_epoch)])
    assert len(set(seen.tolist())) == len(seen)  # without replacement
    assert not np.array_equal(b.batch(0), b.batch(b.steps_per_epoch))  # reshuffled next epoch


def test_invalid_settings_fail_clearly(digits_dir):
    from distlab.pgc.coding import CodingError

    with pytest.raises(CodingError, match="5"):
        Setup(pgc_spec("gc-fr", 1, n=5), digits_dir)
    with pytest.raises(ValueError, match="no sample per partition"):
        Setup(pgc_spec("dgd", 0, batch_size=2), digits_dir)


def test_threshold_stop_ends_a_run_where_both_rules_hold():
    from distlab.pgc.train import ThresholdStop
    thr = {"loss": 1.0, "repeat": 2, "window": 3, "stop": True}
    losses = [3.0, 0.9, 2.5, 0.5, 0.4, 0.3, 0.2]
    # the paper's rule holds after 5 losses (0.5, 0.4); the mean of the last 3 after 6 (0.4)
    st = ThresholdStop(thr, [])
    ends = [st.update(v) for v in losses]
    assert ends.index(True) == 5 and st.stopped_at == 6
    # rebuilt from the losses a checkpoint holds, it stops where an uninterrupted run does
    assert ThresholdStop(thr, losses[:6]).stopped_at == 6
    assert ThresholdStop(thr, losses[:4]).stopped_at is None
    # without stop (or without a threshold) it never ends a run
    off = ThresholdStop({**thr, "stop": False}, [])
    assert not any(off.update(v) for v in losses) and off.stopped_at is None
    assert not ThresholdStop(None, []).update(0.0)


def test_a_run_with_threshold_stop_ends_at_the_rule_and_its_summary_agrees(tmp_path, digits_dir):
    from distlab.results.summarize import steps_to_threshold, steps_to_threshold_ma
    thr = {"loss": 1.5, "repeat": 2, "window": 3}
    full, _ = _run(tmp_path, digits_dir, "full", pgc_spec("pgc-cr", 1, steps=60, threshold=thr))
    cut, man = _run(tmp_path, digits_dir, "cut", pgc_spec("pgc-cr", 1, steps=60, threshold={**thr, "stop": True}))
    k = max(steps_to_threshold(full["loss"].to_numpy(), 1.5, 2), steps_to_threshold_ma(full["loss"].to_numpy(), 1.5, 3))
    assert k < 60 and len(cut) == k == man["stopped_at_threshold"]
    assert np.array_equal(cut["loss"].to_numpy(), full["loss"].to_numpy()[:k])   # the same run, ended early
