"""The README's two-node torchrun recipe, on one machine.

`python -m distlab train ... --print-torchrun` prints the one-node command; the README
says to run it on every node with the c10d rendezvous options in place of
`--standalone --nnodes=1`.  Here two torchrun agents on this machine play the two
nodes (rendezvous on 127.0.0.1), one rank each, and the run must equal the one-node
run of the same spec with two ranks (times aside).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import uuid

import pandas as pd
import pytest

from conftest import ROOT, bin_path

ENV = {**os.environ, "PATH": bin_path(), "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
VARYING = {"time", "step_time"}


def _spec():
    return {"experiment": "baseline", "method": "dgd", "backend": "gloo", "seed": 0, "model": {"name": "logreg"},
            "n_workers": 2, "batch_size": 16, "lr": 0.1, "steps": 6, "eval_every": 3, "dtype": "float32",
            "cluster": {"compute": {"mode": "calibrated", "unit_seconds": 0.5},
                        "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9}, "straggler": {"model": "none"}}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rows(path):
    df = pd.read_csv(path)
    return df[[c for c in df.columns if c not in VARYING]]


@pytest.mark.slow
def test_two_torchrun_agents_equal_the_one_node_run(digits_dir, tmp_path):
    one, two = tmp_path / "one_node", tmp_path / "two_nodes"
    printed = subprocess.run(
        [sys.executable, "-m", "distlab", "train", "--experiment", "baseline", "--spec", json.dumps(_spec()),
         "--runtime", json.dumps({"timeout_s": 60}), "--data", str(digits_dir), "--out", str(one),
         "--print-torchrun"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr
    argv = shlex.split(printed.stdout.strip())
    assert "--standalone" in argv and "--nnodes=1" in argv and "--nproc_per_node=2" in argv

    # the one-node run: the printed command as it is
    r = subprocess.run(argv, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]

    # two "nodes": the README's rendezvous options in place of --standalone --nnodes=1,
    # nodes x processes per node = the spec's n_workers, the same --rdzv_id on both
    rdzv = ["--nnodes=2", "--nproc_per_node=1", f"--rdzv_id={uuid.uuid4().hex[:12]}", "--rdzv_backend=c10d",
            f"--rdzv_endpoint=127.0.0.1:{_free_port()}"]
    node = [a for a in argv if a not in ("--standalone", "--nnodes=1", "--nproc_per_node=2")]
    at = node.index("torch.distributed.run") + 1
    node = node[:at] + rdzv + node[at:]
    node[node.index("--out") + 1] = str(two)
    env = {**ENV, "GLOO_SOCKET_IFNAME": "lo"}
    agents = [subprocess.Popen(node, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for _ in range(2)]
    logs = [a.communicate(timeout=300)[0] for a in agents]
    assert all(a.returncode == 0 for a in agents), "\n----\n".join(x[-2000:] for x in logs)

    a = json.loads((one / "manifest.json").read_text())
    b = json.loads((two / "manifest.json").read_text())
    assert a["spec"] == b["spec"] == _spec()  # the same job, as its manifest records it
    pd.testing.assert_frame_equal(_rows(one / "metrics.csv"), _rows(two / "metrics.csv"))
    assert len(pd.read_csv(two / "metrics.csv")) >= _spec()["steps"]
