"""The local-learning workflow: the trainer end to end, a killed parallel run, config checks,
the `local_learning` target on both configurations (dry-run), a tiny end-to-end run, and
config/paper.yaml's experiment shrunk onto the CPU."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest
import yaml

from conftest import ROOT, bin_path, workflow_tree
from distlab.data import prepare_dataset
from distlab.local import spec as checks, workflow
from distlab.local.train import run_simulated
from distlab.scoring.claims import load_claims_file

ENV = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def smk(*args, cwd=None, timeout=600):
    return subprocess.run(["snakemake", *args], cwd=cwd or workflow_tree(), env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def config(name="config/config.yaml"):
    from snakemake.utils import update_config

    c = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    if name != "config/config.yaml":
        update_config(c, yaml.safe_load((ROOT / name).read_text()))
    return c


def tiny_section():
    """The local_learning section of the tiny test config (read on its own, so that this
    paper's tests do not depend on the other sections of the shared file)."""
    text = (ROOT / "tests/configs/tiny.yaml").read_text()
    start = text.index("\nlocal_learning:")
    end = text.index("# ---", start)
    return yaml.safe_load(text[start:end])["local_learning"]


@pytest.fixture(scope="module")
def pydoc(tmp_path_factory):
    out = tmp_path_factory.mktemp("localwf") / "pydoc"
    prepare_dataset({"name": "pydoc", "kind": "text", "source": "pydoc_topics",
                     "val_fraction": 0.05, "test_fraction": 0.05}, out, seed=0)
    return out


def test_the_pc_cost_benchmark_repeats_the_training_T_and_leaves_the_weights(tmp_path, pydoc):
    """local.pc.cost's samples: the training T (fixed prediction, truncated below L + 1) measured
    `repeats` times, each beside a BP measurement of the same repeat; the grid's other settings
    once; the lr-0 AdamW step never moves the weights (the function checks it and raises)."""
    from distlab.local import bench

    o = workflow.pc_cost_options(tiny_section())
    df = bench.pc_cost(o["spec"], str(pydoc), [1, 3], o["variants"], 0, 1, tmp_path / "pc.csv",
                       repeats=3, training_T=3)
    train = df[df.role == "training"]
    assert set(train["T"]) == {3} and set(train.variant) == {"fixed"}
    assert sorted(train[train.method == "bp"].seed) == sorted(train[train.method != "bp"].seed) == [0, 1, 2]
    assert set(train.method) == {"bp", "pc-fixed"}           # T = 3 = L + 1 for the 2-layer model
    grid = df[df.role == "grid"]
    assert set(zip(grid.variant, grid["T"])) == {("fixed", 1), ("strict", 1), ("strict", 3)}
    assert set(grid[grid.variant == "fixed"].method) == {"bp", "pc-fixed-trunc"}
    assert (df.tokens_per_s > 0).all() and df[df.method != "bp"].cost_ratio.gt(0).all()
    assert pd.read_csv(tmp_path / "pc.csv").shape == df.shape
    with pytest.raises(ValueError, match="fixed variant"):
        bench.pc_cost(o["spec"], str(pydoc), [1], {"strict": o["variants"]["strict"]}, 0, 1,
                      tmp_path / "x.csv", repeats=2, training_T=1)


@pytest.mark.parametrize("group,method", [("rc", "bp"), ("rc", "rc-seq"), ("rc", "rc-par"),
                                          ("rc", "rc-async"), ("rc", "rc-pc-T2"),
                                          ("pc", "pc-fixed"), ("pc", "pc-strict")])
def test_trainer_writes_a_complete_run(tmp_path, pydoc, group, method, capfd):
    spec = workflow.spec(tiny_section(), group, method, 0)
    run_simulated(spec, pydoc, tmp_path / "run", {"timeout_s": 60})
    man = json.loads((tmp_path / "run/manifest.json").read_text())
    m = pd.read_csv(tmp_path / "run/metrics.csv")
    assert man["method"] == method and man["clock"] == "measured"
    assert len(m) == spec["steps"] and m["val_loss"].notna().sum() >= 2  # async RC too: its snapshots
    assert {"tokens", "time", "loss", "val_loss", "backend", "clock"} <= set(m.columns)
    assert m["time"].is_monotonic_increasing and (m["tokens"].diff().dropna() >= 0).all()
    assert 0 < man["final"]["test_loss"] < 7 and man["tokens_per_s"] > 0
    n_proc = spec["sections"] + 1 if method in ("rc-par", "rc-async") else 1
    assert man["processes"] == n_proc and len(man["memory_per_process"]) == n_proc
    mem = man["memory"]
    assert mem["pss_mb"] == pytest.approx(sum(p["pss_mb"] for p in man["memory_per_process"]), abs=0.5)
    assert 0 < mem["pss_mb"] <= mem["rss_sum_mb"] + 0.5 and mem["max_rss_mb"] <= mem["rss_sum_mb"] + 0.5
    if group == "rc":  # the probes: the readout on every section's output, at every evaluation
        assert {f"probe{k}" for k in range(spec.get("sections", 1))} <= set(m.columns)
    assert (tmp_path / "run/model.pt").exists() == (method == "bp" and group == "rc")
    assert "Traceback" not in capfd.readouterr().err  # a successful run logs none


@pytest.mark.parametrize("group,method", [("pc", "pc-fixed"), ("rc", "bp")])
def test_an_untimed_job_of_several_seeds_gives_each_seed_its_own_run(tmp_path, pydoc, group, method):
    """The rule's one-job-for-all-seeds spec trains exactly what one job a seed trains (BP of
    the deep model: its untimed seeds' job against an extra seed's job of its own)."""
    c = tiny_section()
    if method == "bp":
        spec = workflow.untimed_bp_spec(c, [0, 1])
    else:
        spec = workflow.seeds_spec(c, group, method, [0, 1])
    assert "seed" not in spec and spec["seeds"] == [0, 1]
    run_simulated(spec, pydoc, tmp_path / "all", {"timeout_s": 60})
    for seed in (0, 1):
        alone = workflow.extra_spec(c, group, method, seed)
        run_simulated(alone, pydoc, tmp_path / f"alone{seed}", {"timeout_s": 60})
        man = json.loads((tmp_path / f"all/seed{seed}/manifest.json").read_text())
        assert man["spec"] == alone and man["peak_rss_scope"] == "job"
        got = pd.read_csv(tmp_path / f"all/seed{seed}/metrics.csv")
        want = pd.read_csv(tmp_path / f"alone{seed}/metrics.csv")
        pd.testing.assert_series_equal(got["loss"], want["loss"])
        assert man["final"] == json.loads((tmp_path / f"alone{seed}/manifest.json").read_text())["final"]


def test_a_timed_run_never_shares_its_job():
    c = tiny_section()
    for group, method in (("rc", "bp"), ("rc", "rc-par")):
        with pytest.raises(ValueError, match="timed"):
            workflow.seeds_spec(c, group, method, [0, 1])
    spec = {**workflow.spec(c, "rc", "rc-par", 0), "seeds": [0, 1]}
    spec.pop("seed")
    with pytest.raises(ValueError, match="gets a job of its own"):
        run_simulated(spec, "nowhere", "nowhere")


def test_bp_is_timed_on_the_timed_seeds_and_untimed_on_the_others():
    """The default config: BP gets a two-core timed job on rc.parallel_seeds only; its other
    seeds are one one-thread job whose per-seed specs are BP's spec on one thread."""
    from distlab.config.specs import each_seed

    c = config()
    ll, seeds = c["local_learning"], c["seeds"]
    timed_ = workflow.timed_seeds(ll, seeds)
    untimed = workflow.untimed_bp_seeds(ll, seeds)
    assert timed_ == ll["rc"]["parallel_seeds"] and sorted(timed_ + untimed) == sorted(seeds)
    assert workflow.spec(ll, "rc", "bp", timed_[0])["threads"] == ll["threads"] == 2
    job = workflow.untimed_bp_spec(ll, untimed)
    for one, seed in zip(each_seed(job), untimed):
        assert one == {**workflow.spec(ll, "rc", "bp", seed), "threads": 1, "timed": False}
    # every BP seed is among the runs the summary reads, once
    dirs = [d for d in workflow.run_dirs(ll, seeds) if "/rc/bp/" in d]
    assert dirs == [f"results/local/rc/bp/seed{s}/manifest.json" for s in seeds]


def test_async_rc_runs_every_comparison_seed_as_a_timed_job():
    """The default config: asynchronous RC, the source's method, is paired with BP on every seed
    (local.rc.noninferior), a timed job of the section's cores each; the lock-step parallel RC
    (the sequential mode's numbers) stays on rc.parallel_seeds."""
    c = config()
    ll, seeds = c["local_learning"], c["seeds"]
    assert workflow.seeds_of(ll, "rc", "rc-async", seeds) == list(seeds) == [0, 1, 2, 3, 4]
    assert workflow.seeds_of(ll, "rc", "rc-par", seeds) == ll["rc"]["parallel_seeds"] == [0]
    dirs = [d for d in workflow.run_dirs(ll, seeds) if "/rc/rc-async/" in d]
    assert dirs == [f"results/local/rc/rc-async/seed{s}/manifest.json" for s in seeds]
    for s in seeds:
        sp = workflow.spec(ll, "rc", "rc-async", s)
        assert sp["timed"] and sp["mode"] == "async" and workflow.timed("rc", "rc-async")
    claims, _ = load_claims_file(ROOT / "config/claims.yaml")
    row = next(x for x in claims if x["id"] == "local.rc.noninferior")
    assert row["a"] == {"group": "rc", "method": "rc-async"} and row["b"] == {"group": "rc", "method": "bp"}


def test_extra_seeds_go_to_the_settings_a_local_claim_compares():
    """stats.extra_seeds for a local claim: the two runs it pairs get the extra seeds, numbered
    after the configured ones; an extra seed's spec is what the configured job trains for it."""
    from distlab.pipeline.extra_seeds import requests
    from distlab.scoring.scorecard import load_claims
    from distlab.config.specs import each_seed

    c = config()
    ll, seeds = c["local_learning"], c["seeds"]
    c["stats"]["extra_seeds"] = {"local.rc.noninferior": 2}
    reqs = requests(c, load_claims(ROOT / "config/claims.yaml"))
    assert workflow.extra_seeds(ll, reqs, seeds, "rc", "rc-async") == [5, 6]  # the row pairs async RC with BP
    assert workflow.extra_seeds(ll, reqs, seeds, "rc", "bp") == [5, 6]
    assert workflow.extra_seeds(ll, reqs, seeds, "rc", "rc-seq") == []
    assert workflow.extra_seeds(ll, reqs, seeds, "pc", "bp") == []
    assert workflow.extra_seeds(ll, reqs, seeds, "rc", "rc-par") == []
    assert workflow.all_extra_seeds(ll, reqs, seeds) == [5, 6]
    assert workflow.extra_spec(ll, "rc", "rc-async", 5) == workflow.spec(ll, "rc", "rc-async", 5)  # timed, as the others
    assert workflow.extra_spec(ll, "rc", "bp", 5) == each_seed(workflow.untimed_bp_spec(ll, [1, 5]))[-1]
    assert workflow.extra_threads(ll, "rc", "bp") == 1 and workflow.extra_threads(ll, "rc", "rc-async") == 2
    runs = workflow.run_dirs(ll, seeds, reqs=reqs)
    assert len(runs) == len(workflow.run_dirs(ll, seeds)) + 4
    assert "results/local/rc/rc-async/seed6/manifest.json" in runs


def test_extra_seeds_are_jobs_of_their_own_and_change_no_configured_job(tmp_path):
    """Dry run of local_learning with and without an extra-seed request: every configured
    training command is unchanged, the extra seeds are one job each, read by the summary."""
    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump({"stats": {"alpha": 0.05, "extra_seeds": {"local.rc.noninferior": 2}}}))

    def commands(*args):
        r = smk("local_learning", "-n", "-p", "--forceall", *args)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        lines = (r.stdout + r.stderr).splitlines()
        return [ln.split("Shell command:")[-1].strip() for ln in lines
                if "distlab train --experiment local" in ln], r.stdout + r.stderr

    base, _ = commands()
    more, out = commands("--configfile", "config/config.yaml", str(extra))
    assert set(base) <= set(more)  # no configured job's spec changes
    new = [cmd for cmd in more if cmd not in base]
    assert len(new) == 4, new  # 2 seeds x (rc-async, bp), one job each
    for cmd in new:
        spec = json.loads(cmd.split("--spec ")[1].split(" --runtime")[0].strip("'"))
        assert spec["seed"] in (5, 6) and "seeds" not in spec
        assert (spec["method"], spec.get("mode")) in (("bp", None), ("rc", "async"))
    assert "local_train_extra" in out


