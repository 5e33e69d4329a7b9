"""DeMo trainer: exact bytes per step, both backends computing the same thing,
resume after a kill, spec and config checks, and the paper-scale config shrunk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from conftest import ROOT, bin_path

from distlab.config import specs
from distlab.demo import spec as checks, train
from distlab.demo.methods import make_method
from distlab.techniques.demo.optim import DeMo
from distlab.results.checkpoint import read_checkpoint_file

ENV = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}
MODEL = {"name": "gpt", "n_layer": 1, "d_model": 64, "n_head": 2, "block_size": 16}


def spec_for(method: str, **over) -> dict:
    spec = {"experiment": "demo", "method": method, "backend": "simulated", "seed": 0, "model": MODEL,
            "n_workers": 2, "batch_size": 2, "lr": 1e-3, "steps": 4, "eval_every": 2, "eval_batches": 1,
            "dtype": "float32", "demo": {"topk": 8, "chunk": 64, "decay": 0.999, "weight_decay": 0.0},
            "diloco": {"H": 2, "outer_lr": 0.7, "outer_momentum": 0.9}, "powersgd": {"rank": 2},
            "cluster": {"compute": {"mode": "measured", "unit_seconds": 0.0, "scale": 1.0},
                        "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                        "straggler": {"model": "none"}}}
    spec.update(over)
    return specs.validate_spec(spec, train.SPEC_SCHEMA, "demo")


def _run(spec, data, out, runtime=None) -> tuple[dict, pd.DataFrame]:
    train.run_simulated(spec, data, out, runtime or {"checkpoint": {"every_s": 0, "every_steps": 0}})
    return json.loads((out / "manifest.json").read_text()), pd.read_csv(out / "metrics.csv")


def _n_params(spec) -> int:
    return sum(p.numel() for p in train.build_lm(spec["model"], 256, torch.float32, 0).parameters())


@pytest.mark.parametrize("n", [2, 4])
def test_bytes_per_step_are_exact_for_every_method(tmp_path, pydoc_dir, n):
    results = {}
    for method in ("adamw", "demo", "demo-compact", "demo-allmean", "powersgd", "diloco"):
        spec = spec_for(method, n_workers=n)
        man, m = _run(spec, pydoc_dir, tmp_path / f"{method}{n}")
        results[method] = (man, m)
        assert m["loss"].notna().all() and np.isfinite(man["final"]["val_loss"])
    P = _n_params(spec_for("adamw"))
    grad = (P + 1) * 4  # the gradient and the step's loss in one fp32 buffer
    man, m = results["adamw"]
    assert (m["payload_bytes"] == grad).all()
    assert np.allclose(m["bytes"], 2 * (n - 1) / n * grad) and (m["rounds"] == 2 * (n - 1)).all()
    model = train.build_lm(MODEL, 256, torch.float32, 0)
    for method, enc in (("demo", "reference"), ("demo-compact", "compact"), ("demo-allmean", "reference")):
        payload = DeMo(model.parameters(), lr=1e-3, compression_topk=8, encoding=enc).payload_nbytes() + 4
        man, m = results[method]
        assert (m["payload_bytes"] == payload).all() and man["payload_bytes_per_step"] == payload
        assert (m["bytes"] == (n - 1) * payload).all() and (m["rounds"] == n - 1).all()
    ref, compact = (results[k][0]["payload_bytes_per_step"] for k in ("demo", "demo-compact"))
    assert compact <= 0.5 * ref
    man, m = results["diloco"]  # one all-reduce of the parameters every H = 2 steps
    assert list(m["bytes"] > 0) == [False, True, False, True]
    assert np.allclose(m.loc[m["bytes"] > 0, "bytes"], 2 * (n - 1) / n * grad)
    man, m = results["powersgd"]
    assert (m["rounds"] == 4 * (n - 1)).all()  # two all-reduces a step
    assert np.allclose(m["bytes"], 2 * (n - 1) / n * man["payload_bytes_per_step"])
    assert man["payload_bytes_per_step"] < grad / 3


def test_paired_seeds_start_from_the_same_weights_and_data(tmp_path, pydoc_dir):
    a = _run(spec_for("adamw"), pydoc_dir, tmp_path / "a")[1]
    d = _run(spec_for("demo"), pydoc_dir, tmp_path / "d")[1]
    assert a["loss"].iloc[0] == d["loss"].iloc[0] and a["val_loss"].iloc[0] == d["val_loss"].iloc[0]
    other = _run(spec_for("demo", seed=1), pydoc_dir, tmp_path / "s1")[1]
    assert other["loss"].iloc[0] != d["loss"].iloc[0]


def test_a_job_of_several_seeds_equals_one_run_per_seed(tmp_path, pydoc_dir):
    """The workflow runs every seed of a simulated setting in one process: each seed's
    run directory holds what a job of that seed alone writes (timing columns aside)."""
    base = {k: v for k, v in spec_for("demo").items() if k != "seed"}
    both = specs.validate_spec({**base, "seeds": [0, 1]}, train.SPEC_SCHEMA, "demo")
    train.run_simulated(both, pydoc_dir, tmp_path / "job", {"checkpoint": {"every_s": 0, "every_steps": 0}})
    for seed in (0, 1):
        alone = _run(spec_for("demo", seed=seed), pydoc_dir, tmp_path / f"alone{seed}")[1]
        batched = pd.read_csv(tmp_path / "job" / f"seed{seed}" / "metrics.csv")
        man = json.loads((tmp_path / "job" / f"seed{seed}" / "manifest.json").read_text())
        assert man["spec"]["seed"] == seed and "seeds" not in man["spec"]
        for col in ("loss", "val_loss", "bytes"):
            assert np.array_equal(alone[col].to_numpy(), batched[col].to_numpy(), equal_nan=True)
    with pytest.raises(specs.SpecError, match="seeds"):
        train.check_spec({**base, "seeds": [0, 1], "backend": "gloo"})
    with pytest.raises(specs.SpecError):
        specs.validate_spec({**base, "seeds": [0, 0]}, train.SPEC_SCHEMA, "demo")
    with pytest.raises(specs.SpecError):
        specs.validate_spec({**base, "seeds": [0], "seed": 0}, train.SPEC_SCHEMA, "demo")


def test_simulated_demo_equals_a_loop_of_replicas(pydoc_dir):
    """The simulated backend keeps one model and N momenta; N full replicas give the same parameters."""
    from distlab.data import load_split, text_batch
    from distlab.models import lm_loss
    from distlab.runtime.ledger import ByteLedger
    from distlab.runtime.network import NetworkModel
    from distlab.techniques.comm import SimComm

    spec = spec_for("demo", dtype="float64")
    tokens = load_split(pydoc_dir, "train")["tokens"]
    shared = train.build_lm(MODEL, 256, torch.float64, 0)
    comm = SimComm(2, ByteLedger(), NetworkModel())
    method = make_method(shared, 2, spec, comm)
    replicas = [train.build_lm(MODEL, 256, torch.float64, 0) for _ in range(2)]
    opts = [DeMo(r.parameters(), lr=1e-3, compression_topk=8) for r in replicas]
    for step in range(3):
        for w in range(2):
            x, y = text_batch(tokens, 16, 2, 0, w, step)
            shared.zero_grad(set_to_none=True)
            loss = lm_loss(shared(x), y)
            loss.backward()
            method.after_backward(w, loss.detach())
            replicas[w].zero_grad(set_to_none=True)
            lm_loss(replicas[w](x), y).backward()
        method.update(step)
        g = torch.stack([o.encode() for o in opts])
        for o in opts:
            o.apply(g)
    for r in replicas:
        for a, b in zip(shared.parameters(), r.parameters()):
            assert torch.equal(a, b)


def test_a_killed_run_resumes_to_the_same_result(tmp_path, pydoc_dir, monkeypatch):
    spec = spec_for("demo", steps=6)
    _, full = _run(spec, pydoc_dir, tmp_path / "full")
    real = train._worker_grad
    calls = {"n": 0}

    def dying(method, w, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2 * 4 + 1:  # the first worker of step 4
            raise KeyboardInterrupt("killed")
        return real(method, w, *a, **k)

    monkeypatch.setattr(train, "_worker_grad", dying)
    rt = {"checkpoint": {"every_s": 0, "every_steps": 1}}
    with pytest.raises(KeyboardInterrupt):
        train.run_simulated(spec, pydoc_dir, tmp_path / "killed", rt)
    assert (tmp_path / "killed/checkpoint.pt").exists() and not (tmp_path / "killed/manifest.json").exists()
    monkeypatch.setattr(train, "_worker_grad", real)
    man, resumed = _run(spec, pydoc_dir, tmp_path / "killed", rt)
    assert man["resumed"] == 1
    for col in ("loss", "val_loss", "bytes", "payload_bytes"):
        assert np.array_equal(full[col].to_numpy(), resumed[col].to_numpy(), equal_nan=True), col
    # a checkpoint of another spec is not continued
    with pytest.raises(KeyboardInterrupt):
        monkeypatch.setattr(train, "_worker_grad", dying)
        calls["n"] = 0
        train.run_simulated(spec, pydoc_dir, tmp_path / "other", rt)
    monkeypatch.setattr(train, "_worker_grad", real)
    man, m = _run(spec_for("demo", steps=6, lr=2e-3), pydoc_dir, tmp_path / "other", rt)
    assert "resumed" not in man and len(m) == 6


@pytest.mark.parametrize("over, key", [
    ({"method": "sgd"}, "method"), ({"lr": float("nan")}, "lr"), ({"n_workers": 0}, "n_workers"),
    ({"model": {"name": "gpt", "width": 3}}, "width"), ({"demo": {"topk": 0}}, "demo.topk")])
def test_bad_specs_are_refused_naming_the_key(over, key):
    with pytest.raises(specs.SpecError, match=key):
        over = dict(over)
        spec_for(over.pop("method", "demo"), **over)


def test_cross_field_spec_rules(pydoc_dir, tmp_path):
    with pytest.raises(specs.SpecError, match="diloco"):
        train.run_simulated(spec_for("diloco", steps=3), pydoc_dir, tmp_path / "x")
    with pytest.raises(specs.SpecError, match="multiple of H"):
        train.check_spec(spec_for("diloco", backend="gloo", steps=3))
    train.check_spec(spec_for("diloco", backend="gloo"))  # DiLoCo runs on gloo too (next test)


def _config() -> dict:
    return yaml.safe_load((ROOT / "config/config.yaml").read_text())


def test_config_checks_name_the_key():
    cfg = _config()
    assert checks.check(cfg) == []
    bad = json.loads(json.dumps(cfg))
    bad["demo"]["lr"].pop("powersgd")
    bad["demo"]["steps"] = 95
    bad["demo"]["dataset"] = "digits"
    bad["demo"]["real"]["methods"] = ["demo", "diloco"]  # DiLoCo runs on gloo, ending on a sync
    bad["demo"]["real"]["steps"] = 25
    bad["demo"]["networks"].pop("wan")
    msgs = "\n".join(checks.check(bad))
    for key in ("demo.lr.powersgd", "demo.steps", "demo.dataset", "demo.real.steps", "demo.networks"):
        assert key in msgs


def test_config_schema_refuses_bad_values(tmp_path):
    from distlab.config.checks import schema_errors

    cfg = _config()
    cfg["demo"]["methods"] = ["demo", "demo"]
    cfg["demo"]["lr"]["demo"] = -1.0
    cfg["demo"]["networks"]["wan"]["latency_s"] = float("nan")
    errs = "\n".join(schema_errors(cfg, ROOT / "workflow/schemas"))
    assert "demo.methods" in errs and "demo.lr.demo" in errs and "demo.networks.wan.latency_s" in errs


def _on_gloo(spec: dict, data, out) -> tuple[dict, pd.DataFrame]:
    """One real job through ``distlab train`` (two gloo processes): its manifest and metrics."""
    cmd = [sys.executable, "-m", "distlab", "train", "--experiment", "demo", "--threads", "2",
           "--spec", json.dumps(spec), "--runtime", json.dumps({"timeout_s": 60, "job_timeout_s": 600}),
           "--data", str(data), "--out", str(out)]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return json.loads((out / "manifest.json").read_text()), pd.read_csv(out / "metrics.csv")


@pytest.mark.slow
def test_gloo_two_processes_match_the_simulated_run_and_stay_identical(tmp_path, pydoc_dir):
    man, real = _on_gloo(spec_for("demo", backend="gloo", steps=3), pydoc_dir, tmp_path / "gloo")
    assert man["backend"] == "gloo" and man["clock"] == "measured"
    assert man["params_max_abs_diff_across_ranks"] == 0.0
    _, sim = _run(spec_for("demo", steps=3), pydoc_dir, tmp_path / "sim")
    assert np.allclose(real["loss"], sim["loss"], atol=1e-5)
    assert (real["bytes"] == sim["bytes"]).all()  # one accounting rule
    assert abs(man["final"]["val_loss"] - json.loads((tmp_path / "sim/manifest.json").read_text())["final"]["val_loss"]) < 1e-4


@pytest.mark.slow
def test_diloco_on_gloo_matches_the_simulated_run_at_each_sync(tmp_path, pydoc_dir):
    """DiLoCo on two gloo processes (H = 2, four steps): the ranks end identical, the bytes are
    the simulated run's, and at each synchronisation (every H-th step, where the workers' mean
    loss is all-reduced with the deltas) the loss is the simulated run's.  Between syncs a
    process reports its own worker's loss, the simulated cluster the mean of all of them."""
    man, real = _on_gloo(spec_for("diloco", backend="gloo", steps=4), pydoc_dir, tmp_path / "gloo")
    assert man["backend"] == "gloo" and man["params_max_abs_diff_across_ranks"] == 0.0
    _, sim = _run(spec_for("diloco", steps=4), pydoc_dir, tmp_path / "sim")
    assert len(real) == len(sim) == 4
    assert (real["bytes"] == sim["bytes"]).all() and real["bytes"].iloc[1] > 0 == real["bytes"].iloc[0]
    sync = [1, 3]  # steps 2 and 4 of H = 2
    assert np.allclose(real["loss"].iloc[sync], sim["loss"].iloc[sync], atol=1e-5)
    assert abs(man["final"]["val_loss"] - json.loads((tmp_path / "sim/manifest.json").read_text())["final"]["val_loss"]) < 1e-4

