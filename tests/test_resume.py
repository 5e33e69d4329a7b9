"""A run killed with SIGKILL resumes from its checkpoint and ends exactly where an
uninterrupted run ends (simulated backend, calibrated compute, CPU)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from conftest import bin_path, pgc_spec


RUNTIME = {"checkpoint": {"every_s": 0, "every_steps": 10}}


def _train_cmd(spec, data, out, runtime=RUNTIME):
    return [sys.executable, "-m", "distlab", "train", "--experiment", "pgc",
            "--spec", json.dumps(spec), "--runtime", json.dumps(runtime),
            "--data", str(data), "--out", str(out)]


@pytest.mark.slow
def test_kill_and_resume_gives_identical_metrics(tmp_path, digits_dir):
    spec = pgc_spec("pgc-cr", 1, steps=400, eval_every=20, model={"name": "cnn"})
    spec.pop("checkpoint", None)
    env = {**os.environ, "PATH": bin_path(), "OMP_NUM_THREADS": "1"}
    ref = tmp_path / "ref"
    subprocess.run(_train_cmd(spec, digits_dir, ref), check=True, env=env,
                   capture_output=True, timeout=600)

    out = tmp_path / "killed"
    proc = subprocess.Popen(_train_cmd(spec, digits_dir, out), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = out / "checkpoint.pt"
    deadline = time.time() + 120
    while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)  # let it run past the checkpoint
    assert proc.poll() is None, "the run finished before it could be killed; make it longer"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert ckpt.exists()
    assert not (out / "manifest.json").exists()   # a killed run leaves nothing that looks complete
    assert not (out / "metrics.csv").exists()

    subprocess.run(_train_cmd(spec, digits_dir, out), check=True, env=env,
                   capture_output=True, timeout=600)
    a = pd.read_csv(ref / "metrics.csv")
    b = pd.read_csv(out / "metrics.csv")
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    manifest = json.loads((out / "manifest.json").read_text())
    reference = json.loads((ref / "manifest.json").read_text())
    assert manifest["resumed"] == 1
    assert manifest["final"] == reference["final"]
    assert not ckpt.exists()
    # the counters were checkpointed: the resumed manifest reports the whole run's work
    assert manifest["units_per_worker_step"] == reference["units_per_worker_step"]
    assert manifest["bytes_total"] == reference["bytes_total"]
    # the wall-clock counters are carried too; their values are timings (not compared here: the
    # machines are shared and noisy), so only that they are there and count something
    for k in ("gradient_compute_s", "simulator_overhead_s"):
        assert manifest[k] > 0, k


@pytest.mark.slow
def test_a_checkpoint_of_another_spec_is_refused(tmp_path, digits_dir):
    """Killed at lr 0.1 and rerun at lr 0.05: the old checkpoint is not resumed."""
    from distlab.pgc.train import run_simulated
    from distlab.results.checkpoint import Checkpointer

    spec = pgc_spec("pgc-cr", 1, steps=30)
    spec.pop("checkpoint", None)
    out = tmp_path / "run"
    Checkpointer(out / "checkpoint.pt", spec=spec).save({"step": 20})   # as if killed at step 20
    changed = {**spec, "lr": 0.05}
    run_simulated(changed, digits_dir, out, {"checkpoint": {"every_s": 0, "every_steps": 0}})
    manifest = json.loads((out / "manifest.json").read_text())
    assert "resumed" not in manifest and manifest["spec"]["lr"] == 0.05
    assert pd.read_csv(out / "metrics.csv")["step"].tolist() == list(range(30))
