"""Simulated jobs have a job timeout, as real ones do: past
``runtime.job_timeout_s`` the job stops with one line naming the setting, and its
checkpoint stays for a rerun."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import ROOT, bin_path, pgc_spec
from distlab.runtime.deadline import JobTimeout, job_deadline


def test_the_deadline_interrupts_the_body_and_is_removed_afterwards():
    with pytest.raises(JobTimeout, match="runtime.job_timeout_s"):
        with job_deadline(0.2, "test job"):
            while True:
                time.sleep(0.01)
    with job_deadline(5.0, "test job"):   # a body that ends in time is left alone
        pass
    time.sleep(0.05)                      # and no alarm is left armed
    with job_deadline(None):
        pass


def test_a_deadline_is_not_swallowed_by_except_exception():
    with pytest.raises(JobTimeout):
        with job_deadline(0.2):
            try:
                while True:
                    time.sleep(0.01)
            except Exception:  # noqa: BLE001 - what a driver's own handler might do
                pytest.fail("JobTimeout caught as an Exception")


def _train(tmp_path, digits_dir, spec, runtime, **env_over):
    out = tmp_path / "run"
    env = {**os.environ, "PATH": bin_path(), "PYTHONPATH": str(ROOT / "src"), **env_over}
    r = subprocess.run([sys.executable, "-m", "distlab", "train", "--experiment", "pgc",
                        "--spec", json.dumps(spec), "--runtime", json.dumps(runtime),
                        "--data", str(digits_dir), "--out", str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    return r, out


def test_a_hung_simulated_job_is_stopped_with_one_line_naming_its_step(tmp_path, digits_dir):
    """`distlab train` on the simulated backend whose 6th step never ends (a hang injected
    for tests), under job_timeout_s = 3 s: stopped, named, its checkpoint kept."""
    spec = pgc_spec("pgc-cr", 1, steps=40, eval_every=10**6)
    spec.pop("checkpoint", None)
    runtime = {"timeout_s": 30, "job_timeout_s": 3, "checkpoint": {"every_s": 0, "every_steps": 2}}
    r, out = _train(tmp_path, digits_dir, spec, runtime, DISTLAB_TEST_HANG_AT_STEP="6")
    assert r.returncode == 1, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if "runtime.job_timeout_s" in ln]
    assert len(lines) == 1 and lines[0].startswith("distlab: simulated pgc job ran past "), r.stderr[-2000:]
    assert "was stopped at step 5 of 40" in lines[0]
    assert "Traceback" not in r.stderr
    assert (out / "checkpoint.pt").exists() and not (out / "manifest.json").exists()


def test_a_slowed_simulated_job_outlives_the_floor_and_finishes(tmp_path, digits_dir):
    """Each step slowed by 0.15 s (a loaded machine, injected for tests): 30 steps take over
    4.5 s, past job_timeout_s = 2 s, yet the job finishes -- its deadline follows its pace."""
    spec = pgc_spec("pgc-cr", 1, steps=30, eval_every=10)
    spec.pop("checkpoint", None)
    runtime = {"timeout_s": 30, "job_timeout_s": 2, "checkpoint": {"every_s": 0, "every_steps": 0}}
    t0 = time.perf_counter()
    r, out = _train(tmp_path, digits_dir, spec, runtime, DISTLAB_TEST_STEP_SLEEP_S="0.15")
    assert r.returncode == 0, r.stderr[-2000:]
    assert time.perf_counter() - t0 > 2 + 30 * 0.15 - 2  # it ran well past the floor's 2 s of steps
    assert (out / "manifest.json").exists()


def test_the_scaled_deadline_follows_the_pace_and_stops_a_stall():
    from distlab.runtime.deadline import progress

    t0 = time.monotonic()
    with job_deadline(0.3, "paced job", work=20):   # 20 steps of 0.05 s: 1 s, past the 0.3 s floor
        for _ in range(20):
            time.sleep(0.05)
            progress()
    assert time.monotonic() - t0 > 0.9
    with pytest.raises(JobTimeout, match=r"stopped at step 3 of 20"):  # raised inside the hang: its cause
        with job_deadline(0.3, "paced job", work=20):
            for _ in range(3):
                time.sleep(0.05)
                progress()
            time.sleep(30)                           # hung: 2 x 20 x 0.05 s after the first step


def test_a_placement_search_follows_its_pace_and_a_hung_one_stops_with_one_line(tmp_path):
    """`distlab train --experiment placement` (a simulated search: its steps are simulator evaluations) under
    job_timeout_s = 20 s (past an interpreter's start on a 2-core machine with a busy process on
    each core beside the suite): slowed by 1.2 s a call of 4 evaluations (20 calls) it runs past
    the floor and finishes; hung at its 5th evaluation it is stopped, named in one line."""
    import yaml

    from distlab.placement import costs, graphs

    p = yaml.safe_load((ROOT / "config/config.yaml").read_text())["placement"]
    model = {"name": "bert", "batch": 1, "seq": 8, "layers": 1, "hidden": 16, "heads": 2, "ffn": 32,
             "vocab": 30}
    graphs.save_graph(graphs.extract(model), tmp_path / "g.json")
    (tmp_path / "p.json").write_text(json.dumps(costs.profile(model, repeats=1, warmup=0)))
    from distlab.placement import workflow as wf

    p = {**p, "budget": 40, "seeds": [0, 1], "single_device": "allow",
         "models": {**p["models"], "bert": model}}
    spec = {**json.loads(wf.run_spec(p, p["default_pair"], "bert", "random", graph=str(tmp_path / "g.json"),
                                     profile=str(tmp_path / "p.json"))), "options": {"batch": 4}}
    runtime = {"timeout_s": 30, "job_timeout_s": 20, "checkpoint": {"every_s": 0, "every_steps": 1}}
    env = {**os.environ, "PATH": bin_path(), "PYTHONPATH": str(ROOT / "src")}

    def search(**over):
        (tmp_path / "run.ckpt").unlink(missing_ok=True)
        return subprocess.run([sys.executable, "-m", "distlab", "train", "--experiment", "placement",
                               "--spec", json.dumps(spec), "--out", str(tmp_path / "run.json"),
                               "--runtime", json.dumps(runtime)],
                              cwd=ROOT, env={**env, **over}, capture_output=True, text=True, timeout=240)

    t0 = time.monotonic()
    r = search(DISTLAB_TEST_STEP_SLEEP_S="1.2")
    assert r.returncode == 0 and time.monotonic() - t0 > 24, r.stderr[-2000:]  # 80 evaluations, past the floor
    assert (tmp_path / "run.json").exists()
    (tmp_path / "run.json").unlink()
    r = search(DISTLAB_TEST_HANG_AT_STEP="5")
    assert r.returncode == 1, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if "runtime.job_timeout_s" in ln]
    assert len(lines) == 1 and lines[0].startswith("distlab: simulated placement job ran past "), r.stderr[-2000:]
    assert "stopped at step 4 of 80" in lines[0], lines[0]
    assert not (tmp_path / "run.json").exists()


def test_a_deadline_inside_a_deferred_section_strikes_when_it_ends():
    from distlab.runtime.deadline import deadline_deferred

    reached = []
    with pytest.raises(JobTimeout):
        with job_deadline(0.05):
            with deadline_deferred():
                time.sleep(0.3)          # the deadline falls here
                reached.append("end of section")
            reached.append("after")      # never: it strikes as the section ends
    assert reached == ["end of section"]


def test_a_deadline_striking_at_any_instant_leaves_nothing_armed():
    """Deadlines shorter than the set-up, or falling as the body ends: whatever happens,
    afterwards the alarm handler is the old one and no watchdog is left to kill the process."""
    import signal
    import threading

    before = signal.getsignal(signal.SIGALRM)
    for i in range(300):
        try:
            with job_deadline(1e-6 * (i % 30 + 1)):
                pass
        except JobTimeout:
            pass
        assert signal.getsignal(signal.SIGALRM) is before
    time.sleep(0.05)
    assert not [t for t in threading.enumerate() if isinstance(t, threading.Timer) and t.is_alive()
                and not t.finished.is_set()]


def test_a_forked_job_follows_its_ranks_pace_and_a_hung_one_is_stopped(tmp_path):
    """The fork launcher with work = 20 steps: ranks slowed past the 1 s floor finish; ranks
    hung at their 4th step are stopped, named with the step and the ranks still running."""
    import textwrap

    job = textwrap.dedent("""
        import sys, time
        from distlab.runtime.deadline import progress
        from distlab.runtime.launch import run_forked

        def target():
            for _ in range(20):
                time.sleep(0.1)
                progress()

        try:
            run_forked(target, 2, threads=2, timeout_s=1.0, work=20)
        except RuntimeError as e:
            print(f"distlab: {e}", file=sys.stderr)
            sys.exit(1)
        print("finished")
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", job], env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0 and "finished" in r.stdout, r.stderr[-2000:]  # 2 s of steps, 1 s floor
    r = subprocess.run([sys.executable, "-c", job], env={**env, "DISTLAB_TEST_HANG_AT_STEP": "4"},
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 1, r.stderr[-2000:]
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("distlab: "))
    assert "stopped at step 3 of 20" in line and "ranks still running: [0, 1]" in line, line


