"""The DeMo workflow: dry-runs of the `demo` target on both configurations, the
OLMo bytes arithmetic, and a tiny end-to-end `demo` run in a temporary copy."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pandas as pd
import pytest
import yaml

from conftest import ROOT, bin_path, tiny_variant, workflow_tree

from distlab.config import specs
from distlab.scoring.reported import REPORTED

ENV = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}


def smk(*args, cwd=None, timeout=600):
    return subprocess.run(["snakemake", *args], cwd=cwd or workflow_tree(), env=ENV, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/paper.yaml"])
def test_demo_target_resolves(configfile, target_dry_runs):
    r = target_dry_runs[("demo", configfile)]  # snakemake demo -n --forceall --quiet rules
    assert r.returncode == 0, r.stdout + r.stderr
    for rule in ("demo_train_sim", "demo_train_real", "demo_summarize", "demo_fig_loss_time",
                 "demo_bytes_table", "scorecard_paper"):
        assert rule in r.stdout


def test_bytes_table_arithmetic_at_olmo_scale(tmp_path):
    from distlab.demo.analysis import bytes_table

    df = bytes_table(tmp_path / "b.csv", tmp_path / "b.md", ROOT / "config/claims.yaml",
                     "demo.bytes.olmo1b_k32")
    one_b = df[df["model"] == "olmo-1b"].set_index(["method", "encoding", "k"], drop=False)
    params = 1_176_764_416  # OLMo-1B; every matrix dimension is a multiple of 64
    assert (df.loc[df["model"] == "olmo-1b", "params"] == params).all()
    tiles = params // 4096
    ref = one_b[(one_b["method"] == "DeMo") & (one_b["encoding"].str.startswith("int64"))]
    assert dict(zip(ref["k"], ref["bytes"])) == {32: tiles * 32 * 12, 1: tiles * 12}
    compact = one_b[(one_b["method"] == "DeMo") & (one_b["encoding"].str.startswith("12-bit"))]
    assert dict(zip(compact["k"], compact["bytes"])) == {32: tiles * 32 * 3 // 2 + tiles * 32 * 2,
                                                          1: 3 * ((tiles + 1) // 2) + tiles * 2}
    assert int(one_b[one_b["encoding"] == "fp32 gradients"]["bytes"].iloc[0]) == 4 * params
    text = (tmp_path / "b.md").read_text()
    assert "Accounting rule" in text and "demo.bytes.olmo1b_k32" in text and "2416.6" in text
    # like with like: the paper's DDP figure is ~2 bytes a parameter (bf16)
    k32 = ref[ref["k"] == 32].iloc[0]
    assert k32["reduction_vs_bf16_ddp"] == pytest.approx(2 * params / (tiles * 32 * 12))
    assert k32["reduction_vs_fp32_ddp"] == pytest.approx(2 * k32["reduction_vs_bf16_ddp"])


@pytest.mark.slow
def test_tiny_demo_end_to_end(tiny_workflow):
    work, r = tiny_workflow  # the whole workflow on the tiny config, run once per session
    cfg = ["--configfile", "tests/configs/tiny.yaml"]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    paper = work / "paper"
    for f in ["figures/demo_loss_steps.png", "figures/demo_loss_bytes.png", "figures/demo_loss_time.png",
              "figures/demo_real.png", "tables/demo_results.md", "tables/demo_real.md",
              "tables/demo_bytes.md", "scorecard/P4.md", "scorecard/P4.csv"]:
        assert (paper / f).stat().st_size > 0, f
    assert (paper / "figures/demo_loss_time.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    card = pd.read_csv(paper / "scorecard/P4.csv").set_index("id")
    tiny = yaml.safe_load((work / "tests/configs/tiny.yaml").read_text())["demo"]
    assert card.loc["demo.bytes.sim_vs_bf16_n2", "n_seeds"] == 2
    assert card.loc["demo.bytes.olmo1b_k32", "verdict"] == "by construction"
    # the ablation at N = 2 is reported beside a test (distlab.scoring.reported), not graded
    assert set(card["verdict"]) <= {"reproduced", "not reproduced", "inconclusive", "not run",
                                    "not testable here", "by construction", REPORTED}
    assert card.loc["demo.ablation.per_index_mean_n2", "verdict"] == REPORTED
    sim = pd.read_csv(work / "results/demo/simulated/summary.csv")
    assert set(sim["method"]) == set(tiny["methods"]) and set(sim["clock"]) == {"simulated"}
    assert (sim.loc[sim["method"] == "adamw", "bytes_reduction"] == 1).all()
    real = pd.read_csv(work / "results/demo/gloo/summary.csv")
    assert set(real["clock"]) == {"measured"} and (real["params_max_abs_diff_across_ranks"] == 0).all()
    # every real run has its simulated twin: the same method, N, seed, steps and lr, on the simulated
    # clock, so the real-vs-simulated table has a prediction in every row
    twin = pd.read_csv(work / "results/demo/simulated_real/summary.csv")
    key = ["method", "n_workers", "seed", "steps", "lr"]
    assert set(twin["clock"]) == {"simulated"}
    assert sorted(map(tuple, twin[key].values.tolist())) == sorted(map(tuple, real[key].values.tolist()))
    assert "n/a" not in (paper / "tables/demo_real.md").read_text()
    steps = pd.read_csv(work / "results/demo/simulated/steps.csv")
    assert {"time_wan", "time_datacenter", "cum_bytes"} <= set(steps.columns)
    assert any((work / "benchmarks/demo").rglob("*.tsv")) and any((work / "logs/demo").rglob("*.log"))

    # the learning rates come from the sweep, chosen on the validation split, compared on the test split
    chosen = json.loads((work / "results/demo/sweep/chosen_lr.json").read_text())
    sweep = pd.read_csv(work / "results/demo/sweep/summary.csv")
    for m in tiny["sweep"]["methods"]:
        s = sweep[sweep["method"] == m].groupby("lr")["final_val_loss"].mean()
        assert chosen[m] == float(s.idxmin())
    for follower, leader in tiny["lr_follows"].items():
        assert chosen[follower] == chosen[leader]
    for _, row in sim.iterrows():
        assert row["lr"] == chosen[row["method"]]
    # the comparison's sweep seeds at the chosen lr are the sweep's runs, taken and not retrained
    for m in tiny["sweep"]["methods"]:
        for s in tiny["sweep"]["seeds"]:
            run = work / f"results/demo/simulated/n2/{m}/seed{s}"
            man = json.loads((run / "manifest.json").read_text())
            assert man["reused_from"] == f"results/demo/sweep/lr{chosen[m]:g}/{m}/seed{s}"
            assert (run / "metrics.csv").read_bytes() == (work / man["reused_from"] / "metrics.csv").read_bytes()
    assert {"final_test_loss", "gap_test", "gap_shrink_late", "steps"} <= set(sim.columns)
    assert set(zip(sim["n_workers"], sim["method"])) >= {(4, "adamw"), (4, "demo"), (4, "demo-allmean")}
    assert (paper / "figures/demo_gap_steps.png").stat().st_size > 0

    # nothing left to do; a new sweep point runs that point's jobs (one per method, every seed)
    r = smk("demo", "-n", *cfg, cwd=work)
    assert "Nothing to be done" in r.stdout + r.stderr
    variant = tiny_variant(work, "demo_lr", lambda c: c["demo"]["sweep"]["lrs"].append(0.002))
    r = smk("demo", "-n", "--quiet", "rules", "--configfile", variant, cwd=work)
    assert r.returncode == 0, r.stderr
    counts = {line.split()[0]: int(line.split()[1]) for line in r.stdout.splitlines()
              if len(line.split()) == 2 and line.split()[1].isdigit()}
    assert counts.get("demo_train_sweep") == len(tiny["sweep"]["methods"])


def _sim_specs(stdout: str) -> dict[str, dict]:
    """The spec of every simulated DeMo job in a dry run's printed shell commands, by its --out."""
    out = {}
    for line in stdout.splitlines():
        m = re.search(r"--experiment demo --spec '(\{.*?\})' .*--out (results/demo/simulated/\S+)", line)
        if m:
            spec = json.loads(m.group(1))
            out[f"{m.group(2)}:{','.join(map(str, spec.get('seeds', [])))}"] = spec
    return out