class Killed(Exception):
    pass


@pytest.mark.parametrize("group,method", [("rc", "rc-seq"), ("pc", "pc-fixed")])
def test_a_killed_sequential_run_resumes_to_the_same_result(tmp_path, pydoc, monkeypatch, group, method):
    from distlab.local import rc

    spec = workflow.spec(tiny_section(), group, method, 1)
    runtime = {"timeout_s": 60, "checkpoint": {"every_s": 0, "every_steps": 2}}
    run_simulated(spec, pydoc, tmp_path / "whole", runtime)
    whole = pd.read_csv(tmp_path / "whole/metrics.csv")

    orig = rc.Resume.tick

    def tick_then_die(self, t_done, res):
        orig(self, t_done, res)
        if t_done == 4:
            raise Killed()

    monkeypatch.setattr(rc.Resume, "tick", tick_then_die)
    with pytest.raises(Killed):
        run_simulated(spec, pydoc, tmp_path / "cut", runtime)
    assert (tmp_path / "cut/checkpoint.pt").exists() and not (tmp_path / "cut/manifest.json").exists()
    monkeypatch.setattr(rc.Resume, "tick", orig)
    run_simulated(spec, pydoc, tmp_path / "cut", runtime)
    cut = pd.read_csv(tmp_path / "cut/metrics.csv")
    cols = ["step", "tokens", "loss", "val_loss"]
    pd.testing.assert_frame_equal(whole[cols], cut[cols])
    assert not (tmp_path / "cut/checkpoint.pt").exists()

    # killed again, then rerun after a config change: the old checkpoint is not continued
    monkeypatch.setattr(rc.Resume, "tick", tick_then_die)
    with pytest.raises(Killed):
        run_simulated(spec, pydoc, tmp_path / "changed", runtime)
    monkeypatch.setattr(rc.Resume, "tick", orig)
    new = dict(spec, lr=spec["lr"] / 2)
    run_simulated(new, pydoc, tmp_path / "changed", runtime)
    run_simulated(new, pydoc, tmp_path / "fresh", runtime)
    changed, fresh = (pd.read_csv(tmp_path / d / "metrics.csv") for d in ("changed", "fresh"))
    pd.testing.assert_frame_equal(changed[cols], fresh[cols])


