"""Free-running asynchronous RC on real processes: it trains, every applied report's readout
staleness stays within its bound, and a section that dies fails the run at once, named in one
line (also through the CLI, with no traceback; a successful run logs none either)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from distlab.local import processes, rc, rc_async
from distlab.local.model import TextData, build_gpt, flat, split_gpt
from distlab.local.rc_async import train_rc_async

MODEL = {"name": "gpt", "n_layer": 6, "n_head": 2, "d_model": 16, "block_size": 16}
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pydoc(tmp_path_factory):
    from distlab.data import prepare_dataset

    out = tmp_path_factory.mktemp("local_async") / "pydoc"
    prepare_dataset({"name": "pydoc", "kind": "text", "source": "pydoc_topics",
                     "val_fraction": 0.05, "test_fraction": 0.05}, out, seed=0)
    return out


def spec_for(**kw):
    s = {"experiment": "local", "method": "rc", "mode": "async", "seed": 3, "model": dict(MODEL),
         "batch_size": 4, "steps": 12, "lr": 3e-3, "eval_every": 100, "threads": 1, "sections": 3,
         "delay": 1, "worker_threads": 1, "staleness_bound": 1,
         "eval": {"batches": 1, "batch_size": 4, "final_batches": 1}}
    s.update(kw)
    return s


def run_async(pydoc, s, timeout=60):
    torch.set_num_threads(1)
    data = TextData(pydoc, s["model"]["block_size"], s["batch_size"], s["seed"])
    split = split_gpt(build_gpt(s["model"], s["seed"]), s["sections"])
    before = flat([p.detach() for p in split.gpt.parameters()])
    ev = rc.Evaluator(data, s)
    res = train_rc_async(s, str(pydoc), data, split, evaluator=ev, timeout=timeout)
    return res, split, before


@pytest.mark.parametrize("bound", [0, 2])
def test_async_sections_train_on_processes_within_the_staleness_bound(pydoc, bound):
    s = spec_for(staleness_bound=bound)
    res, split, before = run_async(pydoc, s)
    assert res.processes == s["sections"] + 1 and len(res.per_process) == res.processes
    assert len(res.rows) == s["steps"]  # one row per K reports taken
    assert len(res.staleness) == s["sections"]
    for st in res.staleness:
        assert st["updates"] == s["steps"]
        assert st["applied"] + st["dropped"] == s["steps"]  # every report taken, applied or dropped
        assert st["applied"] >= 1
        assert 0 <= st["readout_staleness_max"] <= bound  # the bound holds for every applied report
        assert st["readout_staleness_mean"] <= st["readout_staleness_max"]
        assert st["activation_age_max"] >= 0 and st["activation_age_mean"] >= 0
    assert res.staleness[0]["activation_age_max"] == 0  # section 0 reads the data, not a section
    after = flat([p.detach() for p in split.gpt.parameters()])
    assert not torch.allclose(before, after)  # every part moved, the readout included
    assert all(torch.isfinite(torch.tensor([r["loss"] for r in res.rows])))
    assert res.rows[-1]["val_loss"] == res.rows[-1]["val_loss"]  # evaluated at the end


def test_async_run_has_a_held_out_curve_from_its_sections_snapshots(pydoc):
    """The free-running sections share no step, so the model at update i is every section right
    after its own update i with the readout once the slowest finished it: evaluated after
    training into the rows of the evaluation steps (what the settled-gap precondition reads)."""
    s = spec_for(steps=12, eval_every=4)
    assert rc_async.snapshot_steps(s) == [0, 4, 8]  # the last (11) is the final model's own
    res, split, _ = run_async(pydoc, s)
    evaluated = [r["step"] for r in res.rows if r["val_loss"] == r["val_loss"]]  # not NaN
    assert evaluated == [0, 4, 8, 11]
    assert res.rows[0]["val_loss"] != res.rows[-1]["val_loss"]  # the snapshots are not the final model
    # the final readout is put back after the snapshots: the split is the final model
    data = TextData(pydoc, s["model"]["block_size"], s["batch_size"], s["seed"])
    assert rc.Evaluator(data, s).at_eval(split)["val_loss"] == pytest.approx(res.rows[-1]["val_loss"], abs=1e-6)


def test_async_snapshots_hold_the_sections_parameters_exactly(pydoc):
    """At lr 0 nothing moves, so every snapshot is the initial model: each row's loss is its loss."""
    s = spec_for(steps=9, eval_every=3, lr=0.0)
    res, split, _ = run_async(pydoc, s)
    data = TextData(pydoc, s["model"]["block_size"], s["batch_size"], s["seed"])
    init = split_gpt(build_gpt(s["model"], s["seed"]), s["sections"])
    want = rc.Evaluator(data, s).at_eval(init)["val_loss"]
    got = [r["val_loss"] for r in res.rows if r["val_loss"] == r["val_loss"]]
    assert len(got) == 4 and got == pytest.approx([want] * 4, abs=1e-6)