def test_extra_seeds_for_a_demo_claim_run_in_jobs_of_their_own(tmp_path):
    """stats.extra_seeds on a DeMo claim adds runs to the settings it compares (the ablation's
    plain mean at N = 2; the default requests no extra DeMo seeds: its planned n is fixed before the
    run), each in a job of its own: no configured job's spec changes (Snakemake reruns nothing that
    ran), and an extra seed's spec is the multi-seed job's for that seed."""
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    assert not any(k.startswith("demo.") for k in cfg["stats"]["extra_seeds"])
    cfg["stats"]["extra_seeds"] = {**cfg["stats"]["extra_seeds"], "demo.ablation.per_index_mean_n2": 2}
    variant = tmp_path / "extra.yaml"
    variant.write_text(yaml.safe_dump(cfg))
    runs = {}
    for name, extra in (("base", []), ("extra", ["--configfile", str(variant)])):
        r = smk("demo", "-n", "--forceall", "-p", *extra)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        runs[name] = _sim_specs(r.stdout)
    base, more = runs["base"], runs["extra"]
    seeds = cfg["seeds"]
    new = {k: v for k, v in more.items() if k not in base}
    first = max(seeds) + 1
    # both settings the ablation compares get the two seeds (DeMo no longer has extra ones of its own)
    assert sorted(new) == sorted(f"results/demo/simulated/n2/{m}:{k}" for m in ("demo", "demo-allmean")
                                 for k in (first, first + 1))
    assert all(more[k] == v for k, v in base.items())  # no configured job's spec changes
    multi = specs.each_seed({**base[f"results/demo/simulated/n2/demo-allmean:{','.join(map(str, seeds))}"],
                             "seeds": [*seeds, first]})
    assert specs.each_seed(new[f"results/demo/simulated/n2/demo-allmean:{first}"]) == [multi[-1]]


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/paper.yaml"])
def test_every_real_setting_has_a_simulated_twin_of_the_same_runs(configfile):
    """demo_real's prediction is the real runs' own twin: the spec of each real setting, with the
    simulated backend and every real seed, and nothing else changed."""
    from types import SimpleNamespace

    from distlab.demo.workflow import DemoWorkflow

    cfg = yaml.safe_load((ROOT / configfile).read_text())
    if not cfg["demo"]["real"]["enabled"]:
        pytest.skip("no real runs in this config")
    wf = DemoWorkflow(cfg)
    for n, m in wf.twin_settings():
        w = SimpleNamespace(nw=str(n), dmethod=m)
        twin = json.loads(wf.twin_spec(w))
        assert twin["backend"] == "simulated" and twin["seeds"] == cfg["demo"]["real"]["seeds"]
        for seed in cfg["demo"]["real"]["seeds"]:
            real = json.loads(wf.real_spec(SimpleNamespace(nw=str(n), dmethod=m, seed=str(seed))))
            assert real["backend"] != "simulated"
            same = {k: v for k, v in real.items() if k not in ("backend", "seed")}
            # the twin's simulated cluster is what it adds (a real run has none: it is timed)
            assert "cluster" not in real and "cluster" in twin
            assert same == {k: v for k, v in twin.items() if k not in ("backend", "seeds", "cluster")}
    assert {f"n{n}/{m}" for n, m in wf.twin_settings()} == \
        {p.split("/simulated_real/")[1].rsplit("/seed", 1)[0] for p in wf.runs("simulated_real")}


