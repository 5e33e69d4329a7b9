"""A checkpoint whose checksum holds but whose content does not fit the run (a forged or
foreign state): a step beyond the run's planned steps, parameters of another shape.  Each is
refused in one line naming what does not fit, nothing is recorded as finished, and the file is
moved aside so a rerun starts from scratch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch
from torch import nn

from conftest import ROOT, bin_path
from distlab.results.checkpoint import Checkpointer, CheckpointRefused

SPEC = {"experiment": "baseline", "method": "single", "backend": "simulated", "seed": 0,
        "model": {"name": "logreg"}, "n_workers": 1, "batch_size": 16, "lr": 0.1, "steps": 3,
        "eval_every": 3, "dtype": "float32",
        "cluster": {"compute": {"mode": "calibrated", "unit_seconds": 0.5},
                    "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                    "straggler": {"model": "none"}}}


@pytest.mark.parametrize("state, words", [
    ({"step": 10**12}, ["step 1000000000000", "beyond this run's 3 planned steps"]),
    ({"step": 0, "params": torch.zeros(7)}, ["params", "(7,)", "2 parameters take one vector of 650 values", "1.weight of shape (10, 64)"]),
], ids=["step_beyond_plan", "wrong_shape"])
def test_a_forged_state_is_refused_in_one_line_and_a_rerun_starts_fresh(tmp_path, digits_dir, state, words):
    out = tmp_path / "run"
    ck = Checkpointer(out / "checkpoint.pt", spec=SPEC)
    if "params" not in state:  # the rest of a real state: only the step is forged
        state = {**state, "params": torch.zeros(650), "cluster": {}, "recorder": {}}
    ck.save(state)  # written by the checkpointer itself: its checksum holds
    env = {**os.environ, "PATH": bin_path(), "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "distlab", "train", "--experiment", "baseline", "--spec", json.dumps(SPEC),
           "--data", str(digits_dir), "--out", str(out)]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("distlab: ")]
    assert len(lines) == 1, r.stderr
    assert str(out / "checkpoint.pt") in lines[0] and "moved aside to checkpoint.pt.corrupt" in lines[0]
    assert "a rerun starts from scratch" in lines[0]
    for w in words:
        assert w in lines[0], lines[0]
    assert not (out / "manifest.json").exists() and not (out / "metrics.csv").exists()
    assert (out / "checkpoint.pt.corrupt").exists() and not (out / "checkpoint.pt").exists()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and (out / "manifest.json").exists(), r.stderr
    assert len(pd.read_csv(out / "metrics.csv")) == 3


def test_a_state_dict_of_another_shape_is_one_line_naming_the_parameter(tmp_path):
    """A module state (DeMo's runs load one) whose parameter has another shape: torch's
    many-line size-mismatch error becomes one line naming the parameter and both shapes, and
    the previous checkpoint, when there is one, is what a rerun resumes from."""
    path = tmp_path / "checkpoint.pt"
    spec = {"steps": 5}
    Checkpointer(path, spec=spec).save({"step": 1, "model": nn.Linear(3, 2).state_dict()})
    Checkpointer(path, spec=spec).save({"step": 2, "model": nn.Linear(4, 2).state_dict()})
    ck = Checkpointer(path, spec=spec)
    state = ck.load()
    with pytest.raises(CheckpointRefused) as e:
        with ck.restoring():
            nn.Linear(3, 2).load_state_dict(state["model"])
    msg = str(e.value)
    assert "\n" not in msg and "size mismatch for weight" in msg and "[2, 4]" in msg and "[2, 3]" in msg
    assert "resumes from the previous checkpoint checkpoint.pt.prev" in msg
    assert Checkpointer(path, spec=spec).load()["step"] == 1


@pytest.mark.parametrize("step", [-1, 6, 2.5, True])
def test_a_step_outside_the_plan_is_refused_at_load(tmp_path, step):
    path = tmp_path / "checkpoint.pt"
    Checkpointer(path, spec={"steps": 5}).save({"step": step})
    with pytest.raises(CheckpointRefused, match="not resumed; moved aside"):
        Checkpointer(path, spec={"steps": 5}).load()
    assert not path.exists() and (tmp_path / "checkpoint.pt.corrupt").exists()
    Checkpointer(path, spec={"steps": 5}).save({"step": 5})  # the last step itself is in the plan
    assert Checkpointer(path, spec={"steps": 5}).load()["step"] == 5


def test_a_nan_checkpoint_is_refused_as_the_checkpoints_own_not_the_learning_rates(tmp_path, digits_dir):
    out = tmp_path / "run"
    params = torch.zeros(650)
    params[3] = float("nan")
    Checkpointer(out / "checkpoint.pt", spec=SPEC).save({"step": 0, "params": params, "cluster": {},
                                                         "recorder": {}})
    env = {**os.environ, "PATH": bin_path(), "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "distlab", "train", "--experiment", "baseline", "--spec", json.dumps(SPEC),
           "--data", str(digits_dir), "--out", str(out)]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("distlab: ")]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "1 non-finite value(s) (NaN or inf) in params" in lines[0] and "learning rate" in lines[0]
    assert "smaller" not in lines[0] and "moved aside to checkpoint.pt.corrupt" in lines[0]
    assert not (out / "manifest.json").exists()


def test_a_loss_turned_nan_at_the_first_step_after_a_resume_blames_the_checkpoint(tmp_path):
    """A state whose non-finite values lie outside the model (an optimizer's momentum, say) passes
    the load; the loss it gives at once names the checkpoint, not the learning rate."""
    from distlab.results.runs import RunDiverged, RunRecorder

    rec = RunRecorder(tmp_path, {"lr": 0.1}, backend="simulated", clock="simulated", fail_on_divergence=True)
    rec.load_state_dict({"rows": [{"step": 0, "loss": 2.0}], "wall_s": 0.0})
    with pytest.raises(RunDiverged) as e:
        rec.log(step=1, loss=float("nan"))
    assert "first step after resuming from its checkpoint" in str(e.value) and "smaller" not in str(e.value)
    fresh = RunRecorder(tmp_path, {"lr": 0.1}, backend="simulated", clock="simulated", fail_on_divergence=True)
    fresh.log(step=0, loss=2.0)
    with pytest.raises(RunDiverged, match="lr 0.1: try a smaller one"):
        fresh.log(step=1, loss=float("nan"))


def test_demo_refuses_complex_parameters_in_one_line_and_steps_past_zero_size_ones():
    from distlab.techniques.demo.optim import DeMo

    with pytest.raises(ValueError) as e:
        DeMo([nn.Parameter(torch.zeros(4, 4, dtype=torch.complex64))], lr=0.01)
    assert "\n" not in str(e.value) and "parameter 0 of param group 0 is torch.complex64" in str(e.value)
    empty, w = nn.Parameter(torch.zeros(0)), nn.Parameter(torch.ones(4, 4))
    opt = DeMo([empty, w], lr=0.01, compression_chunk=4, compression_topk=2)
    (w.square().sum() + empty.sum()).backward()
    opt.step()
    assert empty.numel() == 0 and not torch.equal(w.detach(), torch.ones(4, 4))


def test_a_local_learning_run_refuses_a_state_of_another_shape_in_one_line(tmp_path):
    """P3's runs resume through one helper (Resume.start): a module state of another shape is the
    same one-line refusal, and the file is moved aside."""
    from distlab.local.rc import Result, Resume

    path = tmp_path / "checkpoint.pt"
    spec = {"steps": 10}
    Checkpointer(path, spec=spec).save({"t": 3, "model": nn.Linear(5, 2).state_dict(), "optimizers": [],
                                        "rows": [], "train_s": 0.0, "extra": None})
    model = nn.Linear(4, 2)
    with pytest.raises(CheckpointRefused) as e:
        Resume(Checkpointer(path, spec=spec), model, []).start(Result())
    assert "\n" not in str(e.value) and "size mismatch for weight" in str(e.value)
    assert not path.exists() and (tmp_path / "checkpoint.pt.corrupt").exists()


def test_a_pgc_run_refuses_a_state_of_another_length_and_sets_the_file_aside(tmp_path, digits_dir):
    """P1's simulated trainer: a checkpoint whose parameter vector has another length is one
    CheckpointRefused line naming it, the file is moved aside, and the rerun starts afresh."""
    from conftest import pgc_spec
    from distlab.pgc import train

    spec = pgc_spec("pgc-cr", 1, steps=6)
    spec.pop("checkpoint", None)
    out = tmp_path / "run"
    ck = Checkpointer(out / "checkpoint.pt", spec=spec)
    ck.save({"step": 0, "params": torch.zeros(7), "cluster": {}, "recorder": {}, "workers": [],
             "units": [0.0] * 4, "counters": {}})
    with pytest.raises(CheckpointRefused) as e:
        train.run_simulated(spec, digits_dir, out, None)
    line = str(e.value)
    assert "\n" not in line and "checkpoint.pt" in line and "moved aside" in line, line
    assert (out / "checkpoint.pt.corrupt").exists() and not (out / "checkpoint.pt").exists()
    train.run_simulated(spec, digits_dir, out, None)
    assert len(pd.read_csv(out / "metrics.csv")) > 0