def test_a_killed_parallel_run_leaves_nothing_that_looks_complete(tmp_path, pydoc):
    spec = workflow.spec(tiny_section(), "rc", "rc-par", 0)
    spec.update(steps=100000, eval_every=100000)
    out = tmp_path / "run"
    log = open(tmp_path / "log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "distlab", "train", "--experiment", "local",
                             "--spec", json.dumps(spec), "--data", str(pydoc), "--out", str(out),
                             "--runtime", json.dumps({"timeout_s": 30})],
                            env=ENV, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 240
        workers = []
        while time.time() < deadline:
            workers = [c for c in psutil.Process(proc.pid).children(recursive=True)
                       if c.name().startswith("rc-section")]
            if len(workers) >= spec["sections"] and "step 0 " in (tmp_path / "log").read_text():
                break
            time.sleep(0.5)
        assert len(workers) >= spec["sections"], (tmp_path / "log").read_text()[-2000:]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # the section workers die with their coordinator (PR_SET_PDEATHSIG), and no output exists
    gone, alive = psutil.wait_procs(workers, timeout=30)
    assert not alive
    assert not (out / "manifest.json").exists() and not (out / "metrics.csv").exists()
    # the rerun of the same command then completes
    spec.update(steps=4, eval_every=2)
    run_simulated(spec, pydoc, out, {"timeout_s": 60})
    assert (out / "manifest.json").exists()