def test_the_sweep_marks_a_choice_at_its_grids_edge(tmp_path):
    """The lowest mean per method is its choice; a choice at the lowest or highest swept lr is
    marked not bracketed (a better lr may lie beyond the grid), one inside it is not."""
    from distlab.demo.analysis import sweep_table

    rows = [{"method": m, "lr": lr, "seed": s, "steps": 10, "final_val_loss": loss + 0.01 * s}
            for m, losses in (("adamw", {1e-3: 1.0, 3e-3: 1.1, 1e-2: 1.3}), ("demo", {1e-3: 1.2, 3e-3: 1.0, 1e-2: 1.1}))
            for lr, loss in losses.items() for s in (100, 101)]
    pd.DataFrame(rows).to_csv(tmp_path / "summary.csv", index=False)
    df = sweep_table(tmp_path / "summary.csv", tmp_path / "sweep.md", tmp_path / "chosen.json", {"demo-compact": "demo"})
    assert json.loads((tmp_path / "chosen.json").read_text()) == {"adamw": 1e-3, "demo": 3e-3, "demo-compact": 3e-3}
    assert sorted(df.loc[df["edge"] != "", "edge"]) == ["lower"]
    assert "Not bracketed" in (tmp_path / "sweep.md").read_text() and "'adamw': 'lower'" in (tmp_path / "sweep.md").read_text()


