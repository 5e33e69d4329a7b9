"""Real CPU + CUDA execution of placements (serial), tested on the CPU up to the device choice:
a stand-in second device ("cpu") runs the same code path; without CUDA the rows read
"not run: no GPU"."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from distlab.placement import cudaexec
from distlab.placement.graphs import build_model, extract

SPEC = {"name": "resnet50", "batch": 1, "image_size": 32}
PAIR = {"devices": [{"name": "cpu", "kind": "profiled"}, {"name": "gpu", "kind": "measured_cuda"}],
        "link": {"gbps": 25, "latency_us": 10}}


@pytest.fixture(scope="module")
def graph_and_profile(tmp_path_factory):
    torch.set_num_threads(1)
    graph = extract(SPEC)
    n = graph["n_nodes"]
    rng = np.random.default_rng(0)
    cpu = rng.uniform(1e-4, 1e-3, n)
    gpu = cpu * np.where([nd["op"] in ("conv2d", "linear") for nd in graph["nodes"]], 0.2, 3.0)
    path = tmp_path_factory.mktemp("prof") / "resnet50.json"
    path.write_text(json.dumps({"model": SPEC, "names": [nd["name"] for nd in graph["nodes"]],
                                "seconds": cpu.tolist(), "cuda_seconds": gpu.tolist()}))
    return graph, str(path)


def test_device_choice():
    assert cudaexec.device_names(False) is None
    assert cudaexec.device_names(True) == ["cpu", "cuda"]


def test_serial_executor_computes_the_model_on_any_placement(graph_and_profile):
    graph, _ = graph_and_profile
    ex = cudaexec.SerialExecutor(SPEC, graph, ["cpu", "cpu"])  # a stand-in second device
    model, inputs = build_model(SPEC)
    with torch.no_grad():
        want = model(*inputs)
    rng = np.random.default_rng(1)
    for place in (np.zeros(graph["n_nodes"], np.int64), rng.integers(0, 2, graph["n_nodes"])):
        dt, got = ex.run(place, outputs=True)
        assert dt > 0
        torch.testing.assert_close(got, want)


def test_compare_without_a_gpu_reads_not_run(graph_and_profile):
    graph, prof = graph_and_profile
    rows = cudaexec.compare(SPEC, graph, PAIR, prof, repeats=1, warmup=0, devices=None)
    assert [r["placement"] for r in rows] == ["cpu_only", "gpu_only", "heft", "optimum"]
    assert {r["status"] for r in rows} == {cudaexec.NO_GPU}
    assert all(np.isnan(r["measured_ms"]) for r in rows)
    # the serial optimum's estimate is the lowest of the placements
    est = {r["placement"]: r["simulated_ms"] for r in rows}
    assert est["optimum"] <= min(est.values()) + 1e-9


def test_compare_runs_every_placement_on_two_devices(graph_and_profile):
    graph, prof = graph_and_profile
    learner = {"samples": 4, "lr": 0.01, "discount": 0.95, "advantage": "steady", "explore": 0.1, "hidden": 16,
               "gcn_layers": 1, "max_levels": 1, "pooling": True, "state_update": True, "budget": 8}
    rows = cudaexec.compare(SPEC, graph, PAIR, prof, repeats=2, warmup=1, learner=learner, devices=["cpu", "cpu"])
    assert [r["placement"] for r in rows] == ["cpu_only", "gpu_only", "heft", "optimum", "hsdag_corrected"]
    assert all(r["status"] == "measured" and r["measured_ms"] > 0 and np.isfinite(r["sim_error_pct"]) for r in rows)


def test_cli_without_a_gpu_writes_not_run_rows(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the command would measure")
    out = tmp_path / "rows.csv"
    r = subprocess.run([sys.executable, "-m", "distlab", "placement-realexec-cuda", "--models", "resnet50",
                        "--budget", "0", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    text = out.read_text()
    assert text.count(cudaexec.NO_GPU) == 4 and "cpu_h200" in text


def test_cli_names_a_bad_pair_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "distlab", "placement-realexec-cuda", "--pair", "nope",
                        "--out", str(tmp_path / "x.csv")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "nope" in r.stderr