_RANK_SCRIPT = """
import sys, time
from distlab.runtime.deadline import progress

for _ in range(int(sys.argv[1])):
    time.sleep(float(sys.argv[2]))
    progress()
print("rank done")
"""


def test_a_torchrun_job_follows_its_ranks_pace_and_a_hung_one_is_stopped(tmp_path, monkeypatch):
    """The torchrun launcher with work = 30 steps and a 12 s floor (torchrun's own start-up,
    several seconds on a loaded machine, counts against it): ranks slowed to 0.5 s a step
    (15 s of steps, past the floor) finish; ranks hung at their 4th step are stopped at the
    floor, in one line naming the step."""
    from distlab.runtime.launch import run_torchrun

    script = tmp_path / "rank.py"
    script.write_text(_RANK_SCRIPT)
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    monkeypatch.delenv("DISTLAB_TEST_HANG_AT_STEP", raising=False)
    t0 = time.monotonic()
    with open(tmp_path / "slow.log", "w") as log:
        run_torchrun(["30", "0.5"], 2, threads=2, timeout_s=12.0, script=script, stream=log, work=30)
    assert time.monotonic() - t0 > 15
    assert (tmp_path / "slow.log").read_text().count("rank done") == 2
    monkeypatch.setenv("DISTLAB_TEST_HANG_AT_STEP", "4")
    with open(tmp_path / "hung.log", "w") as log, pytest.raises(RuntimeError) as err:
        run_torchrun(["30", "0"], 2, threads=2, timeout_s=12.0, script=script, stream=log, work=30)
    line = str(err.value)
    assert "\n" not in line and line.startswith("torchrun job of 2 ranks ran past"), line
    assert "stopped at step 3 of 30" in line, line
    assert (tmp_path / "hung.log").read_text().startswith(line)  # the log leads with it


