"""Stable across machines (issue 31): the tiny config's real-CPU training jobs of P3 give the same
numbers, to well inside any margin a claim uses, on AVX-512 and on AVX2 kernels
(``DISTLAB_CPU_ISA=avx2`` pins this machine to AVX2, MKL's and oneDNN's branches included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
@pytest.mark.parametrize("group,method", [("rc", "bp"), ("rc", "rc-seq"), ("pc", "pc-fixed")])
def test_tiny_training_jobs_agree_across_instruction_sets(tmp_path, pydoc, group, method):
    spec = workflow.spec(tiny_section(), group, method, 0)
    native = _train(spec, pydoc, tmp_path / "native", None)
    avx2 = _train(spec, pydoc, tmp_path / "avx2", "avx2")
    for key in ("test_loss", "val_loss"):
        a, b = native["final"][key], avx2["final"][key]
        assert abs(a - b) <= TOLERANCE, (key, a, b)
    print(f"{group} {method}: test loss native {native['final']['test_loss']:.6f}, "
          f"avx2 {avx2['final']['test_loss']:.6f}")