def test_the_sweep_seeds_are_disjoint_from_the_comparisons():
    """With the lr chosen by the sweep, a sweep seed that is also a comparison seed (seeds or
    demo.real.seeds) is refused, naming the seeds; the tiny config opts out (share_seeds) to
    exercise the reuse of the sweep's runs."""
    from distlab.demo.spec import check

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert check(cfg) == []
    assert not set(cfg["demo"]["sweep"]["seeds"]) & (set(cfg["seeds"]) | set(cfg["demo"]["real"]["seeds"]))
    bad = {**cfg, "demo": {**cfg["demo"], "sweep": {**cfg["demo"]["sweep"], "seeds": [1, 100]}}}
    assert [p for p in check(bad) if p.startswith("demo.sweep.seeds: [1]")]
    shared = {**bad, "demo": {**bad["demo"], "sweep": {**bad["demo"]["sweep"], "share_seeds": True}}}
    assert check(shared) == []


def test_sweep_grids_extend_below_the_edge_the_choices_sat_on():
    """A choice at the grid's edge is widened: AdamW, DiLoCo and PowerSGD chose 1e-3, the shared grid's lowest lr; their
    own grids go one half-decade step further down (sweep.lrs_extra), so each choice can be
    bracketed.  DeMo keeps the shared grid; a method the sweep does not run cannot get extra lrs."""
    from distlab.demo.spec import check
    from distlab.demo.workflow import DemoWorkflow

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    sw = cfg["demo"]["sweep"]
    wf = DemoWorkflow(cfg)
    extended = ("adamw", "diloco", "powersgd")
    for m in extended:
        assert sorted(wf.sweep_lrs(m)) == [3e-4, 1e-3, 3e-3, 1e-2]
        assert min(wf.sweep_lrs(m)) < min(sw["lrs"])  # past the edge its choice sat on
    assert wf.sweep_lrs("demo") == [1e-3, 3e-3, 1e-2]
    runs = wf.runs("sweep")
    assert len(runs) == (len(sw["lrs"]) * len(sw["methods"]) + len(extended)) * len(sw["seeds"])
    assert {f"results/demo/sweep/lr0.0003/{m}/seed{s}/manifest.json" for s in sw["seeds"] for m in extended} <= set(runs)
    assert not any("lr0.0003/demo/" in r for r in runs)
    bad = {**cfg, "demo": {**cfg["demo"], "sweep": {**sw, "lrs_extra": {"demo-compact": [3e-4]}}}}
    assert [p for p in check(bad) if p.startswith("demo.sweep.lrs_extra.demo-compact:")]