def test_paper_config_runs_shrunk(tmp_path, monkeypatch):
    """config/paper.yaml's DeMo experiment: its data set through datasets.load_dataset (a tiny
    in-memory stand-in), its OLMo-shaped model with tiny shapes, a few steps, on CPU."""
    import datasets

    from distlab.data import prepare_dataset

    paper = yaml.safe_load((ROOT / "config/paper.yaml").read_text())
    d = paper["demo"]
    ds_spec = {"name": d["dataset"], **paper["datasets"][d["dataset"]]}
    text = ["The quick brown fox jumps over the lazy dog. " * 20 + str(i) for i in range(60)]
    fake = datasets.DatasetDict({ds_spec.get("train_split", "train"):
                                 datasets.Dataset.from_dict({ds_spec.get("text_key", "text"): text})})
    seen = {}

    def load_dataset(path, name=None, *a, **k):
        seen["args"] = (path, name)
        return fake

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    prepare_dataset(ds_spec, tmp_path / "data", seed=paper["data_seed"])
    assert seen["args"] == (ds_spec["hf_path"], ds_spec.get("hf_name"))
    assert d["model"]["name"] == "olmo" and d["real"]["backend"] == "nccl"
    assert checks.check(paper) == []
    for method in d["methods"]:
        model = {**d["model"], "n_layer": 1, "d_model": 32, "n_head": 2, "block_size": 16}
        spec = spec_for(method, model=model, lr=d["lr"][method], batch_size=2, steps=2, eval_every=1,
                        demo=d["demo"], adamw=d["adamw"], diloco={**d["diloco"], "H": 1},
                        powersgd=d["powersgd"],
                        n_workers=2, cluster={"compute": d["compute"], "network": paper["cluster"]["network"],
                                              "straggler": {"model": "none"}})
        man, m = _run(spec, tmp_path / "data", tmp_path / method)
        assert len(m) == 2 and np.isfinite(man["final"]["val_loss"])