def test_config_checks_name_the_key():
    c = config()
    assert checks.check(c) == []
    bad = copy.deepcopy(c)
    s = bad["local_learning"]
    s["rc"]["sections"] = 5
    s["rc"]["methods"] = ["rc-seq", "rc-par"]
    s["pc"]["model"]["n_head"] = 3
    s["pc"]["methods"] = ["bp", "pc-fixed", "pc-strict"]  # T = 4 < 13: truncated, misnamed
    del s["pc"]["variants"]["strict"]
    s["rc"]["hybrid"] = {"T": [1, 4], "eta": 1.0, "gamma": 1.0, "seeds": [7]}  # not in the default config
    s["warmup_steps"] = s["steps"]
    s["dataset"] = "digits"
    s["bench"]["methods"] = ["bp", "rc-seq"]
    s["rc"]["parallel_seeds"] = [0, 99]
    errors = "\n".join(checks.check(bad))
    for key in ("local_learning.rc.sections", "local_learning.rc.methods", "local_learning.pc.model.n_head",
                "local_learning.pc.variants.strict", "local_learning.warmup_steps",
                "local_learning.dataset", "local_learning.bench.methods",
                "local_learning.rc.parallel_seeds", "local_learning.pc.methods: pc-fixed at T = 4",
                "local_learning.rc.hybrid.seeds"):
        assert key in errors, key