def test_real_execution_follows_its_pace_and_a_hung_round_is_stopped(tmp_path, monkeypatch):
    """placement-real's rounds (two device processes) under a 6 s floor, slowed to 0.6 s a
    round and hung at the 12th of 12: the slowed rounds run past the floor (11 x 0.6 s), and
    the hung one is stopped in one line naming its step (one executor for both halves)."""
    from distlab.placement import costs, graphs, realexec
    from distlab.placement.realexec import compare

    # the link's measurement (a spawned echo process) is not what is tested: a fixed link
    monkeypatch.setattr(realexec, "measure_process_link", lambda: {"latency_us": 50.0, "gbps": 5.0})
    model = {"name": "bert", "batch": 1, "seq": 8, "layers": 1, "hidden": 16, "heads": 2, "ffn": 32,
             "vocab": 30}
    graphs.save_graph(graphs.extract(model), tmp_path / "g.json")
    (tmp_path / "p.json").write_text(json.dumps(costs.profile(model, repeats=1, warmup=0)))
    spec = {"model": model, "model_name": "bert", "repeats": 4, "warmup": 0}
    monkeypatch.setenv("DISTLAB_TEST_STEP_SLEEP_S", "0.6")
    monkeypatch.setenv("DISTLAB_TEST_HANG_AT_STEP", "12")
    with pytest.raises(JobTimeout) as err:
        compare(spec, tmp_path / "g.json", tmp_path / "p.json", timeout_s=6.0, startup_s=300)
    m = re.match(r"real execution \(placement-real\) ran past (\d+) s and was stopped at step 11 of 12",
                 str(err.value))
    assert m and int(m.group(1)) > 6 and "\n" not in str(err.value), str(err.value)