def test_a_resumed_multi_seed_job_skips_the_seeds_that_had_finished(tmp_path, pydoc_dir, monkeypatch):
    """Killed during seed 1, the job reruns: seed 0 is not trained again, seed 1 resumes."""
    base = {k: v for k, v in spec_for("demo", steps=6).items() if k != "seed"}
    job = specs.validate_spec({**base, "seeds": [0, 1]}, train.SPEC_SCHEMA, "demo")
    rt = {"checkpoint": {"every_s": 0, "every_steps": 1}}
    real = train._worker_grad
    calls = {"n": 0}

    def dying(method, w, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2 * 6 + 2 * 3 + 1:  # seed 1, step 3, first worker
            raise KeyboardInterrupt("killed")
        return real(method, w, *a, **k)

    monkeypatch.setattr(train, "_worker_grad", dying)
    with pytest.raises(KeyboardInterrupt):
        train.run_simulated(job, pydoc_dir, tmp_path / "job", rt)
    seed0 = tmp_path / "job/seed0/manifest.json"
    assert seed0.exists() and (tmp_path / "job/seed1/checkpoint.pt").exists()
    before = seed0.read_bytes()
    monkeypatch.setattr(train, "_worker_grad", real)
    trained = []
    one = train._run_simulated_one
    monkeypatch.setattr(train, "_run_simulated_one", lambda s, *a: trained.append(s["seed"]) or one(s, *a))
    train.run_simulated(job, pydoc_dir, tmp_path / "job", rt)
    assert trained == [1] and seed0.read_bytes() == before
    man = json.loads((tmp_path / "job/seed1/manifest.json").read_text())
    assert man["resumed"] == 1
    alone = _run(spec_for("demo", steps=6, seed=1), pydoc_dir, tmp_path / "alone")[1]
    resumed = pd.read_csv(tmp_path / "job/seed1/metrics.csv")
    assert np.array_equal(alone["loss"].to_numpy(), resumed["loss"].to_numpy())
    # a finished seed of another spec (another lr) is not taken for this job's
    trained.clear()
    train.run_simulated({**job, "lr": 2e-3}, pydoc_dir, tmp_path / "job", rt)
    assert trained == [0, 1]


def test_the_learning_rate_can_come_from_the_sweeps_choice(tmp_path, pydoc_dir):
    choice = tmp_path / "chosen.json"
    choice.write_text(json.dumps({"demo": 0.003, "adamw": 0.001}))
    spec = spec_for("demo", lr={"sweep": str(choice), "method": "demo"})
    man, _ = _run(spec, pydoc_dir, tmp_path / "r")
    assert man["spec"]["lr"] == 0.003 and man["spec"]["lr_chosen_by"].endswith("chosen.json:demo")
    assert {"val_loss", "test_loss", "curve_val_loss"} <= set(man["final"])
    with pytest.raises(specs.SpecError, match="lr.method"):
        train.resolve_lr(spec_for("demo", lr={"sweep": str(choice), "method": "diloco"}))
    with pytest.raises(specs.SpecError, match="lr.sweep"):
        train.resolve_lr(spec_for("demo", lr={"sweep": str(tmp_path / "none.json"), "method": "demo"}))


@pytest.mark.slow
def test_a_killed_gloo_job_resumes_from_its_time_based_checkpoints(tmp_path, pydoc_dir):
    """Real processes checkpoint on checkpoint.every_s (agreed across ranks), print progress every
    10 % of the steps, and a rerun after SIGKILL resumes and ends where an uninterrupted run ends,
    also when the kill fell between the ranks' saves of one step."""
    import signal
    import time

    spec = spec_for("demo", backend="gloo", steps=150, eval_every=50)

    def cmd(out, every_s):
        return [sys.executable, "-m", "distlab", "train", "--experiment", "demo", "--threads", "2",
                "--spec", json.dumps(spec), "--runtime",
                json.dumps({"timeout_s": 60, "job_timeout_s": 600,
                            "checkpoint": {"every_s": every_s, "every_steps": 0}}),
                "--data", str(pydoc_dir), "--out", str(out)]

    r = subprocess.run(cmd(tmp_path / "full", 0), env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    progress = [x for x in r.stderr.splitlines() if " step " in x and "/150" in x]   # the ranks' lines
    assert len(progress) >= 10, r.stderr[-2000:]
    out = tmp_path / "killed"
    proc = subprocess.Popen(cmd(out, 0.05), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not (
            (out / "checkpoint.rank0.pt.prev").exists() and (out / "checkpoint.rank1.pt.prev").exists()):
        time.sleep(0.05)
    time.sleep(0.3)
    assert proc.poll() is None, "the run finished before it could be killed; make it longer"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists()
    # the kill made to fall between the two ranks' saves of one step (as it did once in CI): where
    # the kill left both ranks at the same step, rank 0 is put a save behind; where it already fell
    # between the two saves (either rank ahead, as on a loaded machine), that is the case itself.
    # The ranks resume from the newest step both hold.
    def steps(rank):
        return [int(read_checkpoint_file(out / f"checkpoint.rank{rank}.pt{x}")[1]["step"])
                for x in ("", ".prev")]
    held0, held1 = steps(0), steps(1)
    if held0[0] == held1[0]:
        (out / "checkpoint.rank0.pt.prev").replace(out / "checkpoint.rank0.pt")
    else:
        assert held0[0] in held1 or held1[0] in held0, (held0, held1)
    r = subprocess.run(cmd(out, 0.05), env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resumed at step" in r.stderr
    man = json.loads((out / "manifest.json").read_text())
    assert man["resumed"] == 1 and man["params_max_abs_diff_across_ranks"] == 0.0
    full = pd.read_csv(tmp_path / "full/metrics.csv")
    resumed = pd.read_csv(out / "metrics.csv")
    assert len(resumed) == 150
    assert np.allclose(full["loss"], resumed["loss"], atol=1e-6)
    assert not list(out.glob("checkpoint*"))


def test_the_comparison_takes_the_sweeps_run_of_its_seed_at_the_chosen_lr(tmp_path, pydoc_dir):
    """The workflow's pick step (distlab.results.sweeps.pick, rule demo_table_sweep) copies the
    sweep's run at the chosen lr to a folder of its own; a comparison spec naming that folder in
    ``reuse`` (same spec but for where the lr came from) copies it, not retrains it, and it equals a
    fresh run; other seeds are trained.  The trainer derives no path from the sweep's layout."""
    from distlab.results import sweeps

    sweep = tmp_path / "sweep"
    for lr in (1e-3, 3e-3):
        s = {k: v for k, v in spec_for("demo", lr=lr).items() if k != "seed"}
        train.run_simulated({**s, "seeds": [0]}, pydoc_dir, sweep / f"lr{lr:g}" / "demo")
    choice = tmp_path / "chosen.json"
    choice.write_text(json.dumps({"demo": 3e-3}))
    picked = tmp_path / "picked" / "seed0"
    sweeps.pick_all(choice, [{"key": "demo", "out": str(picked),
                              "runs": {f"{lr:g}": str(sweep / f"lr{lr:g}" / "demo" / "seed0") for lr in (1e-3, 3e-3)}}])
    assert json.loads((picked / "manifest.json").read_text())["spec"]["lr"] == 3e-3
    base = {k: v for k, v in spec_for("demo").items() if k != "seed"}
    job = {**base, "seeds": [0, 1], "lr": {"sweep": str(choice), "method": "demo"}, "reuse": {"0": str(picked)}}
    train.run_simulated(job, pydoc_dir, tmp_path / "cmp")
    m0 = json.loads((tmp_path / "cmp/seed0/manifest.json").read_text())
    assert m0["reused_from"] == str(sweep / "lr0.003/demo/seed0") and "picked_from" not in m0
    assert m0["spec"]["lr"] == 3e-3 and m0["spec"]["lr_chosen_by"].endswith(":demo")
    assert "reused_from" not in json.loads((tmp_path / "cmp/seed1/manifest.json").read_text())
    fresh = _run(spec_for("demo", lr=3e-3), pydoc_dir, tmp_path / "fresh")[1]
    got = pd.read_csv(tmp_path / "cmp/seed0/metrics.csv")
    for col in ("loss", "val_loss", "bytes"):
        assert np.allclose(got[col], fresh[col], equal_nan=True), col
    # a rerun finds every seed finished: nothing is trained or copied again
    one = train.resolve_lr({**{k: v for k, v in job.items() if k != "seeds"}, "seed": 0})
    assert train.finished(tmp_path / "cmp/seed0", one)
    # a different horizon than the sweep's: nothing to reuse, the seed is trained
    other = {**job, "seeds": [0], "steps": 2, "eval_every": 1}
    train.run_simulated(other, pydoc_dir, tmp_path / "cmp2")
    assert "reused_from" not in json.loads((tmp_path / "cmp2/seed0/manifest.json").read_text())
    with pytest.raises(specs.SpecError, match="reuse"):
        train.check_spec({**spec_for("demo"), "backend": "gloo", "reuse": {"0": str(picked)}})
    # a choice outside the swept grid is refused, naming the key
    choice.write_text(json.dumps({"demo": 1e-2}))
    with pytest.raises(specs.SpecError, match="demo"):
        sweeps.pick(choice, "demo", {"0.001": str(sweep / "lr0.001/demo/seed0")}, tmp_path / "bad")


def test_the_whole_step_benchmark_runs_on_the_backend_it_is_given(tmp_path, pydoc_dir, monkeypatch):
    """The benchmark's whole-step part (rule demo_bench, and demo_bench_gpu on NCCL where there is a
    GPU) on gloo with 2 processes, one round: a row per method, labelled with its backend; the NCCL
    choice on a machine without a GPU launches nothing and writes rows "not run: no GPU" (timings
    are reported, never asserted)."""
    from distlab.demo import bench

    run = spec_for("demo", backend="gloo")
    spec = {"model": MODEL, "steps": 3, "lr": 1e-3, "demo": run["demo"], "parts": ["whole step"],
            "backend": "gloo", "nprocs": 2, "rounds": 1, "run": run}
    df = bench.main_bench(spec, pydoc_dir, tmp_path / "bench.csv", threads=2)
    assert sorted(df["what"]) == ["adamw", "demo"]
    assert set(df["benchmark"]) == {"whole step, 2 gloo processes"}
    assert (df["median_ms"] > 0).all() and (tmp_path / "bench.md").exists()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    gpu = bench.main_bench({**spec, "backend": "nccl", "large_model": MODEL}, pydoc_dir, tmp_path / "gpu.csv",
                           threads=2)
    assert list(gpu["what"]) == [bench.NO_GPU, bench.NO_GPU] and gpu["median_ms"].isna().all()
    assert list(gpu["model"]) == ["default", "large"] and "not run: no GPU" in (tmp_path / "gpu.md").read_text()
