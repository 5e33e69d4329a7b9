"""Device placement (P2) in the workflow: the whole config validated (schema and
cross-field checks), a dry-run of config/paper.yaml, a shrunk run of the
paper's settings through the job entry point, and a tiny end-to-end
`snakemake placement` run."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import ROOT, bin_path, workflow_tree

ENV = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
SCHEMAS = ROOT / "workflow" / "schemas"


def _config(name="config.yaml"):
    return yaml.safe_load((ROOT / "config" / name).read_text())


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_configs_are_valid(name):
    from distlab.config.checks import config_errors

    cfg = _config("config.yaml")
    if name == "paper.yaml":
        cfg.update(_config(name))
    assert [e for e in config_errors(cfg, SCHEMAS) if e.startswith("placement")] == []


@pytest.mark.parametrize("edit, key", [
    (lambda p: p["hsdag"].update(samples=0), "placement"),                  # schema: minimum 1
    (lambda p: p.update(budget=0), "placement"),
    (lambda p: p["hsdag_corrected"].update(max_levels="forever"), "placement"),
    (lambda p: p.update(controls=["heft"]), "placement"),
    (lambda p: p.update(ablation_of="rnn"), "placement"),
    (lambda p: p["hsdag"].update(lr=float("nan")), "placement"),
    (lambda p: p.update(seeds=[0, 0]), "placement"),                       # uniqueItems
    (lambda p: p.update(methods=["hsdag", "teleport"]), "placement"),
    (lambda p: p.update(default_pair="tpu"), "placement.default_pair"),
    (lambda p: p.update(run_models=["vgg"]), "placement.run_models"),
    (lambda p: p["pairs"]["cpu_igpu"]["link"].update(gbps=0), "placement"),
])
def test_bad_placement_config_refused_naming_the_key(edit, key):
    from distlab.config.checks import config_errors

    cfg = _config()
    edit(cfg["placement"])
    errs = config_errors(cfg, SCHEMAS)
    assert errs and any(key in e for e in errs), errs


def _smk(*args, cwd=None, timeout=300):
    return subprocess.run(["snakemake", *args], cwd=cwd or workflow_tree(), env=ENV, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/paper.yaml"])
def test_placement_target_dry_run(configfile, target_dry_runs):
    r = target_dry_runs[("placement", configfile)]  # snakemake placement -n --forceall
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for rule in ("placement_graph", "placement_profile", "placement_run", "placement_summarize",
                 "placement_table_main", "placement_table_ablation", "placement_fig_curves",
                 "placement_fig_placement", "placement_real", "placement_table_real"):
        assert rule in r.stdout, rule


def test_paper_settings_shrunk_run(tmp_path):
    """config/paper.yaml's placement settings (released-code rules: no baseline, parsing to the
    fixed point without self-loops, single-device placements invalid; and the corrected variant)
    through the workflow's own specs and the job entry point, on a shrunk BERT."""
    from distlab.placement import costs, graphs, workflow as wf
    from distlab.placement.train import run

    p = _config("paper.yaml")["placement"]
    model = {"name": "bert", "batch": 1, "seq": 8, "layers": 1, "hidden": 16, "heads": 2, "ffn": 32,
             "vocab": 30}
    g = graphs.extract(model)
    graphs.save_graph(g, tmp_path / "g.json")
    (tmp_path / "p.json").write_text(json.dumps(costs.profile(model, repeats=1, warmup=0)))
    shrunk = dict(p, seeds=p["seeds"][:2], budget=6, models={"bert": model},
                  hsdag=dict(p["hsdag"], samples=3, hidden=16), hsdag_corrected=dict(p["hsdag_corrected"], samples=3, hidden=16),
                  rnn=dict(p["rnn"], samples=3, hidden=8))
    for method in ("cpu_only", "heft", "hsdag", "hsdag_const", "hsdag_corrected", "rnn"):
        spec = json.loads(wf.run_spec(shrunk, p["default_pair"], "bert", method))
        out = run(spec, tmp_path / "g.json", tmp_path / "p.json", tmp_path / f"{method}.json")
        res = json.loads(out.read_text())
        assert [r["seed"] for r in res["rows"]] == p["seeds"][:2]
        for r in res["rows"]:
            assert r["evaluations"] == (1 if method in ("cpu_only", "heft") else 6)
            if method not in ("cpu_only", "heft"):  # the released rule: a single-device placement is invalid
                place = np.asarray(r["placement"])[1:]
                assert r["latency_s"] < 1e9 and 0 < np.mean(place) < 1 or r["latency_s"] == 1e10


def test_an_extra_seed_run_equals_that_seed_of_the_configured_run(tmp_path):
    """stats.extra_seeds: the extra-seed job of a run (one seed) computes what the multi-seed
    job computes for that seed, and only the settings the named claim or condition compares
    get extra run files."""
    from distlab.pipeline.extra_seeds import requests
    from distlab.placement import costs, graphs, workflow as wf
    from distlab.placement.train import run
    from distlab.scoring.scorecard import load_claims_file

    pl = _config()["placement"]
    model = {"name": "bert", "batch": 1, "seq": 8, "layers": 1, "hidden": 16, "heads": 2, "ffn": 32,
             "vocab": 30}
    graphs.save_graph(graphs.extract(model), tmp_path / "g.json")
    (tmp_path / "p.json").write_text(json.dumps(costs.profile(model, repeats=1, warmup=0)))
    shrunk = dict(pl, seeds=[0, 1], budget=6, models={"bert": model}, run_models=["bert"],
                  hsdag=dict(pl["hsdag"], samples=3, hidden=16))
    pair = pl["default_pair"]
    both = json.loads(run(json.loads(wf.run_spec(shrunk, pair, "bert", "hsdag")), tmp_path / "g.json",
                          tmp_path / "p.json", tmp_path / "both.json").read_text())
    one = json.loads(run(json.loads(wf.run_spec(shrunk, pair, "bert", "hsdag", seeds=[1])), tmp_path / "g.json",
                         tmp_path / "p.json", tmp_path / "one.json").read_text())
    drop = {"wall_s"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in one["rows"]] == \
        [{k: v for k, v in r.items() if k not in drop} for r in both["rows"] if r["seed"] == 1]

    cfg = {"stats": {"extra_seeds": {"placement.bert.hsdag_learns": 2}}}
    reqs = requests(cfg, *load_claims_file(ROOT / "config/claims.yaml"))
    extra = [f for f in wf.runs(shrunk, "r", reqs) if "/extra/" in f]
    assert extra == [f"r/extra/{pair}/bert/{m}/seed{k}.json" for m in ("hsdag", "hsdag_const") for k in (2, 3)]
    assert wf.runs(shrunk, "r") == [f for f in wf.runs(shrunk, "r", reqs) if "/extra/" not in f]