@pytest.mark.parametrize("change,key", [
    (lambda s: s.update(lr=float("nan")), "local_learning.lr"),
    (lambda s: s["rc"].update(methods=["bp", "bp"]), "local_learning.rc.methods"),
    (lambda s: s["rc"].update(concurrency="fork"), "local_learning.rc.concurrency"),
    (lambda s: s["pc"]["variants"]["fixed"].update(eta=1.5), "local_learning.pc.variants.fixed.eta"),
    (lambda s: s["bench"].update(repeats=1), "local_learning.bench.repeats"),
    (lambda s: s.update(stepz=3), "local_learning"),
])
def test_config_schema_refuses_bad_values(change, key):
    from distlab.config.checks import config_errors

    c = config()
    change(c["local_learning"])
    errors = "\n".join(config_errors(c, ROOT / "workflow/schemas"))
    assert key in errors, errors


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/paper.yaml"])
def test_target_resolves(configfile, target_dry_runs):
    r = target_dry_runs[("local_learning", configfile)]  # -n --forceall --quiet rules
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for rule in ("local_train", "local_train_seeds", "local_summarize", "local_bench_throughput", "local_bench_pc_cost",
                 "local_nonident", "local_fig_loss_tokens", "local_fig_loss_time",
                 "local_fig_throughput_memory", "local_fig_pc_cost", "local_fig_nonident",
                 "local_fig_probes", "local_table", "scorecard_paper"):
        assert rule in r.stdout, rule
    c = config(configfile)
    # the RC + PC hybrid's figure where a config sets rc.hybrid (config/paper.yaml), not in the default
    hybrid = bool((c["local_learning"]["rc"].get("hybrid") or {}).get("T"))
    assert ("local_fig_hybrid" in r.stdout) == hybrid == (configfile == "config/paper.yaml")
    assert len(c["seeds"]) >= 5
    ll = c["local_learning"]
    n_runs = len(workflow.run_dirs(ll, c["seeds"]))
    par = [m for m in ll["rc"]["methods"] if m in workflow.LOCKSTEP]  # asynchronous RC: every seed
    n_par = len(par) * len(ll["rc"].get("parallel_seeds") or c["seeds"])
    n_hyb = len(workflow.hybrid_methods(ll)) * len((ll["rc"].get("hybrid") or {}).get("seeds") or c["seeds"])
    assert n_runs == len(c["seeds"]) * (len(ll["rc"]["methods"]) + len(ll["pc"]["methods"])
                                        - len(par)) + n_par + n_hyb


