"""The GPU tier (docs/gpu.md): the device choice of the simulated workers, config/gpu.yaml's plan
and its runner.

No GPU is needed: CUDA is mocked where the device choice is tested (torch.cuda.is_available
answers True, a tensor sent to ``cuda`` is counted and kept on the CPU, ``synchronize`` is
counted), so the trainers' plumbing is exercised on this machine and their numbers compared
with the CPU's.  The measurement on a real GPU is scripts/gpu/run_tier.py's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import ROOT, bin_path, pgc_spec, snakemake_runs  # noqa: E402

from distlab.config import specs  # noqa: E402
from distlab.runtime import device as devices  # noqa: E402

MODEL = {"name": "gpt", "n_layer": 1, "d_model": 8, "n_head": 2, "block_size": 16}
NET = {"latency_s": 0.002, "bandwidth_Bps": 3e6}


def _is_cuda(x) -> bool:
    return (isinstance(x, torch.device) and x.type == "cuda") or (isinstance(x, str) and x.startswith("cuda"))


@pytest.fixture
def fake_cuda(monkeypatch):
    """CUDA 'present' to the device resolution: tensors sent to it are counted and stay on the CPU;
    synchronize is counted."""
    calls = {"to_cuda": 0, "sync": 0}
    real_to = torch.Tensor.to

    def to(self, *args, **kw):
        args = list(args)
        for i, a in enumerate(args):
            if _is_cuda(a):
                args[i] = torch.device("cpu")
                calls["to_cuda"] += 1
        if _is_cuda(kw.get("device")):
            kw["device"] = torch.device("cpu")
            calls["to_cuda"] += 1
        return real_to(self, *args, **kw)

    def sync(device=None):
        assert device is None or _is_cuda(device)
        calls["sync"] += 1

    monkeypatch.setattr(torch.Tensor, "to", to)
    # the device resolution sees CUDA; torch's own internals (the optimizers' fused paths) do not
    monkeypatch.setattr(devices, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", sync)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Mocked GPU")
    return calls


# ------------------------------------------------------------------ the device choice

def test_auto_takes_cuda_when_torch_finds_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.resolve("auto") == torch.device("cpu")
    assert devices.resolve(None, "demo") == torch.device("cpu")
    with pytest.raises(specs.SpecError, match="key 'device': cuda, but torch finds no CUDA device"):
        devices.resolve("cuda", "atlas")
    with pytest.raises(specs.SpecError, match="key 'device': must be one of auto, cpu, cuda"):
        devices.resolve("tpu", "atlas")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.resolve("auto") == torch.device("cuda")
    assert devices.resolve("cuda") == torch.device("cuda")
    assert devices.resolve("cpu") == torch.device("cpu")
    # without the key: the old choice (the atlas and PGC pinned the CPU; DeMo took a GPU when present)
    assert devices.resolve(None, "atlas") == torch.device("cpu")
    assert devices.resolve(None, "pgc") == torch.device("cpu")
    assert devices.resolve(None, "demo") == torch.device("cuda")


def _atlas_spec(technique: str, **over) -> dict:
    from distlab.atlas.spec import SPEC_SCHEMA

    spec = {"experiment": "atlas", "technique": technique, "backend": "simulated", "seed": 0, "model": MODEL,
            "n_workers": 4, "batch_size": 2, "lr": 1e-2, "steps": 4, "eval_every": 2, "eval_batches": 1, "s": 1,
            "demo": {"topk": 4, "chunk": 16}, "diloco": {"H": 2}, "powersgd": {"rank": 1},
            "cluster": {"compute": {"mode": "measured"}, "network": dict(NET), "straggler": {"model": "none"}}}
    spec.update(over)
    return specs.validate_spec(spec, SPEC_SCHEMA, "atlas")


def _atlas_losses(out: Path, train: bool = True) -> list[float]:
    """The run's training losses (unless ``train`` is false), validation losses and final loss."""
    rec = json.loads((out / "record.json").read_text())
    man = json.loads((out / "manifest.json").read_text())
    return ([r["loss"] for r in rec["steps"]] if train else []) \
        + [r["val_loss"] for r in rec["steps"] if r["val_loss"] is not None] + [man["final_val_loss"]]


