"""The fork server (distlab.runtime.forkserver) that `make reproduce` runs the workflow's jobs under:
a job forked from it gives the numbers, output and exit status a fresh process gives; a
killed or signalled client takes its job with it; what must run fresh does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest

from conftest import ROOT, bin_path, pgc_spec
from distlab.runtime import forkserver

ENV = {**os.environ, "PATH": bin_path(), "PYTHONPATH": str(ROOT / "src")}
ENV.pop(forkserver.ENV, None)
ENV.pop("DISTLAB_CPU_ISA", None)


@pytest.fixture
def server(tmp_path):
    """A fork server serving a `sleep` (so it stays up): (its process, its socket)."""
    sock = tmp_path / "fs.sock"
    proc = subprocess.Popen([sys.executable, "-m", "distlab", "forkserver", "--socket", str(sock), "--",
                             "sleep", "600"], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not sock.exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the fork server did not start listening"
        time.sleep(0.1)
    time.sleep(0.3)  # the sleep has started: the server is in its loop
    yield proc, sock
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def _train_cmd(digits_dir, out, spec, runtime):
    return [sys.executable, "-m", "distlab", "train", "--experiment", "pgc", "--spec", json.dumps(spec),
            "--runtime", json.dumps(runtime), "--data", str(digits_dir), "--out", str(out)]


def _children(proc) -> list[psutil.Process]:
    return [c for c in psutil.Process(proc.pid).children() if c.name() != "sleep"]


def test_a_forked_job_gives_a_fresh_process_numbers_output_and_status(server, tmp_path, digits_dir):
    proc, sock = server
    spec = pgc_spec("pgc-cr", 1, steps=12, eval_every=4)
    spec.pop("checkpoint", None)
    runtime = {"timeout_s": 30, "job_timeout_s": 300, "checkpoint": {"every_s": 0, "every_steps": 0}}
    runs = {}
    for how, env in (("fresh", ENV), ("forked", {**ENV, forkserver.ENV: str(sock)})):
        out = tmp_path / how
        r = subprocess.run(_train_cmd(digits_dir, out, spec, runtime), cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        runs[how] = (r, out)
    man = {h: json.loads((o / "manifest.json").read_text()) for h, (_, o) in runs.items()}
    assert man["fresh"]["process"] == "fresh" and man["forked"]["process"] == "forked"
    a, b = (pd.read_csv(runs[h][1] / "metrics.csv") for h in ("fresh", "forked"))
    measured = {"time", "step_time", "compute_s", "wall_s", "collective_s"}
    same = [c for c in a.columns if not any(m in c for m in measured)]
    assert "loss" in same
    pd.testing.assert_frame_equal(a[same], b[same])  # bit for bit: no tolerance
    # the child wrote to the client's stderr: the run's progress lines arrived
    assert "12/12" in runs["forked"][0].stderr and "12/12" in runs["fresh"][0].stderr
    # a user's error: the same one line and exit 2 as a fresh process
    bad = {**spec, "steps": -1}
    errs = [subprocess.run(_train_cmd(digits_dir, tmp_path / f"bad{i}", bad, runtime), cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
            for i, env in enumerate((ENV, {**ENV, forkserver.ENV: str(sock)}))]
    assert [e.returncode for e in errs] == [2, 2]
    assert errs[0].stderr == errs[1].stderr and len(errs[1].stderr.strip().splitlines()) == 1
    assert _children(proc) == []


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_signalled_or_killed_client_takes_its_job_with_it(server, tmp_path, digits_dir, how):
    proc, sock = server
    spec = pgc_spec("pgc-cr", 1, steps=40, eval_every=10**6)
    spec.pop("checkpoint", None)
    runtime = {"timeout_s": 30, "job_timeout_s": 600, "checkpoint": {"every_s": 0, "every_steps": 0}}
    client = subprocess.Popen(_train_cmd(digits_dir, tmp_path / "run", spec, runtime), cwd=ROOT,
                              env={**ENV, forkserver.ENV: str(sock), "DISTLAB_TEST_HANG_AT_STEP": "3"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not _children(proc):
        assert client.poll() is None and time.monotonic() < deadline, "the job was not forked"
        time.sleep(0.1)
    job = _children(proc)[0]
    client.send_signal(getattr(signal, how))
    status = client.wait(timeout=60)
    job.wait(timeout=30)  # the job is gone: forwarded (SIGTERM), or its client's end closed (SIGKILL)
    assert not job.is_running()
    assert status == (128 + signal.SIGTERM if how == "SIGTERM" else -signal.SIGKILL)
    assert _children(proc) == [] and proc.poll() is None  # the server serves on


def test_what_measures_its_own_process_runs_fresh():
    assert forkserver.needs_fresh(["train", "--experiment", "local", "--spec", "{}"], {}) is None  # P3's runs fork
    assert forkserver.needs_fresh(["-v", "local-bench", "throughput"], {})
    assert forkserver.needs_fresh(["pgc", "coding-profile"], {})
    assert forkserver.needs_fresh(["train", "--experiment", "demo"], {"DISTLAB_CPU_ISA": "avx2"})
    assert forkserver.needs_fresh(["train", "--experiment", "demo"], {}) is None
    assert forkserver.needs_fresh(["pgc", "train"], {}) is None


def test_without_a_server_a_job_runs_here(tmp_path):
    env = {**ENV, forkserver.ENV: str(tmp_path / "nobody-listens")}
    r = subprocess.run([sys.executable, "-m", "distlab", "check-config", "config/config.yaml"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "valid" in r.stdout, r.stderr


def test_the_server_returns_its_commands_status_and_forks_its_jobs(tmp_path):
    """`distlab forkserver -- CMD`: CMD's exit status; a distlab job CMD starts runs in a child of
    the server (its manifest says forked)."""
    r = subprocess.run([sys.executable, "-m", "distlab", "forkserver", "--", "sh", "-c",
                        "python -m distlab check-config config/config.yaml && exit 7"],
                       cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 7 and "valid" in r.stdout, r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-m", "distlab", "forkserver"], cwd=ROOT, env=ENV,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "no command" in r.stderr


@pytest.mark.slow
def test_the_tiny_workflow_ran_its_jobs_forked(tiny_workflow):
    """The suite's end-to-end run goes through the fork server as `make reproduce` does: its
    runs' manifests say which, P3's training runs among the forked."""
    work, r = tiny_workflow
    assert r.returncode == 0
    assert "runs in a fresh process" not in r.stderr  # no job fell back for its environment
    seen = {}
    for m in (work / "results").rglob("manifest.json"):
        doc = json.loads(m.read_text())
        if "process" in doc:
            seen.setdefault(m.relative_to(work / "results").parts[0], set()).add(doc["process"])
    assert "forked" in seen.get("local", set()), seen
    assert "forked" in seen.get("demo", set()) and "forked" in seen.get("pgc", set()), seen


def test_the_server_knows_its_own_package_so_it_does_not_start_itself_again():
    """``forkserver`` re-executes itself only for a workflow whose src/distlab is another
    package; run from this tree it is its own (else it would re-execute itself forever)."""
    import distlab

    assert forkserver._package() == os.path.realpath(os.path.dirname(distlab.__file__))
    assert forkserver.workflow_package(str(ROOT)) is None
