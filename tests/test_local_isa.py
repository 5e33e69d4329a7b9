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


# One process a machine setting (not one a job: the start-up is most of a tiny job).  It applies
# DISTLAB_CPU_ISA's pins as `python -m distlab` does (distlab.cli.pin_cpu_isa), before torch is
# imported; then each training job runs `distlab train` (the CLI's main) in a child forked from it
# once torch and the trainer are imported, as the workflow's fork server runs jobs (a fresh
# process's state: the parent runs no torch operation before the forks); then the sweep's jobs run
# one after the other in the process itself.  It reports the kernels torch chose.
_ISA_DRIVER = """
import json, os, sys
from distlab.cli import main, pin_cpu_isa, preload

pin_cpu_isa()
# applied (its pins are in the environment torch reads at import): main() in the children runs
# after torch's import, where it refuses to apply it
os.environ.pop("DISTLAB_CPU_ISA", None)
jobs = json.loads(sys.argv[1])
if jobs["train"]:
    preload(jobs["train"][0])
codes = []
for argv in jobs["train"]:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = main(argv) or 0
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
from distlab.local.train import run_simulated
for out, spec in jobs["sweep"]:
    run_simulated(spec, jobs["data"], out)
import torch
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "codes": codes}))
"""

TRAINED = [("rc", "bp"), ("rc", "rc-seq"), ("rc", "rc-pc-T2"), ("pc", "pc-fixed")]


def _isa_process(c, data, root, isa: str | None) -> dict:
    """The tiny config's training jobs of :data:`TRAINED` (seed 0, through ``distlab train``) and
    every tiny sweep job (each swept method at each lr, its sweep seeds), in one process pinned to
    ``isa`` (None: this machine's native kernels): {"capability": torch's kernels there,
    "train": {(group, method): manifest}, "sweep": [manifest paths]}."""
    from distlab.cli import pin_cpu_isa

    env = {k: v for k, v in os.environ.items() if k not in PINS}
    env.update({"PATH": bin_path(), "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1",
                "PYTHONPATH": str(ROOT / "src")})
    if isa:
        env["DISTLAB_CPU_ISA"] = isa
        assert pin_cpu_isa(env)  # what the driver applies: names a supported set
    train = {(g, m): root / "train" / g / m for g, m in TRAINED}
    argvs = [["train", "--experiment", "local", "--spec", json.dumps(workflow.spec(c, g, m, 0)), "--data", str(data),
              "--out", str(out)] for (g, m), out in train.items()]
    sweep = [(str(root / f"lr{lr:g}/{g}/{m}"), workflow.sweep_spec(c, g, m, lr, [0, 1]))
             for g, m, lr in workflow.sweep_points(c)]
    jobs = {"train": argvs, "sweep": sweep, "data": str(data)}
    r = subprocess.run([sys.executable, "-c", _ISA_DRIVER, json.dumps(jobs)],
                       env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["codes"] == [0] * len(argvs), r.stderr[-3000:]
    return {"capability": got["capability"],
            "train": {k: json.loads((out / "manifest.json").read_text()) for k, out in train.items()},
            "sweep": [Path(out) / f"seed{s}/manifest.json" for out, spec in sweep for s in spec["seeds"]]}


@pytest.fixture(scope="module")
def isa_runs(tmp_path_factory, pydoc) -> dict:
    """{"native": ..., "avx2": ...}: :func:`_isa_process` on this machine's kernels and pinned to
    AVX2, once for the module's tests (one xdist worker runs them: tests/conftest.py)."""
    root = tmp_path_factory.mktemp("isa_runs")
    runs = {isa or "native": _isa_process(tiny_section(), pydoc, root / (isa or "native"), isa)
            for isa in (None, "avx2")}
    # the pin took: the AVX2 process computed on AVX2 kernels (not this machine's AVX-512 ones)
    assert runs["avx2"]["capability"] == "AVX2", runs["avx2"]["capability"]
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("group,method", TRAINED)
def test_tiny_training_jobs_agree_across_instruction_sets(isa_runs, group, method):
    native, avx2 = isa_runs["native"]["train"][(group, method)], isa_runs["avx2"]["train"][(group, method)]
    for key in ("test_loss", "val_loss"):
        a, b = native["final"][key], avx2["final"][key]
        assert abs(a - b) <= TOLERANCE, (key, a, b)
    print(f"{group} {method}: test loss native {native['final']['test_loss']:.6f}, "
          f"avx2 {avx2['final']['test_loss']:.6f}")


@pytest.mark.slow
def test_the_tiny_sweep_chooses_the_same_lrs_on_both_instruction_sets(tmp_path, isa_runs):
    """The sweep's choice (which every comparison run trains at) is the same on AVX2 and on this
    machine's native kernels, and no choice is decided by less than the kernels move a loss.
    Its runs share the two processes of the training jobs' instruction-set rerun (:func:`isa_runs`)."""
    from distlab.local.summary import choose, sweep_rows, sweep_table

    c = tiny_section()
    tables = {}
    for name in ("native", "avx2"):
        runs = isa_runs[name]["sweep"]
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