@pytest.mark.parametrize("technique", ["ddp", "demo", "gc-fr"])
def test_atlas_workers_compute_on_the_chosen_device_with_the_same_numbers(tmp_path, pydoc_dir, fake_cuda, technique):
    """device cuda: the model, every batch and the evaluation windows go to the device, each worker's
    compute (and the update) is timed between two synchronisations; the numbers are the CPU's."""
    from distlab.atlas import train

    # gc-fr's received set follows the measured compute; it decodes the exact sum from any 3 of 4
    # workers, so its model (validation losses) does not depend on which, its reported training
    # loss (the received workers' mean) does
    train_loss = technique != "gc-fr"
    train.run_simulated(_atlas_spec(technique), pydoc_dir, tmp_path / "cpu")
    assert fake_cuda == {"to_cuda": 0, "sync": 0}
    train.run_simulated(_atlas_spec(technique, device="cuda"), pydoc_dir, tmp_path / "cuda")
    steps, n = 4, 4
    assert fake_cuda["sync"] == steps * (2 * n + 2)
    params = sum(1 for _ in train.build_lm(MODEL, 0).parameters())
    assert fake_cuda["to_cuda"] >= params + 2 * steps * n
    assert _atlas_losses(tmp_path / "cuda", train_loss) == _atlas_losses(tmp_path / "cpu", train_loss)
    man = json.loads((tmp_path / "cuda" / "manifest.json").read_text())
    assert (man["device"], man["device_name"]) == ("cuda", "Mocked GPU")
    # auto with CUDA present is the same choice
    fake_cuda.update(to_cuda=0, sync=0)
    train.run_simulated(_atlas_spec(technique, device="auto"), pydoc_dir, tmp_path / "auto")
    assert fake_cuda["sync"] == steps * (2 * n + 2)
    assert _atlas_losses(tmp_path / "auto", train_loss) == _atlas_losses(tmp_path / "cpu", train_loss)


def test_cpu_is_the_old_choice_bit_for_bit(tmp_path, pydoc_dir):
    """device: cpu computes what a spec without the key computed (the old code path, unchanged)."""
    from distlab.atlas import train

    train.run_simulated(_atlas_spec("diloco"), pydoc_dir, tmp_path / "none")
    train.run_simulated(_atlas_spec("diloco", device="cpu"), pydoc_dir, tmp_path / "cpu")
    assert _atlas_losses(tmp_path / "none") == _atlas_losses(tmp_path / "cpu")
    assert "device" not in json.loads((tmp_path / "none" / "manifest.json").read_text())


def test_demo_workers_compute_on_the_chosen_device(tmp_path, pydoc_dir, fake_cuda):
    import pandas as pd

    from distlab.demo import train

    def spec(**over):
        s = {"experiment": "demo", "method": "demo", "backend": "simulated", "seed": 0, "model": MODEL,
             "n_workers": 2, "batch_size": 2, "lr": 1e-2, "steps": 4, "eval_every": 2, "eval_batches": 1,
             "dtype": "float32", "cluster": {"compute": {"mode": "measured", "unit_seconds": 0.0, "scale": 1.0},
                                             "network": dict(NET), "straggler": {"model": "none"}},
             "demo": {"topk": 4, "chunk": 16, "decay": 0.999, "weight_decay": 0.0}}
        s.update(over)
        return specs.validate_spec(s, train.SPEC_SCHEMA, "demo")

    rt = {"checkpoint": {"every_s": 0, "every_steps": 0}}
    train.run_simulated(spec(device="cpu"), pydoc_dir, tmp_path / "cpu", rt)
    assert fake_cuda == {"to_cuda": 0, "sync": 0}
    train.run_simulated(spec(device="cuda"), pydoc_dir, tmp_path / "cuda", rt)
    assert fake_cuda["sync"] == 4 * (2 * 2 + 2)
    assert fake_cuda["to_cuda"] > 2 * 4 * 2
    cols = ["loss", "val_loss"]
    a, b = pd.read_csv(tmp_path / "cpu" / "metrics.csv"), pd.read_csv(tmp_path / "cuda" / "metrics.csv")
    assert a[cols].equals(b[cols])


