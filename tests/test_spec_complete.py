"""The spec is the whole truth: changing one setting reruns exactly the jobs whose results it changes.

How it is checked (by Snakemake itself, as a user would meet it): a fresh copy of the repository
gets every output of the default workflow as a placeholder, and ``snakemake --touch --forceall``
records each job's provenance (its params, the run spec among them, and its inputs) as if it had
run.  Then, for each group of settings below, a config overlay changes them and ``snakemake -n``
plans what a real run would redo.  A job planned for a reason of its own (params changed, a new
job, a changed set of inputs) is *directly* changed; a job planned only because an input is
rewritten upstream ("Input files updated by another job") is downstream and may be planned.
The test compares the directly changed jobs with the jobs each group is declared to change
(``GROUPS``, rule and, where it matters, a wildcard), so a setting a job's results depend on but
its spec lacks (nothing planned) fails, and so does a setting that reruns jobs it does not change
(the DeMo spec once held every method's options: changing DiLoCo's H reran AdamW).  Params
rather than file contents are the trigger: a dry run cannot know whether a rewritten file's
content changes, so what a sweep choice feeds is downstream of the choice, as it is in a run.

Keys that change no job's results are listed in ``NO_JOB`` with the reason.  One group changes
several keys at once (one dry run each; the keys of a group change the same jobs).  Not yet
every leaf key: the groups cover DeMo's (P4) method options, networks, real runs and run
settings and sweep grid, local learning's (P3) PC, asynchronous RC, evaluation, benchmark,
sweep-grid and non-identifiability settings, and a few keys each of the baseline, P1 (pgc:
training, regime map, cloud target, real runs) and P2 (placement: one method's settings, a
pair's link, the profile).  ``OVERTRIGGERED`` lists the reruns a group declares that its
setting does not need (benchmarks whose spec carries settings they do not read).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import ROOT, bin_path, fake_results, snakemake_runs, tracked_copy  # noqa: E402

TRAIN_DEMO = ("demo_train_sim", "demo_train_sweep", "demo_train_real", "demo_train_twin")

# name -> ({dotted key: new value}, {rule: wildcard filter or None}); a filter "k=v" says every
# directly changed job of that rule has that wildcard value
GROUPS = {
    "demo_diloco": ({"demo.diloco.H": 20, "demo.diloco.outer_lr": 0.5, "demo.diloco.outer_momentum": 0.8},
                    {"demo_train_sim": "dmethod=diloco", "demo_train_sweep": "dmethod=diloco"}),
    "demo_powersgd": ({"demo.powersgd.rank": 2},
                      {"demo_train_sim": "dmethod=powersgd", "demo_train_sweep": "dmethod=powersgd"}),
    "demo_adamw": ({"demo.adamw.eps": 1.0e-7, "demo.adamw.weight_decay": 0.01, "demo.adamw.betas": [0.9, 0.99]},
                   {r: None for r in TRAIN_DEMO}),
    "demo_optimizer": ({"demo.demo.topk": 16, "demo.demo.decay": 0.99, "demo.demo.weight_decay": 0.01,
                        "demo.demo.chunk": 32, "demo.demo.value_dtype": "float16"},
                       {**{r: None for r in TRAIN_DEMO}, "demo_bytes_table": None}),
    "demo_networks": ({"demo.networks.wan.latency_s": 0.03, "demo.networks.wan.bandwidth_Bps": 2.5e8,
                       "demo.networks.datacenter.latency_s": 2.0e-5, "demo.networks.datacenter.label": "dc",
                       "demo.networks.wan.label": "wan", "demo.networks.datacenter.bandwidth_Bps": 2.5e10},
                      {"demo_summarize": None, "demo_fig_loss_time": None, "demo_table_results": None}),
    "demo_real": ({"demo.real.steps": 20, "demo.real.seeds": [0, 2]},
                  {"demo_train_real": None, "demo_train_twin": None, "demo_summarize": None}),
    "demo_run": ({"demo.eval_batches": 8, "demo.eval_every": 40, "demo.batch_size": 4, "demo.dtype": "float64",
                  "demo.compute.scale": 2.0, "demo.compute.unit_seconds": 0.1},
                 {r: None for r in TRAIN_DEMO}),
    "local_pc": ({"local_learning.pc.T": 3, "local_learning.pc.variants.fixed.eta": 0.9,
                  "local_learning.pc.variants.fixed.beta": 0.9},
                 {"local_train_seeds": "lrun=pc/pc-fixed-trunc", "local_train_sweep": "lrun=pc/pc-fixed-trunc",
                  "local_bench_pc_cost": None}),
    "local_bench": ({"local_learning.bench.repeats": 2, "local_learning.bench.warmup": 2,
                     "local_learning.bench.measure": 5, "local_learning.bench.batch_size": 4},
                    {"local_bench_throughput": None}),
    "local_nonident": ({"local_learning.nonident.scales": [0.5, 3.0]}, {"local_nonident": None}),
    "local_async": ({"local_learning.rc.staleness_bound": 3},
                    {"local_train": "lmethod=rc-async", "local_bench_throughput": None}),
    # the sweep's runs and the benchmarks (see OVERTRIGGERED); the comparison runs are downstream
    # of the sweep's choice
    "local_eval": ({"local_learning.eval.final_batches": 8},
                   {"local_train_sweep": None, "local_bench_throughput": None, "local_bench_pc_cost": None}),
    "local_lr": ({"local_learning.lr": 0.02},
                 {"local_bench_throughput": None, "local_bench_pc_cost": None, "local_nonident": None}),
    "local_sweep_lrs": ({"local_learning.sweep.lrs.pc/bp": [2.5e-3, 5.0e-3, 2.0e-2]},
                        {"local_train_sweep": "lrun=pc/bp", "local_table_sweep": None}),
    "demo_sweep_lrs": ({"demo.sweep.lrs": [0.001, 0.003, 0.03]},
                       {"demo_train_sweep": "lr=0.03", "demo_summarize": "dgroup=sweep"}),
    "baseline": ({"baseline.lr": 0.05}, {"baseline_train_sim": None, "baseline_train_dist": None}),
    "baseline_straggler": ({"baseline.straggler.mean": 0.2},
                           {"baseline_train_sim": None, "baseline_train_dist": None}),
    "pgc_train": ({"pgc.lr": 0.05, "pgc.eval_every": 5},
                  {"pgc_train_sim": None, "pgc_train_sim_extra": None, "pgc_train_real": None}),
    "pgc_regime": ({"pgc.regime.points": 12, "pgc.regime.steps": 100}, {"pgc_regime": None}),
    # the cloud runs stop at the target; the figures draw it
    "pgc_cloud_threshold": ({"pgc.cloud.threshold.loss": 0.3, "pgc.cloud.threshold.window": 5},
                            {"pgc_train_sim": "group=cloud", "pgc_train_sim_extra": "group=cloud", "pgc_fig3": None,
                             "pgc_fig7": None, "pgc_fig8": None, "pgc_real_vs_sim": None}),
    # the real runs, their simulated twins; the regime map reads the twins' unit cost (its input)
    "pgc_real": ({"pgc.real.steps": 30, "pgc.real.straggler.mean": 0.1},
                 {"pgc_train_real": None, "pgc_train_sim_real": None, "pgc_summarize": "group=real",
                  "pgc_regime": None}),
    # the corrected HSDAG, its constant-cost twin and its ablations (ablation_of)
    "placement_corrected": ({"placement.hsdag_corrected.explore": 0.1}, {"placement_run": None}),
    "placement_rnn": ({"placement.rnn.hidden": 32}, {"placement_run": "pl_method=rnn|rnn_const"}),
    "placement_link": ({"placement.pairs.cpu_dcgpu.link.gbps": 50}, {"placement_run": "pair=cpu_dcgpu"}),
    "placement_profile": ({"placement.profile.repeats": 11}, {"placement_profile": None}),
}

# rules a group declares though the setting does not change their results: the spec carries it
# anyway (a rerun too many, never a missed one), with the reason; fixing one removes it here
OVERTRIGGERED = {
    ("local_eval", "local_bench_throughput"): "the benchmark's specs are the runs' (eval settings included); "
                                              "tokens/s does not depend on them",
    ("local_eval", "local_bench_pc_cost"): "as above",
    ("local_lr", "local_bench_throughput"): "the benchmark's specs carry local_learning.lr; tokens/s does not "
                                            "depend on it",
    ("local_lr", "local_nonident"): "its spec is BP's (lr included); the demonstration loads the trained model "
                                    "and steps at lr 0",
}

# keys that change no job's results (pure presentation or bookkeeping), with the reason
NO_JOB = {
    "demo.bench.repeats": "demo_bench is outside the default workflow (snakemake demo_bench)",
}

def leaves(d, prefix=()):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from leaves(v, prefix + (k,))
    else:
        yield ".".join(prefix)


def overlay(changes: dict) -> dict:
    out: dict = {}
    for key, value in changes.items():
        node = out
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def planned_jobs(text: str) -> list[tuple[str, str, bool]]:
    """(rule, wildcards, direct) of each job a dry run plans; ``direct``: for a reason of its own
    (not only "Input files updated by another job")."""
    jobs, cur = [], None
    for line in text.splitlines():
        m = re.match(r"(?:local)?rule (\w+):$", line)
        if m:
            cur = {"rule": m.group(1), "wildcards": "", "reason": ""}
            jobs.append(cur)
        elif cur is not None and line.strip().startswith("wildcards:"):
            cur["wildcards"] = line.strip()[len("wildcards:"):].strip()
        elif cur is not None and line.strip().startswith("reason:"):
            cur["reason"] = line.strip()[len("reason:"):].strip()
    out = []
    for j in jobs:
        reasons = [r.strip() for r in j["reason"].split(";") if r.strip()]
        out.append((j["rule"], j["wildcards"],
                    any(not r.startswith("Input files updated by another job") for r in reasons)))
    return out


def _matches(wildcards: str, want: str | None) -> bool:
    """``want``: None (any job), or "key=v1|v2" (the job's wildcard key is one of the values)."""
    if want is None:
        return True
    key, values = want.split("=", 1)
    return any(w.strip() in [f"{key}={v}" for v in values.split("|")] for w in wildcards.split(","))


@pytest.fixture(scope="module")
def touched_tree(tmp_path_factory) -> Path:
    """A fresh copy with every default output present and every job's provenance recorded."""
    work = tracked_copy(tmp_path_factory.mktemp("spec_complete") / "repo")
    fake_results(work)
    env = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}
    subprocess.run(["snakemake", "--touch", "--forceall", "--cores", "1"], cwd=work, env=env,
                   capture_output=True, text=True, timeout=900, check=True)
    return work


