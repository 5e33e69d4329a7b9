"""Stable across machines: the tiny config's real-CPU training jobs of P3 give the same
numbers, to well inside any margin a claim uses, on AVX-512 and on AVX2 kernels
(``DISTLAB_CPU_ISA=avx2`` pins this machine to AVX2, MKL's and oneDNN's branches included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, bin_path
from distlab.data import prepare_dataset
from distlab.local import workflow

from test_local_workflow import tiny_section

PINS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "DISTLAB_CPU_ISA")
# the smallest margin a P3 quality claim uses is 0.05 nats (local.rc.noninferior); a move of a
# hundredth of it from the kernels' rounding cannot decide a verdict
TOLERANCE = 5e-4


@pytest.fixture(scope="module")
def pydoc(tmp_path_factory):
    out = tmp_path_factory.mktemp("localisa") / "pydoc"
    prepare_dataset({"name": "pydoc", "kind": "text", "source": "pydoc_topics",
                     "val_fraction": 0.05, "test_fraction": 0.05}, out, seed=0)
    return out


def _train(spec, data, out, isa: str | None):
    env = {k: v for k, v in os.environ.items() if k not in PINS}
    env.update({"PATH": bin_path(), "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1",
                "PYTHONPATH": str(ROOT / "src")})
    if isa:
        env["DISTLAB_CPU_ISA"] = isa
    r = subprocess.run([sys.executable, "-m", "distlab", "train", "--experiment", "local", "--spec",
                        json.dumps(spec), "--data", str(data), "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((out / "manifest.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("group,method", [("rc", "bp"), ("rc", "rc-seq"), ("rc", "rc-pc-T2"), ("pc", "pc-fixed")])
def test_tiny_training_jobs_agree_across_instruction_sets(tmp_path, pydoc, group, method):
    spec = workflow.spec(tiny_section(), group, method, 0)
    native = _train(spec, pydoc, tmp_path / "native", None)
    avx2 = _train(spec, pydoc, tmp_path / "avx2", "avx2")
    for key in ("test_loss", "val_loss"):
        a, b = native["final"][key], avx2["final"][key]
        assert abs(a - b) <= TOLERANCE, (key, a, b)
    print(f"{group} {method}: test loss native {native['final']['test_loss']:.6f}, "
          f"avx2 {avx2['final']['test_loss']:.6f}")


_SWEEP_ONE_PROCESS = """
import json, sys
from pathlib import Path
from distlab.local.train import run_simulated
for out, spec in json.loads(sys.argv[1]):
    run_simulated(spec, sys.argv[2], out)
"""


def _sweep(c, data, root, isa):
    """Every tiny sweep job (each swept method at each lr, its sweep seeds) in one process a machine
    setting, not one a job: the start-up is most of a tiny job."""
    jobs = [(str(root / f"lr{lr:g}/{g}/{m}"), workflow.sweep_spec(c, g, m, lr, [0, 1]))
            for g, m, lr in workflow.sweep_points(c)]
    env = {k: v for k, v in os.environ.items() if k not in PINS}
    env.update({"PATH": bin_path(), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")})
    if isa:
        env["DISTLAB_CPU_ISA"] = isa
    r = subprocess.run([sys.executable, "-c", _SWEEP_ONE_PROCESS, json.dumps(jobs), str(data)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return [Path(out) / f"seed{s}/manifest.json" for out, spec in jobs for s in spec["seeds"]]


@pytest.mark.slow
def test_the_tiny_sweep_chooses_the_same_lrs_on_both_instruction_sets(tmp_path, pydoc):
    """The sweep's choice (which every comparison run trains at) is the same on AVX2 and on this
    machine's native kernels, and no choice is decided by less than the kernels move a loss.
    Adds 2 processes (4 six-step runs each) to the suite's instruction-set rerun."""
    from distlab.local.summary import choose, sweep_rows, sweep_table

    c = tiny_section()
    tables = {}
    for isa in (None, "avx2"):
        name = isa or "native"
        runs = _sweep(c, pydoc, tmp_path / name, isa)
        tables[name] = choose(sweep_rows(runs)).set_index(["key", "lr"])
        sweep_table(runs, tmp_path / f"{name}.md", tmp_path / f"{name}.csv", tmp_path / f"{name}.json",
                    c["sweep"].get("follows"))
    a, b = tables["native"], tables["avx2"]
    assert (a["chosen"] == b["chosen"]).all(), (a, b)
    assert json.loads((tmp_path / "native.json").read_text()) == json.loads((tmp_path / "avx2.json").read_text())
    moved = float((a["worst"] - b["worst"]).abs().max())
    assert moved <= TOLERANCE, moved
    for key, g in a.groupby(level="key"):
        if len(g) > 1:  # the chosen lr's worst seed against the runner-up's: more than rounding apart
            margin = float(g["worst"].nsmallest(2).diff().iloc[-1])
            assert margin > 2 * moved, (key, margin, moved)
            print(f"{key}: chosen lr {g[g['chosen']].index[0][1]:g}, ahead by {margin:.4f} nats; "
                  f"kernels moved a worst seed by {moved:.2e}")