def test_pgc_workers_compute_on_the_chosen_device(tmp_path, digits_dir, fake_cuda):
    import pandas as pd

    from distlab.pgc import train

    train.run_simulated(pgc_spec("pgc-cr", 1, steps=4), digits_dir, tmp_path / "none")
    assert fake_cuda["to_cuda"] == 0
    train.run_simulated(pgc_spec("pgc-cr", 1, steps=4, device="cuda"), digits_dir, tmp_path / "cuda")
    assert fake_cuda["to_cuda"] >= 4  # the model's tensors, the train and validation images and labels
    a, b = pd.read_csv(tmp_path / "none" / "metrics.csv"), pd.read_csv(tmp_path / "cuda" / "metrics.csv")
    assert a["loss"].equals(b["loss"]) and a["time"].equals(b["time"])  # the calibrated clock: unchanged


def test_asking_for_cuda_without_one_is_one_line(tmp_path, pydoc_dir):
    spec = _atlas_spec("ddp", device="cuda", steps=1)
    r = subprocess.run([sys.executable, "-m", "distlab", "train", "--experiment", "atlas", "--spec", json.dumps(spec),
                        "--data", str(pydoc_dir), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, env={"PATH": bin_path(), "PYTHONPATH": str(ROOT / "src"),
                                                             "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines() == [
        "distlab: atlas spec: key 'device': cuda, but torch finds no CUDA device here "
        f"(torch {torch.__version__}); use device: auto or cpu"]


# ------------------------------------------------------------------ config/gpu.yaml and its plan

@pytest.fixture(scope="module")
def gpu_cfg():
    from distlab.gpu.plan import load_config

    return load_config([ROOT / "config" / "gpu.yaml"], ROOT)


def test_the_tier_is_sized_as_the_issue_asks(gpu_cfg):
    from distlab.gpu.plan import params_of

    a, d = gpu_cfg["atlas"], gpu_cfg["demo"]
    sizes = sorted(params_of(m) for m in a["sizes"].values())
    assert len(sizes) == 3 and 0.5e6 <= sizes[0] <= 2e6 and 50e6 <= sizes[-1] <= 150e6
    assert len(a["techniques"]) == 12 and a["seeds"] == [0, 1, 2] and a["n_workers"] == [2, 4]
    assert a["device"] == d["device"] == "auto"
    assert set(d["methods"]) == {"adamw", "demo", "diloco", "powersgd"} and d["n_workers"] == [2, 4]
    assert params_of(d["model"]) > 20e6
    assert gpu_cfg["pgc"]["real"]["n"] == 12
    assert gpu_cfg["local_learning"]["rc"]["sections"] <= gpu_cfg["gpu_tier"]["cores"]


def test_the_plan_prints_its_estimates_within_the_budget(gpu_cfg):
    from distlab.gpu.plan import format_plan, plan, totals

    jobs = plan(gpu_cfg)
    t = totals(jobs)
    assert t["wall_s"] <= gpu_cfg["gpu_tier"]["budget_s"], format_plan(jobs, gpu_cfg)
    assert t["gpu_s"] > 0 and t["core_s"] > 0
    assert {j.section for j in jobs} == {"atlas", "demo", "pgc", "local"}
    # every atlas technique at every size, N and seed (no stragglers), as the workflow's job runs them
    runs = [j for j in jobs if j.section == "atlas" and "/run/" in j.name and "/none/" in j.name]
    assert len(runs) == 12 * 3 * 2 * 3
    r = subprocess.run([sys.executable, "-m", "distlab", "gpu-plan", "--configfile", "config/gpu.yaml"], cwd=ROOT,
                       capture_output=True, text=True, env={"PATH": bin_path(), "PYTHONPATH": str(ROOT / "src")})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "GPU-s" in r.stdout and "core-s" in r.stdout and "within the budget of 600 s" in r.stdout
    assert "extrapolated" in r.stdout
    r = subprocess.run([sys.executable, "-m", "distlab", "gpu-plan", "--configfile", "no/such.yaml"], cwd=ROOT,
                       capture_output=True, text=True, env={"PATH": bin_path(), "PYTHONPATH": str(ROOT / "src")})
    assert r.returncode == 2 and r.stderr.strip() == "distlab: --configfile: no/such.yaml: no such file"


def test_every_job_of_the_tier_is_a_valid_run_spec(gpu_cfg):
    """Each GPU job's spec passes its trainer's schema and cross-field rules, and asks for device auto."""
    import importlib

    from distlab.gpu.plan import plan

    checked = 0
    for job in plan(gpu_cfg):
        if job.command[0] != "train":
            continue
        experiment = job.command[job.command.index("--experiment") + 1]
        spec = json.loads(job.command[job.command.index("--spec") + 1])
        mod = importlib.import_module({"atlas": "distlab.atlas.spec", "demo": "distlab.demo.spec",
                                       "pgc": "distlab.pgc.spec"}[experiment])
        spec = specs.validate_spec(spec, mod.SPEC_SCHEMA, experiment)
        mod.check_spec(spec)
        assert spec.get("device") == ("auto" if job.resource == "gpu" else None), job.name
        checked += 1
    assert checked > 250


def test_a_calibration_replaces_the_assumed_step_cost(gpu_cfg):
    from distlab.gpu.plan import model_key, models, plan, totals

    cal = {"worker_step_s": {model_key(m, b): 1e-3 for m, b in models(gpu_cfg)}}
    jobs = plan(gpu_cfg, cal)
    assert all(j.label == "measured" for j in jobs if j.resource == "gpu")
    assert totals(jobs)["gpu_s"] != totals(plan(gpu_cfg))["gpu_s"]


def test_gpu_yaml_dry_runs_through_the_workflow(clean_tree):
    (r,) = snakemake_runs([["atlas", "demo", "paper/tables/pgc_real_vs_sim.md", "results/local/bench/throughput.csv",
                            "-n", "--forceall",
                            "--quiet", "rules", "--configfile", "config/gpu.yaml"]], cwd=clean_tree)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    for rule in ("atlas_job", "demo_train_sim", "pgc_train_real", "local_bench_throughput"):
        assert rule in r.stdout + r.stderr


def test_the_runner_runs_a_job_of_every_section_shrunk_on_the_cpu(tmp_path, gpu_cfg):
    """scripts/gpu/run_tier.py's pieces at toy size on the CPU: machine record, calibration, the
    re-plan, one GPU job of the atlas and of DeMo, PGC's real processes and P3's benchmark."""
    from distlab.gpu.plan import shrink
    from distlab.gpu.runner import run_tier

    cfg = shrink(gpu_cfg)
    cfg["atlas"]["techniques"] = ["ddp"]
    cfg["atlas"]["sizes"] = {"small": cfg["atlas"]["sizes"]["small"]}
    cfg["atlas"]["headline"]["size"] = cfg["atlas"]["reference"]["size"] = cfg["atlas"]["sweep"]["size"] = "small"
    cfg["demo"]["methods"] = ["demo"]
    cfg["pgc"]["real"]["schemes"] = ["pgc-cr"]
    cfg["local_learning"]["bench"]["methods"] = ["rc-par"]
    res = run_tier(cfg, tmp_path, slice_s=600)
    rows = {r["job"]: r for r in res["rows"]}
    ran = {r["section"] for r in res["rows"] if r["status"] == "ran"}
    assert ran == {"atlas", "demo", "pgc", "local"}, rows
    assert not [r for r in res["rows"] if r["status"] == "failed"]
    assert json.loads((tmp_path / "machine.json").read_text())["torch"] == torch.__version__
    cal = json.loads((tmp_path / "calibration.json").read_text())
    assert list(cal["worker_step_s"]) == ["L1-d8-T16-b2"]
    assert (tmp_path / "runs" / "local" / "bench_throughput" / "throughput.csv").exists()
    assert "| atlas/ddp/run/small/n4/none/seed0 | ran |" in (tmp_path / "README.md").read_text()
    atlas = rows["atlas/ddp/run/small/n4/none/seed0"]
    rec = json.loads((tmp_path / "runs" / "atlas/ddp/run/small/n4/none/seed0" / "record.json").read_text())
    first = next((r["step"] for r in rec["steps"] if r["val_loss"] is not None
                  and r["val_loss"] <= cfg["atlas"]["target_loss"]), "")
    assert atlas["steps_to_target"] == first