@pytest.fixture(scope="module")
def planned(touched_tree) -> dict:
    names = ["none", *GROUPS]
    args = []
    for name in names:
        path = touched_tree / f"overlay_{name}.yaml"
        path.write_text(yaml.safe_dump(overlay(GROUPS[name][0]) if name != "none" else {}))
        args.append(["-n", "--configfile", "config/config.yaml", str(path)])
    runs = snakemake_runs(args, cwd=touched_tree, timeout=1800)
    return {n: r for n, r in zip(names, runs)}


@pytest.mark.slow
def test_an_unchanged_config_plans_nothing(planned):
    r = planned["none"]
    assert r.returncode == 0, r.stderr[-2000:]
    assert planned_jobs(r.stdout) == [], r.stdout[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(GROUPS))
def test_a_setting_reruns_exactly_the_jobs_it_changes(planned, name):
    """Every directly changed job is one the group declares (no job the setting does not change
    reruns for it), and every declared rule has a planned job (directly, or downstream of
    another: Snakemake names only the first reason of a job whose input is rewritten)."""
    r = planned[name]
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    jobs = planned_jobs(r.stdout)
    expected = GROUPS[name][1]
    stray = sorted({(rule, w) for rule, w, direct in jobs
                    if direct and not (rule in expected and _matches(w, expected[rule]))})
    assert not stray, f"{name}: jobs rerun though the setting does not change them: {stray[:5]}"
    unplanned = sorted(rule for rule, want in expected.items()
                       if not any(j[0] == rule and _matches(j[1], want) for j in jobs))
    assert not unplanned, f"{name}: the setting changes these rules' jobs, none is planned: {unplanned}"


def test_every_overtriggered_rule_is_declared_by_its_group():
    """A listed over-trigger names a group and one of its declared rules (the list stays in step
    with GROUPS as either changes)."""
    for (group, rule), why in OVERTRIGGERED.items():
        assert group in GROUPS and rule in GROUPS[group][1] and why, (group, rule)