def test_paper_config_runs_shrunk(tmp_path, monkeypatch):
    """config/paper.yaml's experiment: its hub text through datasets.load_dataset (a tiny
    in-memory stand-in), every method's spec as the rules build it, tiny shapes, a few steps."""
    import datasets

    paper = config("config/paper.yaml")
    c = paper["local_learning"]
    assert c["rc"]["model"]["n_layer"] == 24 and c["pc"]["model"]["n_layer"] == 12
    assert checks.check(paper) == []
    ds_spec = {"name": c["dataset"], **paper["datasets"][c["dataset"]]}
    assert ds_spec["source"] == "hf" and ds_spec["kind"] == "text"
    text = [f"Line {i}: the quick brown fox jumps over the lazy dog. " * 8 for i in range(80)]
    fake = datasets.DatasetDict({ds_spec.get("train_split", "train"):
                                 datasets.Dataset.from_dict({ds_spec.get("text_key", "text"): text})})
    seen = {}

    def load_dataset(path, name=None, *a, **k):
        seen["args"] = (path, name)
        return fake

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    prepare_dataset(ds_spec, tmp_path / "data", seed=paper["data_seed"])
    assert seen["args"] == (ds_spec["hf_path"], ds_spec.get("hf_name"))
    small = {"n_head": 2, "d_model": 16, "block_size": 16}
    shrunk = copy.deepcopy(c)
    shrunk["rc"]["model"].update(small, n_layer=4)
    shrunk["rc"]["worker_threads"] = 1
    shrunk["pc"]["model"].update(small, n_layer=2)
    shrunk.update(steps=3, eval_every=2, batch_size=2, warmup_steps=1,
                  eval={"batches": 1, "batch_size": 2, "final_batches": 1}, threads=1)
    shrunk["rc"]["hybrid"]["T"] = [1]
    for group in ("rc", "pc"):
        for method in workflow.methods_of(shrunk, group):
            spec = workflow.spec(shrunk, group, method, paper["seeds"][0])
            out = tmp_path / group / method
            run_simulated(spec, tmp_path / "data", out, {"timeout_s": 60})
            man = json.loads((out / "manifest.json").read_text())
            assert man["spec"]["dataset"] == c["dataset"] and man["final"]["test_loss"] > 0


@pytest.mark.slow
def test_tiny_local_learning_end_to_end(tiny_workflow):
    work, r = tiny_workflow  # the whole workflow on the tiny config, run once per session
    cfg = ["--configfile", "tests/configs/tiny.yaml"]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    paper = work / "paper"
    for f in ["figures/local_loss_tokens.png", "figures/local_loss_time.png",
              "figures/local_throughput_memory.png", "figures/local_pc_cost.png",
              "figures/local_nonident.png", "figures/local_probes.png", "figures/local_hybrid.png",
              "tables/local_main.md", "tables/local_main.csv",
              "scorecard/P3.md", "scorecard/P3.csv"]:
        assert (paper / f).stat().st_size > 0, f
    card = pd.read_csv(paper / "scorecard/P3.csv").set_index("id")
    assert card.loc["local.rc.noninferior", "n_seeds"] == 2
    assert card.loc["local.rc.throughput", "n_seeds"] == 2  # the benchmark's repeats
    runs = pd.read_csv(work / "results/local/runs.csv")
    tiny = tiny_section()
    assert len(runs) == len(workflow.run_dirs(tiny, [0, 1]))
    stale = pd.read_csv(work / "results/local/staleness.csv")
    assert (stale.readout_staleness_max <= stale.bound).all() and len(stale) == 2 * tiny["rc"]["sections"]
    for log in (work / "logs/local").rglob("*.log"):  # successful jobs log no traceback
        assert "Traceback" not in log.read_text(), log
    # the parallel sections computed the sequential mode's numbers
    rc = runs[runs.group == "rc"].set_index(["method", "seed"])["final_test_loss"]
    for seed in (0, 1):
        assert rc[("rc-par", seed)] == pytest.approx(rc[("rc-seq", seed)], abs=1e-5)
    table = pd.read_csv(paper / "tables/local_main.csv")
    assert {"test_loss", "verdict", "paper", "throughput_ratio_vs_bp", "rc_par_vs_bp_1thread",
            "bp_vs_bp_1thread", "minus_bigram_floor", "bench_pss_mb", "pss_ratio_vs_bp",
            "rss_sum_ratio_vs_bp"} <= set(table.columns)
    ni = json.loads((work / "results/local/nonident.json").read_text())
    assert all(r["report_rel_diff"] < 1e-2 for r in ni["model"])
    r = smk("local_learning", "-n", *cfg, cwd=work)
    assert "Nothing to be done" in r.stdout + r.stderr
    # the throughput map, its own target, on the tiny config
    r = smk("local_map", "--cores", "2", *cfg, cwd=work)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = pd.read_csv(paper / "tables/local_throughput_map.csv")
    assert set(m.method) == {"rc-par"} and m.ratio_vs_bp.gt(0).all() and m.point.nunique() == 2