def _all_specs(pl):
    from distlab.placement import workflow as wf

    return {f: wf.run_spec(pl, f.split("/")[-3], f.split("/")[-2], f.split("/")[-1][:-5])
            for f in wf.runs(pl, "r")}


@pytest.mark.parametrize("learner, key, value", [("hsdag", "lr", 0.002), ("hsdag_corrected", "samples", 5),
                                                 ("rnn", "hidden", 32), ("placeto", "lr", 0.01)])
def test_a_learner_setting_changes_only_its_runs_specs(learner, key, value):
    """Each run's spec carries only its own learner's options, so a learner's setting changes
    the specs (Snakemake params, hence the reruns) of that learner's runs and its control's
    (and, for the ablated variant, its ablations) and nothing else."""
    pl = _config()["placement"]
    before = _all_specs(pl)
    after = _all_specs(dict(pl, **{learner: dict(pl[learner], **{key: value})}))
    changed = {f.split("/")[-1][:-5] for f in before if before[f] != after[f]}
    want = {learner, learner + "_const"}
    if learner == pl["ablation_of"]:
        want |= {f"{learner}_{a}" for a in pl["ablations"]}
    assert changed == want


@pytest.mark.slow
def test_dry_run_shows_a_learner_settings_rerun_scope(tiny_workflow):
    """After a full tiny run, changing placement.hsdag.lr reruns hsdag and hsdag_const on every
    pair and model, and what is computed from them, and no other run."""
    import re

    from conftest import tiny_variant

    work, r = tiny_workflow
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    cfg = tiny_variant(work, "hsdag_lr", lambda d: d["placement"]["hsdag"].update(lr=0.002))
    dry = _smk("-n", "placement", "--configfile", cfg, cwd=work)
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    outs = set(re.findall(r"output: results/placement/runs/(\S+?)\.json", dry.stdout))
    tiny = yaml.safe_load((work / cfg).read_text())["placement"]
    want = {f"{pair}/{model}/{m}" for pair in tiny["run_pairs"] for model in tiny["run_models"]
            for m in ("hsdag", "hsdag_const")}
    assert outs == want, sorted(outs)
    assert "rule placement_summarize" in dry.stdout and "rule placement_graph:" not in dry.stdout


@pytest.mark.slow
def test_tiny_placement_end_to_end(tiny_workflow):
    work, r = tiny_workflow  # the whole workflow on the tiny config, run once per session
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    paper = work / "paper"
    for f in ["tables/placement_main.md", "tables/placement_ablation.md", "tables/placement_graphs.md",
              "tables/placement_learning.md",
              "tables/placement_convergence.md", "tables/placement_sim_error.md",
              "figures/placement_curves.png", "figures/placement_learned.png", "scorecard/P2.md"]:
        assert (paper / f).exists() and (paper / f).stat().st_size > 0, f
    s = pd.read_csv(work / "results/placement/summary.csv")
    tiny = yaml.safe_load((ROOT / "tests/configs/tiny.yaml").read_text())["placement"]
    from distlab.placement import workflow as wf

    # every serial pair (the config's default timing, which tiny.yaml inherits) runs the exact optimum
    want = set(wf.all_methods(tiny)) | set(wf.ablation_methods(tiny)) | {"optimum"}
    assert set(s.method) == want and set(s.clock) == {"simulated"}
    assert set(s.scenario) == {"serial"}
    opt = s[s.method == "optimum"]
    assert (s.merge(opt[["pair", "model", "latency_ms"]], on=["pair", "model"], suffixes=("", "_opt"))
            .eval("latency_ms >= latency_ms_opt * (1 - 1e-9)").all())  # nothing beats the exact optimum
    assert {m + "_const" for m in tiny["controls"]} <= set(s.method)
    assert (s.groupby(["pair", "model", "method"]).seed.nunique() == len(tiny["seeds"])).all()
    cpu = s[s.method == "cpu_only"]
    assert np.allclose(cpu.speedup_pct, 0.0)
    # a searched method's best is never worse than the first placement it tried
    curves = pd.read_csv(work / "results/placement/curves.csv")
    assert (curves.groupby(["pair", "model", "method", "seed"]).best_ms.apply(
        lambda c: bool(np.all(np.diff(c.to_numpy()) <= 0)))).all()
    card = pd.read_csv(paper / "scorecard/P2.csv")
    assert set(card.verdict) <= {"reproduced", "not reproduced", "inconclusive", "not testable here", "not run"}
    real = pd.read_csv(paper / "tables/placement_sim_error.csv")
    assert set(real.placement) == {"cpu_only"} | set(tiny["methods"])   # every method's best placement
    assert (real.measured_ms > 0).all() and (real.simulated_ms > 0).all() and real.measured.all()
