"""Rank namespaces: made, shaped, removed; a killed job's leftovers removed by the next job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from distlab.runtime import netns

WHY = netns.unavailable()
shaped = pytest.mark.skipif(WHY is not None, reason=f"shaped runs skipped: {WHY}")


def _qdisc(ns: str, dev: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", dev],
                          capture_output=True, text=True, timeout=30).stdout


def test_burst_is_at_least_one_packet():
    assert netns.burst_bytes(1e6) >= netns.MTU + 14
    assert netns.burst_bytes(1e9) == int(1e9 / 8 * 1e-3)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        netns.ShapedCluster(0)
    with pytest.raises(ValueError):
        netns.ShapedCluster(2, rate_bps=0)


@shaped
def test_namespaces_are_made_shaped_and_removed():
    with netns.ShapedCluster(3, 100e6) as c:
        present = set(netns.namespaces())
        assert set(c.names()) <= present
        assert "tbf" in _qdisc(c.ranks[1], "eth0") and "rate 100Mbit" in _qdisc(c.ranks[1], "eth0")
        assert "tbf" in _qdisc(c.hub, "vh1")
        c.shape(None)
        assert "tbf" not in _qdisc(c.ranks[1], "eth0")
        # rank 2 reaches rank 0's address through the bridge
        srv = c.popen(0, [sys.executable, "-c", "import socket;s=socket.socket();"
                          f"s.bind(('{c.addr(0)}',5999));s.listen(1);c,_=s.accept();c.sendall(b'ok')"])
        try:
            got = subprocess.run(["ip", "netns", "exec", c.ranks[2], sys.executable, "-c",
                                  "import socket,time\nfor _ in range(50):\n try:\n"
                                  f"  s=socket.create_connection(('{c.addr(0)}',5999),timeout=5);break\n"
                                  " except OSError: time.sleep(0.1)\nprint(s.recv(2).decode())"],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
        finally:
            srv.wait(10)
        assert got == "ok"
    assert not set(c.names()) & set(netns.namespaces())


_HOLDER = """
import sys, time
from distlab.runtime import netns
c = netns.ShapedCluster(2, 10e6).create()
print(" ".join(c.names()), flush=True)
time.sleep(60)
"""


def _holder() -> tuple[subprocess.Popen, list[str]]:
    p = subprocess.Popen([sys.executable, "-c", _HOLDER], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    names = p.stdout.readline().split()
    assert names and set(names) <= set(netns.namespaces())
    return p, names


@shaped
def test_a_rerun_after_sigkill_finds_none_left():
    p, names = _holder()
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    assert set(names) <= set(netns.namespaces())  # nothing could clean up after a SIGKILL
    with netns.ShapedCluster(2) as c:                # the next job removes them first
        assert not set(names) & set(netns.namespaces())
    assert not set(names) & set(netns.namespaces())


@shaped
def test_sigterm_removes_the_namespaces():
    p, names = _holder()
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == -signal.SIGTERM  # it still dies of the signal
    deadline = time.monotonic() + 5
    while set(names) & set(netns.namespaces()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(names) & set(netns.namespaces())


@shaped
def test_a_failing_rank_is_named(tmp_path):
    script = tmp_path / "r.py"
    script.write_text("import os, sys\nif os.environ['RANK'] == '1':\n"
                      "    print('distlab: rank one refuses', flush=True); sys.exit(2)\n")
    with netns.ShapedCluster(2) as c:
        with pytest.raises(RuntimeError, match="rank 1 failed first") as e:
            netns.run_ranks(c, [sys.executable, str(script)], timeout_s=60)
    assert "rank one refuses" in str(e.value)


@shaped
def test_forked_ranks_train_in_their_own_namespaces(pydoc_dir, tmp_path):
    """run_shaped forks each rank from this process (one torch import for all) and moves it into
    its namespace before any socket: a gloo job whose store lives at rank 0's namespace address
    (reachable only from the job's namespaces) runs to the end, and a bad spec is named."""
    import json

    import distlab.cli  # noqa: F401 (registers the command line the forked ranks run: distlab.runtime.entry)
    from distlab.bench.techerror import demo_spec

    spec = demo_spec("adamw", 3, 0)
    out = tmp_path / "run"
    netns.run_shaped(["train", "--experiment", "demo", "--spec", json.dumps(spec), "--data", str(pydoc_dir),
                      "--out", str(out)], 4, 100e6, timeout_s=300)
    man = json.loads((out / "manifest.json").read_text())
    assert man["n_workers"] == 4 and man["params_max_abs_diff_across_ranks"] == 0
    bad = {**spec, "n_workers": 3}  # launched on 4 ranks
    with pytest.raises(RuntimeError, match="failed first") as e:
        netns.run_shaped(["train", "--experiment", "demo", "--spec", json.dumps(bad), "--data", str(pydoc_dir),
                          "--out", str(tmp_path / "bad")], 4, None, timeout_s=120)
    assert "n_workers=3" in str(e.value)
    assert not [ns for ns in netns.namespaces() if ns.startswith(f"{netns.PREFIX}{os.getpid()}x")]