def test_the_one_core_bp_of_the_benchmark_is_bp_on_one_thread():
    """``bp-1thread`` splits RC-par / BP into RC's speed-up over one core and BP's own."""
    c = yaml.safe_load((ROOT / "config/config.yaml").read_text())["local_learning"]
    specs = workflow.bench_specs(c)
    assert specs["bp"]["threads"] == c["threads"] == 2
    one = specs["bp-1thread"]
    assert one["threads"] == 1 and one["method"] == "bp"
    assert {k: v for k, v in one.items() if k != "threads"} == {k: v for k, v in specs["bp"].items() if k != "threads"}
    assert specs["rc-par"]["worker_threads"] * specs["rc-par"]["sections"] >= specs["bp"]["threads"]


def test_the_map_measures_the_methods_of_a_point_back_to_back():
    """A ratio at a map point pairs measurements taken next to each other (the spec names come
    sorted by method: without regrouping, every BP point would be measured first)."""
    from distlab.local.bench import interleaved

    names = sorted(workflow.map_specs(config()["local_learning"]))
    for r in (0, 1, 2):
        order = interleaved(names, r)
        assert sorted(order) == names
        points = [n.partition("@")[2] for n in order]
        runs = [p for i, p in enumerate(points) if i == 0 or p != points[i - 1]]
        assert len(runs) == len(set(points))  # each point's measurements are contiguous
    first = interleaved(names, 1)[:4]
    assert first[-1].startswith("bp@") and len({n.partition("@")[2] for n in first}) == 1  # rotated
    assert interleaved(["bp", "rc-par", "rc-async"], 1) == ["rc-par", "rc-async", "bp"]


def test_the_map_table_carries_the_load_it_was_measured_at(tmp_path):
    """Each ratio row says the highest load average at its pair's measurements (a loaded
    machine starves BP's two threads), and the figure's note gives the range."""
    from distlab.local.figures import throughput_map

    rows = []
    for point, load in (("d32-K4-T32", 0.3), ("d64-K4-T32", 7.5)):
        for method, tps, ld in (("bp", 100.0, load), ("rc-par", 150.0, load / 2)):
            rows.append({"method": method, "point": point, "seed": 0, "tokens_per_s": tps,
                         "d_model": int(point[1:3]), "block_size": 32, "sections": 4 if method != "bp" else 0,
                         "load_1min": ld})
    pd.DataFrame(rows).to_csv(tmp_path / "map.csv", index=False)
    throughput_map(tmp_path / "map.csv", tmp_path / "map.png", tmp_path / "t.csv", tmp_path / "t.md", 1.38)
    t = pd.read_csv(tmp_path / "t.csv").set_index("point")
    assert t.loc["d64-K4-T32", "max_load_1min"] == 7.5 and t.loc["d32-K4-T32", "max_load_1min"] == 0.3
    assert t.ratio_vs_bp.tolist() == [1.5, 1.5] and (tmp_path / "map.png").stat().st_size > 0