def test_an_async_run_without_an_evaluator_keeps_no_snapshots(pydoc):
    s = spec_for()
    split = split_gpt(build_gpt(s["model"], s["seed"]), s["sections"])
    sh = rc_async.AsyncShared(split, s)
    assert sh.snap_params == [] and sh.snap_readout is None and sh.snap_at == {}


def test_a_killed_async_section_fails_the_run_at_once_naming_it(pydoc, monkeypatch):
    orig = rc.SectionTrainer.step

    def die(self, h_in, y, emit, t=0):  # inherited by the forked section processes
        if self.k == 1 and t == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return orig(self, h_in, y, emit, t)

    monkeypatch.setattr(rc.SectionTrainer, "step", die)
    with pytest.raises(rc.SectionFailure) as err:
        run_async(pydoc, spec_for(steps=200), timeout=300)
    # at the next poll, not by the timeout: the cause named is the kill (no wall clock decides)
    msg = str(err.value)
    assert msg == "RC asynchronous run failed: rc-section-1 was killed by SIGKILL"


def test_a_section_killed_holding_the_readouts_lock_is_named_and_the_run_ends(pydoc, monkeypatch):
    """A section takes the readout's lock to copy the consensus; killed there, it leaves the lock
    taken for good.  The coordinator, which takes the same lock to publish, must still name it
    and end the run (it used to wait on the lock for ever, and the CLI never exited)."""
    orig, calls = rc_async.load_flat, []

    def copy_then_die(params, vec):  # inherited by the forked section processes
        if multiprocessing.current_process().name == "rc-section-2":
            calls.append(1)
            if len(calls) == 4:
                os.kill(os.getpid(), signal.SIGKILL)
        return orig(params, vec)

    monkeypatch.setattr(rc_async, "load_flat", copy_then_die)
    got = []

    def run():
        try:
            run_async(pydoc, spec_for(steps=100000), timeout=30)
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            got.append(e)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(timeout=300)
    assert not th.is_alive(), "the coordinator is still waiting on the dead section's lock"
    assert len(got) == 1 and isinstance(got[0], rc.SectionFailure), got
    assert str(got[0]) == "RC asynchronous run failed: rc-section-2 was killed by SIGKILL"


def test_a_killed_lock_step_section_is_named_before_the_timeout(pydoc, monkeypatch):
    orig = rc.SectionTrainer.step

    def die(self, h_in, y, emit, t=0):
        if self.k == 1 and t == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return orig(self, h_in, y, emit, t)

    monkeypatch.setattr(rc.SectionTrainer, "step", die)
    s = spec_for(mode="parallel", concurrency="process", steps=50)
    data = TextData(pydoc, MODEL["block_size"], 4, 3)
    with pytest.raises(rc.SectionFailure) as err:
        processes.train_rc_parallel(s, str(pydoc), data, split_gpt(build_gpt(MODEL, 3), 3), timeout=300)
    assert str(err.value) == "RC parallel run failed: rc-section-1 was killed by SIGKILL"


def _cli(pydoc, out, spec):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "distlab", "train", "--experiment", "local",
                             "--spec", json.dumps(spec), "--runtime", json.dumps({"timeout_s": 30}),
                             "--data", str(pydoc), "--out", str(out)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _section_pid(pid: int, name: str, wait: float = 60.0) -> int:
    t0 = time.monotonic()
    while time.monotonic() - t0 < wait:
        try:
            kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            kids = []
        for kid in kids:
            try:
                if Path(f"/proc/{kid}/comm").read_text().strip() == name:
                    return int(kid)
            except OSError:
                pass
        time.sleep(0.05)
    raise AssertionError(f"no {name} under {pid}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc children")
@pytest.mark.parametrize("mode", ["async", "parallel"])
def test_the_cli_names_a_killed_section_in_one_line(pydoc, tmp_path, mode):
    spec = spec_for(mode=mode, concurrency="process", steps=100000, eval_every=100000)
    proc = _cli(pydoc, tmp_path / "run", spec)
    try:
        victim = _section_pid(proc.pid, "rc-section-2")
        time.sleep(0.5)
        os.kill(victim, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:  # never leave a run behind (its sections die with it)
            proc.kill()
            proc.wait()
    assert proc.returncode != 0  # the cause below is the kill, not the run's timeout
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if "rc-section" in ln]
    want = {"async": "asynchronous", "parallel": "parallel"}[mode]
    assert lines == [f"distlab: RC {want} run failed: rc-section-2 was killed by SIGKILL"]
    assert not (tmp_path / "run" / "manifest.json").exists()


def test_a_successful_parallel_run_logs_no_traceback(pydoc, tmp_path):
    """The lock-step mode's log is checked by the workflow test (tiny config, every method)."""
    mode = "async"
    spec = spec_for(mode=mode, concurrency="process", steps=8, eval_every=4)
    proc = _cli(pydoc, tmp_path / "run", spec)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err and "Error" not in err
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert man["processes"] == 4 and man["memory"]["pss_mb"] > 0
    if mode == "async":
        assert [s["section"] for s in man["staleness"]] == [0, 1, 2]
