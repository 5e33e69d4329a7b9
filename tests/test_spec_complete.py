"""The spec is the whole truth: changing one setting reruns exactly the jobs whose results it changes.

How it is checked (by Snakemake itself, as a user would meet it): a fresh copy of the repository
gets every output of the default workflow as a placeholder, and ``snakemake --touch --forceall``
records each job's provenance (its params, the run spec among them, and its inputs) as if it had
run.  Then, for each batch of groups of settings below, a config overlay changes them and ``snakemake -n``
plans what a real run would redo.  A job planned for a reason of its own (params changed, a new
job, a changed set of inputs) is *directly* changed; a job planned only because an input is
rewritten upstream ("Input files updated by another job") is downstream and may be planned.
The test compares the directly changed jobs with the jobs each group is declared to change
(``GROUPS``, rule and, where it matters, a wildcard), so a setting a job's results depend on but
its spec lacks (nothing planned) fails, and so does a setting that reruns jobs it does not change
(the DeMo spec once held every method's options: changing DiLoCo's H reran AdamW).  Params
rather than file contents are the trigger: a dry run cannot know whether a rewritten file's
content changes, so what a sweep choice feeds is downstream of the choice, as it is in a run.

Many groups share one dry run (``BATCHES``): an overlay changes all their keys at once, and each
directly changed job is attributed to the one group of the batch that declares it.  That is
sound because within a batch no two groups claim one job (different rules, or one rule's
filters naming disjoint values of one wildcard: test_batches_attribute_each_job_to_one_group),
and no group's declared rule lies downstream of another group's change (batches are packed by hand
to keep that: two groups of one paper share a batch only where neither's rules feed the other's,
and a breach shows as a declared rule that is not planned).  So every
directly changed job of a batch must be declared by one of its groups, and every rule a group
declares must be planned.  Keys within one group change jobs of the same rules.  Keys that change no
job's results are listed in ``NO_JOB`` with the reason, and all change at once in a dry run of
their own (any job they rerun fails it).  ``OVERTRIGGERED`` would list the reruns a group
declares that its setting does not need (a spec carrying a setting its job does not read); it is
empty.  The last eight went when the specs dropped what their jobs do not read: the benchmarks'
specs the runs' length, evaluation and optimizer values (distlab.local.workflow.timing_spec), the
non-identifiability demonstration's spec all but the model's shape and data, the simulated PGC
jobs' spec the coding profile's measuring rounds, a placement pair's runs' specs its method list
and every scorecard's spec ``stats.extra_seeds`` (before them, a pair's description and
``distlab atlas bench``'s settings).

Coverage (test_every_leaf_key_is_covered_once walks every leaf key of config/config.yaml, a list
being a leaf, and prints these counts): 429 leaf keys: 350 changed by groups, 62 in NO_JOB, 17 in
NOT_COVERED (each with why: no other value the workflow accepts, or the path of an input file,
which only a run's recorded input sets can show), in 24 dry runs beside the unchanged config's.
Keys that add or remove jobs (seeds, methods, schemes, workers, which pairs and models run) are
groups too: their new jobs (missing outputs) and the summaries whose input set changes must be
declared, and no existing run may rerun for them.
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
from conftest import ROOT, bin_path, snakemake_runs  # noqa: E402

from distlab.atlas.spec import TECHNIQUES, arrival_dependent, kind  # noqa: E402

TRAIN_DEMO = ("demo_train_sim", "demo_train_sweep", "demo_train_real", "demo_train_twin")

CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
_ATLAS = CONFIG["atlas"]


def _atlas_jobs(techniques=(), ref=False) -> str:
    """A wildcard filter for atlas_job: the named techniques' jobs (and the reference's)."""
    return "job=" + "|".join([f"techniques/{t}" for t in techniques] + (["reference"] if ref else []))


_AT_ALL = [t for t in _ATLAS["techniques"] if t in TECHNIQUES]
_AT_MASTER = [t for t in _AT_ALL if kind(t) == "master"]
_AT_ARRIVAL = [t for t in _AT_ALL if arrival_dependent(t)]
_AT_HEADLINE = list(_ATLAS["headline"]["techniques"])
_AT_TREND = list(_ATLAS["trend"]["techniques"])
_LARGE = _ATLAS["sizes"]["large"]
_XL = _ATLAS["trend"]["sizes"]["xl"]
def _devices(pair: str, **second) -> list:
    """A pair's devices with its second device's settings changed."""
    devs = [dict(d) for d in CONFIG["placement"]["pairs"][pair]["devices"]]
    devs[1].update(second)
    return devs


# a new value of each option the HSDAG learners share
_LEARNER = {"samples": 8, "lr": 0.002, "discount": 0.9, "hidden": 64, "gcn_layers": 3, "max_levels": 2,
            "pooling": False, "state_update": False}

# name -> ({dotted key: new value}, {rule: wildcard filter or None}); a filter "k=v1|v2" says every
# directly changed job of that rule has one of those wildcard values
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
                     "local_learning.bench.measure": 5, "local_learning.bench.batch_size": 4,
                     "local_learning.bench.model.d_model": 256, "local_learning.bench.model.n_head": 8,
                     "local_learning.bench.model.block_size": 64, "local_learning.bench.model.n_layer": 16},
                    {"local_bench_throughput": None}),
    "local_nonident": ({"local_learning.nonident.scales": [0.5, 3.0]}, {"local_nonident": None}),
    "local_async": ({"local_learning.rc.staleness_bound": 3},
                    {"local_train": "lmethod=rc-async", "local_bench_throughput": None}),
    # how the sections run concurrently: the parallel and asynchronous runs, the benchmark
    "local_concurrency": ({"local_learning.rc.worker_threads": 2, "local_learning.rc.concurrency": "thread"},
                          {"local_train": "lmethod=rc-async|rc-par", "local_bench_throughput": None}),
    # the sweep's runs (the comparison runs are downstream of the sweep's choice); no benchmark
    # (their specs leave the runs' length, evaluation and optimizer values out: timing_spec)
    "local_eval": ({"local_learning.eval.final_batches": 8, "local_learning.eval.batches": 3,
                    "local_learning.eval.batch_size": 16, "local_learning.eval_every": 25,
                    "local_learning.betas": [0.9, 0.99], "local_learning.weight_decay": 0.01,
                    "local_learning.steps": 400, "local_learning.warmup_steps": 5,
                    "local_learning.lr_warmup": 20},
                   {"local_train_sweep": None}),
    # the runs' batch: the sweep's runs and PC's cost (measured at the runs' batch; the throughput
    # benchmark has its own, bench.batch_size)
    "local_batch": ({"local_learning.batch_size": 32}, {"local_train_sweep": None, "local_bench_pc_cost": None}),
    "local_sweep_lrs": ({"local_learning.sweep.lrs.pc/bp": [2.5e-3, 5.0e-3, 2.0e-2]},
                        {"local_train_sweep": "lrun=pc/bp", "local_table_sweep": None}),
    "demo_sweep_lrs": ({"demo.sweep.lrs": [0.001, 0.003, 0.03]},
                       {"demo_train_sweep": "lr=0.03", "demo_summarize": "dgroup=sweep"}),
    "baseline": ({"baseline.lr": 0.05, "baseline.steps": 120, "baseline.batch_size": 32, "baseline.eval_every": 5,
                  "baseline.dtype": "float32", "baseline.model.name": "mlp"},
                 {"baseline_train_sim": None, "baseline_train_dist": None}),
    "baseline_straggler": ({"baseline.straggler.mean": 0.2, "baseline.straggler.model": "pareto"},
                           {"baseline_train_sim": None, "baseline_train_dist": None}),
    "pgc_train": ({"pgc.lr": 0.05, "pgc.eval_every": 5, "pgc.code_seed": 1, "pgc.model.name": "logreg"},
                  {"pgc_train_sim": None, "pgc_train_sim_extra": None, "pgc_train_real": None}),
    "pgc_regime": ({"pgc.regime.points": 12, "pgc.regime.steps": 100, "pgc.regime.c_over_mu_min": 0.02,
                    "pgc.regime.c_over_mu_max": 3.0, "pgc.regime.s": [1, 2],
                    "pgc.regime.claim_points": [0.25, 0.5, 1.0],
                    "pgc.regime.resnet18.batch": 16, "pgc.regime.resnet18.dtype": "float32"},
                   {"pgc_regime": None}),
    # the cloud runs stop at the target; the figures draw it
    "pgc_cloud_threshold": ({"pgc.cloud.threshold.loss": 0.3, "pgc.cloud.threshold.window": 5,
                             "pgc.cloud.threshold.repeat": 2},
                            {"pgc_train_sim": "group=cloud", "pgc_train_sim_extra": "group=cloud", "pgc_fig3": None,
                             "pgc_fig7": None, "pgc_fig8": None, "pgc_real_vs_sim": None}),
    # the real runs, their simulated twins; the regime map reads the twins' unit cost (its input)
    "pgc_real": ({"pgc.real.steps": 30, "pgc.real.straggler.mean": 0.1, "pgc.real.straggler.model": "pareto",
                  "pgc.real.n": 6},
                 {"pgc_train_real": None, "pgc_train_sim_real": None, "pgc_summarize": "group=real",
                  "pgc_regime": None}),
    # the corrected HSDAG, its constant-cost twin and its ablations (ablation_of)
    "placement_corrected": ({**{f"placement.hsdag_corrected.{k}": v for k, v in _LEARNER.items()},
                             "placement.hsdag_corrected.explore": 0.1, "placement.hsdag_corrected.advantage": "none",
                             "placement.hsdag_corrected.baseline_decay": 0.8,
                             "placement.hsdag_corrected.final_greedy": False},
                            {"placement_run": None}),
    "placement_hsdag": ({**{f"placement.hsdag.{k}": v for k, v in _LEARNER.items()},
                         "placement.hsdag.advantage": "steady"},
                        {"placement_run": "pl_method=hsdag|hsdag_const"}),
    "placement_fine": ({**{f"placement.hsdag_fine.{k}": v for k, v in _LEARNER.items()},
                        "placement.hsdag_fine.advantage": "none", "placement.hsdag_fine.partition": "coarsen"},
                       {"placement_run": "pl_method=hsdag_fine|hsdag_fine_const"}),
    "placement_rnn": ({"placement.rnn.hidden": 32, "placement.rnn.samples": 10, "placement.rnn.lr": 0.002,
                       "placement.rnn.baseline_decay": 0.8},
                      {"placement_run": "pl_method=rnn|rnn_const"}),
    "placement_placeto": ({"placement.placeto.lr": 0.002, "placement.placeto.hidden": 32,
                           "placement.placeto.discount": 0.9, "placement.placeto.baseline_decay": 0.8},
                          {"placement_run": "pl_method=placeto|placeto_const"}),
    "placement_link": ({"placement.pairs.cpu_dcgpu.link.gbps": 50, "placement.pairs.cpu_dcgpu.link.latency_us": 20,
                        "placement.pairs.cpu_dcgpu.devices": _devices("cpu_dcgpu", peak_gflops=50000)},
                       {"placement_run": "pair=cpu_dcgpu"}),
    # the default pair's link also sets the regime map's
    "placement_igpu": ({"placement.pairs.cpu_igpu.link.gbps": 20, "placement.pairs.cpu_igpu.link.latency_us": 20,
                        "placement.pairs.cpu_igpu.devices": _devices("cpu_igpu", peak_gflops=150)},
                       {"placement_run": "pair=cpu_igpu", "placement_regime": None}),
    "placement_concurrent": ({"placement.pairs.cpu_igpu_concurrent.link.gbps": 20,
                              "placement.pairs.cpu_igpu_concurrent.link.latency_us": 20,
                              "placement.pairs.cpu_igpu_concurrent.sim_order": "serial",
                              "placement.pairs.cpu_igpu_concurrent.devices": _devices("cpu_igpu_concurrent",
                                                                                      peak_gflops=150)},
                             {"placement_run": "pair=cpu_igpu_concurrent"}),
    "placement_h200": ({"placement.pairs.cpu_h200.link.gbps": 50, "placement.pairs.cpu_h200.link.latency_us": 20},
                       {"placement_run": "pair=cpu_h200"}),
    # the learners' and the random search's sample budget
    "placement_budget": ({"placement.budget": 400}, {"placement_run": None}),
    # the pairs that do not set their own order
    "placement_sim_order": ({"placement.sim_order": "rank"},
                            {"placement_run": "pair=cpu_igpu|cpu_dcgpu|cpu_h200"}),
    "placement_profile": ({"placement.profile.repeats": 11, "placement.profile.warmup": 3,
                           "placement.profile.clock": "wall"},
                          {"placement_profile": None}),
    "placement_real": ({"placement.real.repeats": 3, "placement.real.warmup": 2}, {"placement_real": None}),
    # a model's graph and its profile (its runs are downstream)
    "placement_models": ({"placement.models.bert.seq": 64, "placement.models.bert.layers": 6,
                          "placement.models.resnet50.image_size": 192, "placement.models.inception_v3.image_size": 256,
                          **{f"placement.models.{m}.batch": 2 for m in ("bert", "resnet50", "inception_v3")},
                          # another model family under each name: its graph and profile
                          "placement.models.inception_v3.name": "resnet50", "placement.models.resnet50.name": "inception_v3",
                          "placement.models.bert.name": "resnet50"},
                         {"placement_graph": None, "placement_profile": None}),
    # DeMo's model: the sweep's runs directly; the runs at the sweep's choice downstream of it
    "demo_model": ({"demo.model.d_model": 32, "demo.model.n_layer": 3, "demo.model.n_head": 2,
                    "demo.model.block_size": 16, "demo.model.name": "olmo"}, {r: None for r in TRAIN_DEMO}),
    "demo_steps": ({"demo.steps": 800}, {"demo_train_sim": None}),
    # the runs' lr from demo.lr instead of the sweep's choice: every run that took the sweep's lr
    "demo_lr_source": ({"demo.lr_from_sweep": False}, {r: None for r in ("demo_train_sim", "demo_train_real",
                                                                         "demo_train_twin")}),
    "demo_sweep_runs": ({"demo.sweep.seeds": [100, 102], "demo.sweep.steps": 800},
                        {"demo_train_sweep": None, "demo_summarize": "dgroup=sweep"}),
    "local_rc": ({"local_learning.rc.delay": 2},
                 {"local_train_sweep": "lrun=rc/rc-seq", "local_bench_throughput": None}),
    "local_rc_model": ({"local_learning.rc.model.d_model": 64, "local_learning.rc.model.n_layer": 12,
                        "local_learning.rc.model.n_head": 4, "local_learning.rc.model.block_size": 16},
                       {"local_train_sweep": "lrun=rc/bp|rc/rc-seq"}),
    "local_pc_model": ({"local_learning.pc.model.d_model": 64, "local_learning.pc.model.n_layer": 8,
                        "local_learning.pc.model.n_head": 4, "local_learning.pc.model.block_size": 16},
                       {"local_train_sweep": "lrun=pc/bp|pc/pc-fixed-trunc", "local_bench_pc_cost": None}),
    # the PC cost benchmark (the strict variant is run only there)
    "local_pc_bench": ({"local_learning.bench.pc_T": [1, 2, 4], "local_learning.bench.pc_warmup": 1,
                        "local_learning.bench.pc_measure": 4, "local_learning.bench.pc_repeats": 3,
                        "local_learning.pc.variants.strict.eta": 0.4, "local_learning.pc.variants.strict.beta": 0.9},
                       {"local_bench_pc_cost": None}),
    # the timed runs: the benchmark and the timed BP run
    "local_threads": ({"local_learning.threads": 1},
                      {"local_bench_throughput": None, "local_train": "lmethod=bp"}),
    "local_sweep_lrs_rc": ({"local_learning.sweep.lrs.rc/bp": [2.5e-3, 5.0e-3, 2.0e-2],
                            "local_learning.sweep.lrs.rc/rc-seq": [2.5e-3, 5.0e-3, 2.0e-2]},
                           {"local_train_sweep": "lrun=rc/bp|rc/rc-seq", "local_table_sweep": None}),
    "local_sweep_lrs_pc_fixed": ({"local_learning.sweep.lrs.pc/pc-fixed-trunc": [2.5e-3, 5.0e-3, 2.0e-2]},
                                 {"local_train_sweep": "lrun=pc/pc-fixed-trunc", "local_table_sweep": None}),
    # the runs' lr from local_learning.lr instead of the sweep's choice
    "local_lr_source": ({"local_learning.lr_from_sweep": False},
                        {"local_train_seeds": None, "local_train": None, "local_train_bp_untimed": None}),
    "local_sweep_seeds": ({"local_learning.sweep.seeds": [1, 3]},
                          {"local_train_sweep": None, "local_train_seeds": None, "local_train_bp_untimed": None,
                           "local_table_sweep": None}),
    "pgc_simulation": ({"pgc.simulation.steps": 100, "pgc.simulation.batch_size": 48},
                       {"pgc_train_sim": "group=simulation"}),
    # Fig. 3's runs (a batch size n divides: each worker draws batch_size / n samples)
    "pgc_motivating": ({"pgc.motivating.batch_size": 48, "pgc.motivating.epochs": 5,
                        "pgc.motivating.straggler.model": "pareto", "pgc.motivating.straggler.mean": 0.5},
                       {"pgc_train_sim": "group=motivating", "pgc_summarize": "group=motivating"}),
    "pgc_cloud": ({"pgc.cloud.steps": 300, "pgc.cloud.straggler.mean": 0.3, "pgc.cloud.batch_size": 48,
                   "pgc.cloud.straggler.model": "pareto"},
                  {"pgc_train_sim": "group=cloud", "pgc_train_sim_extra": "group=cloud",
                   "pgc_summarize": "group=cloud"}),
    "pgc_real_batch": ({"pgc.real.batch_size": 32}, {"pgc_train_real": None, "pgc_train_sim_real": None}),
    # the simulated cluster's compute and network (the papers whose runs are simulated on it)
    "cluster_compute": ({"cluster.compute.unit_seconds": 0.4, "cluster.compute.scale": 2.0,
                         "cluster.compute.mode": "measured"},
                        {"baseline_train_sim": None, "baseline_train_dist": None, "pgc_train_sim": None,
                         "pgc_train_sim_extra": None, "pgc_regime": None, "pgc_real_vs_sim": None}),
    "cluster_network": ({"cluster.network.latency_s": 0.002, "cluster.network.bandwidth_Bps": 2.5e9},
                        {"baseline_train_sim": None, "baseline_train_dist": None, "pgc_train_sim": None,
                         "pgc_train_sim_extra": None, "pgc_train_real": None, "demo_train_sweep": None}),
    "data_seed": ({"data_seed": 1}, {"prepare_data": None}),
    "data_digits": ({"datasets.digits.val_fraction": 0.15, "datasets.digits.test_fraction": 0.25,
                     "datasets.digits.source": "hf"},
                    {"prepare_data": "dataset=digits"}),
    "data_pydoc": ({"datasets.pydoc.val_fraction": 0.1, "datasets.pydoc.test_fraction": 0.1,
                    "datasets.pydoc.source": "hf"},
                   {"prepare_data": "dataset=pydoc"}),
    # the statistics of the scorecard (and of P3's table)
    "stats_bootstrap": ({"stats.bootstrap.n_resamples": 999, "stats.bootstrap.seed": 1,
                         "stats.bootstrap.confidence": 0.9, "stats.alpha": 0.1},
                        {"scorecard_paper": None, "local_table": None}),
    "stats_seeds_cap": ({"stats.seeds_cap": 40}, {"scorecard_paper": None}),
    # the atlas (per key by its rule functions in tests/test_atlas_spec.py; here through Snakemake)
    # every technique's runs, the reference's and the map's (the large size is the reference's)
    "atlas_all": ({"atlas.batch_size": 16, "atlas.sizes.large.d_model": 48, "atlas.sizes.large.n_layer": 2,
                   "atlas.sizes.large.n_head": 4, "atlas.sizes.large.block_size": 64},
                  {"atlas_job": None, "atlas_map": None}),
    # every technique's runs (its sweep, horizon, evaluation, seeds), not the reference's
    "atlas_runs": ({"atlas.steps": 200, "atlas.eval_batches": 4, "atlas.seeds": [0, 1],
                    "atlas.sweep.lrs": [0.01, 0.1], "atlas.sweep.widen": 0, "atlas.sweep.size": "large",
                    "atlas.sweep.n_workers": 4, "atlas.sweep.seed": 1},
                   {"atlas_job": _atlas_jobs(_AT_ALL)}),
    "atlas_reference": ({"atlas.reference.steps": 300, "atlas.reference.lr": 0.03, "atlas.reference.seeds": [0, 1],
                         "atlas.reference.size": "small", "atlas.reference.n_workers": 4,
                         "atlas.reference.eval_batches": 32},
                        {"atlas_job": _atlas_jobs(ref=True)}),
    # the map's grid, target, networks of the claims, extrapolation, a straggler model no run uses
    "atlas_map": ({"atlas.target_loss": 2.9, "atlas.map.bandwidths.lo": 2.5e6, "atlas.map.bandwidths.hi": 2.5e10,
                   "atlas.map.bandwidths.points": 13, "atlas.map.latencies": [1.0e-5, 1.0e-2, 1.0e-1],
                   "atlas.claims_networks.wan_10mbit.latency_s": 0.01,
                   "atlas.claims_networks.wan_10mbit.bandwidth_Bps": 2.5e6,
                   "atlas.claims_networks.dc_100gbit.latency_s": 0.002,
                   "atlas.claims_networks.dc_100gbit.bandwidth_Bps": 2.5e10,
                   "atlas.extrapolate.sizes": [1.0e6, 1.0e8], "atlas.extrapolate.workers": [4, 16],
                   "atlas.extrapolate.flops_per_s": 1.0e10,
                   "atlas.straggler_axis.pareto_10ms.mean": 0.02, "atlas.straggler_axis.pareto_10ms.shape": 2.0,
                   "atlas.straggler_axis.exp_5ms.mean": 0.004, "atlas.straggler_axis.persistent_4x.slowdown": 3.0},
                  {"atlas_map": None, "atlas_query_bench": None}),
    "atlas_demo": ({"atlas.demo.topk": 8, "atlas.demo.chunk": 16, "atlas.demo.decay": 0.99,
                    "atlas.sweep.settings.demo": [4, 8], "atlas.sweep.settings.is-demo": [4, 8],
                    "atlas.sweep.settings.diloco-demo": [5, 20]},
                   {"atlas_job": _atlas_jobs(["demo", "is-demo", "diloco-demo"])}),
    "atlas_diloco": ({"atlas.diloco.H": 20, "atlas.diloco.outer_lr": 0.5, "atlas.diloco.outer_momentum": 0.8,
                      "atlas.sweep.settings.diloco.H": [5, 20], "atlas.sweep.settings.diloco.outer_lr": [0.4, 1.0],
                      "atlas.sweep.settings.diloco.outer_momentum": [0.9]},
                     {"atlas_job": _atlas_jobs(["diloco", "diloco-demo"])}),
    "atlas_powersgd": ({"atlas.powersgd.rank": 3, "atlas.sweep.settings.powersgd": [1, 2]},
                       {"atlas_job": _atlas_jobs(["powersgd"])}),
    "atlas_master": ({"atlas.s": 0}, {"atlas_job": _atlas_jobs(_AT_MASTER), "atlas_map": None}),
    "atlas_headline": ({"atlas.headline.seeds": [3, 5], "atlas.headline.size": "small",
                        "atlas.headline.n_workers": 2},
                       {"atlas_job": _atlas_jobs(_AT_HEADLINE)}),
    "atlas_trend": ({"atlas.trend.sizes.xl.d_model": 128, "atlas.trend.sizes.xl.n_layer": 3,
                     "atlas.trend.sizes.xl.n_head": 8, "atlas.trend.sizes.xl.block_size": 16,
                     "atlas.trend.size_n": 2, "atlas.trend.n_workers": [6], "atlas.trend.workers_size": "small"},
                    {"atlas_job": _atlas_jobs(_AT_TREND)}),
    # what the query benchmark reads beside the map's: the query's limit
    "atlas_query": ({"atlas.extrapolate.max_params_ratio": 1.0e5}, {"atlas_query_bench": None}),
    # the small size: every technique's runs (the sweep's size) and the map's
    "atlas_small": ({"atlas.sizes.small.d_model": 24, "atlas.sizes.small.n_layer": 2, "atlas.sizes.small.n_head": 4,
                     "atlas.sizes.small.block_size": 16},
                    {"atlas_job": _atlas_jobs(_AT_ALL), "atlas_map": None}),
    # a straggler model the arrival-dependent techniques train under: their runs and the map
    "atlas_straggler": ({"atlas.straggler_axis.exp_20ms.mean": 0.03, "atlas.straggler_axis.exp_20ms.model": "pareto"},
                        {"atlas_job": _atlas_jobs(_AT_ARRIVAL), "atlas_map": None}),
    "atlas_arrival": ({"atlas.train_under.sizes": ["large"], "atlas.train_under.seeds": [0],
                       "atlas.train_under.stragglers": ["exp_5ms"]},
                      {"atlas_job": _atlas_jobs(_AT_ARRIVAL)}),
    # every run's network, and when it evaluates (the reference's too); the map charges its own
    "atlas_network": ({"atlas.cluster.network.latency_s": 0.002, "atlas.cluster.network.bandwidth_Bps": 2.5e9,
                       "atlas.eval_every": 20},
                      {"atlas_job": None}),
    # ---- settings that add or remove jobs: the new jobs (missing outputs) and the summaries whose
    # input set changes rerun; no existing run does
    # every paper's seeds but P2's and the atlas's: a simulated job holds all its seeds, so it reruns
    "seeds": ({"seeds": [0, 1, 2, 3, 4, 5]},
              {"baseline_summarize": None, "baseline_train_dist": "seed=5", "baseline_train_sim": "seed=5",
               "demo_summarize": "dgroup=simulated", "demo_train_sim": None, "local_summarize": None,
               "local_train": "seed=5", "local_train_bp_untimed": None, "local_train_seeds": None, "pgc_regime": None,
               "pgc_summarize": "group=motivating|simulation", "pgc_train_sim": None, "pgc_train_sim_extra": None}),
    "baseline_workers": ({"baseline.n_workers": 2}, {"baseline_train_sim": None, "baseline_train_dist": None}),
    "baseline_backends": ({"baseline.backends": ["simulated"]}, {"baseline_summarize": None}),
    "pgc_motivating_set": ({"pgc.motivating.schemes": ["dgd", "gc-fr"], "pgc.motivating.c": [2, 3]},
                           {"pgc_summarize": "group=motivating"}),
    "pgc_simulation_set": ({"pgc.simulation.schemes": ["dgd", "gc-fr", "gc-cr", "pgc-fr", "pgc-cr", "is-sgd", "is-gc-fr"],
                            "pgc.simulation.s": [1, 2], "pgc.simulation.delay_means": [1.0]},
                           {"pgc_summarize": "group=simulation", "pgc_regime": None}),
    "pgc_cloud_set": ({"pgc.cloud.schemes": ["dgd", "gc-fr", "gc-cr", "pgc-fr", "pgc-cr", "is-sgd"]},
                      {"pgc_summarize": "group=cloud"}),
    # another s, or no stop at the target: every cloud run; the figures draw the cloud settings
    "pgc_cloud_s": ({"pgc.cloud.s": 1, "pgc.cloud.threshold.stop": False},
                    {"pgc_train_sim": "group=cloud", "pgc_train_sim_extra": "group=cloud", "pgc_summarize": "group=cloud",
                     "pgc_fig3": None, "pgc_fig7": None, "pgc_fig8": None, "pgc_real_vs_sim": None}),
    "pgc_real_set": ({"pgc.real.s": 2, "pgc.real.schemes": ["dgd", "gc-cr", "pgc-cr"]},
                     {"pgc_train_real": None, "pgc_train_sim_real": None, "pgc_summarize": "group=real",
                      "pgc_regime": None}),
    "pgc_real_seeds": ({"pgc.real.seeds": [0, 1]}, {"pgc_train_sim_real": None}),
    "pgc_real_off": ({"pgc.real.enabled": False}, {"pgc_regime": None}),
    "pgc_coding_mode": ({"pgc.coding.mode": "none"}, {"pgc_train_sim": None, "pgc_train_sim_extra": None}),
    "demo_workers": ({"demo.n_workers": [2, 4]}, {"demo_train_sim": "nw=4", "demo_summarize": "dgroup=simulated"}),
    "demo_methods": ({"demo.methods": ["adamw", "demo", "demo-compact", "diloco", "powersgd"]},
                     {"demo_summarize": "dgroup=simulated"}),
    # the variants' lr from another method's choice: the sweep's table (their runs are downstream of it)
    "demo_follows": ({"demo.lr_follows.demo-compact": "adamw", "demo.lr_follows.demo-allmean": "adamw"},
                     {"demo_table_sweep": None}),
    "demo_real_off": ({"demo.real.enabled": False}, {"scorecard_paper": "paper=P4"}),
    "demo_real_set": ({"demo.real.methods": ["adamw"], "demo.real.n_workers": [2]},
                      {"demo_summarize": "dgroup=gloo|simulated_real"}),
    "demo_sweep_extra": ({"demo.sweep.lrs_extra.adamw": [0.0001], "demo.sweep.lrs_extra.diloco": [0.0001],
                          "demo.sweep.lrs_extra.powersgd": [0.0001]},
                         {"demo_train_sweep": "lr=0.0001", "demo_summarize": "dgroup=sweep"}),
    # the sweep's runs directly (the compared runs downstream of its choice)
    "demo_sweep_workers": ({"demo.sweep.n_workers": 4, "demo.compute.mode": "calibrated"}, {"demo_train_sweep": None}),
    "placement_seeds": ({"placement.seeds": [0, 1, 2, 3]}, {"placement_run": None}),
    "placement_run_set": ({"placement.run_models": ["inception_v3", "resnet50"],
                           "placement.run_pairs": ["cpu_igpu", "cpu_igpu_concurrent", "cpu_dcgpu"]},
                          {"placement_regime": None, "placement_space": None, "placement_summarize": None}),
    "placement_default_pair": ({"placement.default_pair": "cpu_dcgpu"},
                               {"placement_fig_placement": None, "placement_real": None, "placement_regime": None,
                                "placement_run": "pair=cpu_dcgpu", "placement_space": None,
                                "placement_summarize": None}),
    "placement_ablation_of": ({"placement.ablation_of": "hsdag"},
                              {"placement_fig_placement": None, "placement_run": "pair=cpu_igpu",
                               "placement_summarize": None}),
    "placement_pair_methods": ({"placement.pairs.cpu_igpu_concurrent.methods": ["cpu_only", "gpu_only", "heft"],
                                "placement.pairs.cpu_dcgpu.methods": ["cpu_only", "gpu_only", "heft"],
                                "placement.pairs.cpu_h200.methods": ["cpu_only", "gpu_only", "heft"]},
                               {"placement_summarize": None}),
    "placement_real_models": ({"placement.real.models": ["resnet50", "inception_v3"]}, {"placement_table_real": None}),
    "placement_real_off": ({"placement.real.enabled": False}, {"paper": None}),
    "local_follows": ({"local_learning.sweep.follows.rc/rc-par": "rc/bp",
                       "local_learning.sweep.follows.rc/rc-async": "rc/bp"}, {"local_table_sweep": None}),
    "local_sections": ({"local_learning.rc.sections": 2},
                       {"local_bench_throughput": None, "local_train_sweep": "lrun=rc/bp|rc/rc-seq"}),
    "local_parallel_seeds": ({"local_learning.rc.parallel_seeds": [0, 1]},
                             {"local_table_sweep": None, "local_train": "lmethod=rc-par"}),
    "local_bench_methods": ({"local_learning.bench.methods": ["bp", "rc-par", "rc-async", "bp-1thread"]},
                            {"local_bench_throughput": None}),
    "atlas_off": ({"atlas.in_default_target": False}, {"scorecard_paper": "paper=atlas"}),
    "atlas_workers": ({"atlas.n_workers": [2]}, {"atlas_job": _atlas_jobs(_AT_ALL)}),
    "atlas_trend_head": ({"atlas.trend.techniques": [t for t in _AT_TREND if t != "diloco-demo"],
                          "atlas.headline.techniques": [t for t in _AT_HEADLINE if t != "diloco-demo"]},
                         {"atlas_job": _atlas_jobs(["diloco-demo"])}),
    "atlas_techniques": ({"atlas.techniques": [t for t in _ATLAS["techniques"] if t != "is-demo"]},
                         {"atlas_map": None, "atlas_query_pack": None}),
    # straggler models no run trains under: the map and the query's benchmark replay them
    "atlas_axis_models": ({"atlas.straggler_axis.none.model": "exponential",
                           "atlas.straggler_axis.pareto_10ms.model": "exponential",
                           "atlas.straggler_axis.exp_5ms.model": "pareto",
                           "atlas.straggler_axis.persistent_4x.model": "dead",
                           "atlas.straggler_axis.dead_one.model": "persistent",
                           "atlas.straggler_axis.persistent_4x.slow_workers": [0],
                           "atlas.straggler_axis.dead_one.slow_workers": [0]},
                          {"atlas_map": None, "atlas_query_bench": None}),
    # the atlas's data set and measured compute: every run (and the other data set's floors)
    "atlas_source": ({"atlas.compute": "measured", "atlas.dataset": "digits"},
                     {"atlas_job": None, "data_floors": "dataset=digits"}),
    # one more extra seed for each claim that asks for them: that seed's jobs and the summary
    # (the scorecards are downstream: their spec leaves extra_seeds out)
    "pgc_extra_seeds": ({"stats.extra_seeds.pgc.fig9.pgc_fewer_steps_than_dgd": 30,
                         "stats.extra_seeds.pgc.fig9.pgc_fewer_steps_than_dgd_ma": 6,
                         "stats.extra_seeds.pgc.fig10.pgc_sooner_than_is_sgd": 7},
                        {"pgc_train_sim_extra": "group=cloud", "pgc_summarize": "group=cloud"}),
    # the coding profile measured by this run, at another n, dtype and gradient size (the stored
    # profile holds the default's only): the profile, every simulated run, the real runs (dtype)
    "pgc_coding_source": ({"pgc.coding.source": "measured", "pgc.n": 24, "pgc.dtype": "float64",
                           "pgc.coding.numel": 1000000},
                          {"pgc_coding_profile": None, "pgc_train_sim": None, "pgc_train_sim_extra": None,
                           "pgc_train_real": None}),
    "demo_sweep_methods": ({"demo.sweep.methods": ["adamw", "demo", "diloco", "powersgd", "demo-compact"]},
                           {"demo_train_sweep": "dmethod=demo-compact", "demo_summarize": "dgroup=sweep"}),
    "placement_method_set": ({"placement.methods": ["cpu_only", "gpu_only", "random", "heft", "rnn", "placeto", "hsdag",
                                                    "hsdag_corrected"],
                              "placement.controls": ["rnn", "placeto", "hsdag", "hsdag_corrected"],
                              "placement.ablations": ["no_shape", "no_node_id", "no_structural", "no_pooling"]},
                             {"placement_real": None, "placement_space": None, "placement_summarize": None}),
    # the runs score with this run's measured profile instead of the stored one
    "placement_profile_source": ({"placement.profile.source": "measured"},
                                 {"placement_run": None, "placement_regime": None}),
    # a single-device placement scored invalid: the runs that can propose one
    "placement_single": ({"placement.single_device": "invalid"}, {"placement_run": None}),
    "local_rc_methods": ({"local_learning.rc.methods": ["bp", "rc-seq", "rc-async"]}, {"local_summarize": None}),
}

# the groups packed into one dry run each: within a batch no two groups can claim one job (their
# rules differ, or one rule's filters name disjoint values of one wildcard), and no group's
# declared rule lies downstream of another's (each batch holds at most one group of a paper's
# training and one of its summaries), so every directly changed job belongs to one group
BATCHES = [
    ["demo_diloco", "demo_powersgd", "local_bench", "local_nonident", "pgc_train", "placement_corrected",
     "baseline", "atlas_all"],
    ["demo_adamw", "local_pc", "pgc_regime", "placement_rnn", "placement_hsdag", "placement_fine",
     "placement_placeto", "baseline_straggler", "atlas_runs", "atlas_reference", "local_bench_methods"],
    ["demo_optimizer", "local_async", "pgc_cloud_threshold", "placement_profile", "atlas_demo", "atlas_powersgd",
     "baseline_workers"],
    ["demo_run", "local_eval", "pgc_real", "atlas_diloco", "atlas_arrival", "placement_link", "placement_igpu",
     "placement_concurrent", "placement_h200", "baseline_backends"],
    ["demo_networks", "local_batch", "atlas_master", "pgc_simulation", "placement_budget"],
    ["demo_real", "local_sweep_lrs", "atlas_headline", "pgc_cloud", "placement_sim_order"],
    ["demo_sweep_lrs", "atlas_trend", "local_rc", "pgc_real_batch", "placement_real"],
    ["atlas_map", "demo_model", "local_rc_model", "placement_models"],
    ["atlas_network", "demo_steps", "local_pc_model", "placement_seeds", "pgc_motivating_set", "pgc_real_set",
     "local_sections"],
    ["atlas_query", "demo_sweep_runs", "local_pc_bench", "cluster_compute", "local_parallel_seeds"],
    ["local_threads", "cluster_network", "placement_run_set", "demo_workers", "atlas_workers"],
    ["local_sweep_seeds", "atlas_small", "pgc_motivating", "placement_default_pair", "demo_methods"],
    ["data_digits", "data_pydoc", "placement_ablation_of"],
    ["data_seed", "placement_method_set"],
    ["stats_bootstrap", "pgc_coding_source", "demo_sweep_workers", "atlas_source"],
    ["stats_seeds_cap", "local_sweep_lrs_rc", "pgc_real_off", "demo_sweep_extra", "atlas_axis_models"],
    ["atlas_straggler", "local_concurrency", "demo_lr_source", "pgc_simulation_set", "pgc_extra_seeds",
     "placement_real_models"],
    ["local_sweep_lrs_pc_fixed", "pgc_cloud_set", "pgc_real_seeds", "demo_follows", "atlas_trend_head",
     "placement_pair_methods"],
    ["local_lr_source", "pgc_cloud_s", "demo_real_set", "atlas_techniques", "placement_profile_source"],
    ["pgc_coding_mode", "atlas_off", "demo_real_off", "local_follows"],
    ["local_rc_methods", "demo_sweep_methods", "placement_single"],
    ["placement_real_off"],
    ["seeds"],
    [],  # NO_JOB's keys alone
]
NO_JOB_BATCH = len(BATCHES) - 1

# rules a group declares though the setting does not change their results: the spec carries it
# anyway (a rerun too many, never a missed one), with the reason; fixing one removes it here
OVERTRIGGERED: dict[tuple[str, str], str] = {}

# declared rules planned only downstream of the group's own change (Snakemake names only the first
# reason of a job whose input is rewritten, so its own params change is not seen); every other
# declared rule must be planned directly, which no other group of the batch can fake
_SWEEP_CHOICE = "downstream of the group's own sweep runs (the runs read the sweep's chosen lr)"
DOWNSTREAM = {
    **{(g, r): _SWEEP_CHOICE for g in ("demo_adamw", "demo_optimizer", "demo_run", "demo_model")
       for r in ("demo_train_sim", "demo_train_real", "demo_train_twin")},
    ("demo_diloco", "demo_train_sim"): _SWEEP_CHOICE,
    ("demo_powersgd", "demo_train_sim"): _SWEEP_CHOICE,
    ("local_pc", "local_train_seeds"): _SWEEP_CHOICE,
    ("pgc_real_batch", "pgc_train_sim_real"): "the twin is calibrated from the group's own real runs (its input)",
    ("demo_networks", "demo_fig_loss_time"): "downstream of the group's own demo_summarize",
    ("demo_networks", "demo_table_results"): "as above",
    ("demo_workers", "demo_summarize"): "downstream of the group's own new runs (N = 4)",
    ("pgc_cloud_s", "pgc_summarize"): "downstream of the group's own cloud runs",
    **{(g, "atlas_map"): "downstream of the group's own atlas_job runs"
       for g in ("atlas_all", "atlas_master", "atlas_small", "atlas_straggler")},
}

# keys that change no job's results (pure presentation or bookkeeping): a changed value and the
# reason; all of them change at once in the first batch, where any job they rerun is a stray
NO_JOB = {
    "demo.bench.repeats": (5, "demo_bench is outside the default workflow (snakemake demo_bench)"),
    "demo.bench.steps": (10, "as above"),
    **{f"demo.bench.large_model.{k}": (v, "as above")
       for k, v in {"n_layer": 4, "d_model": 256, "n_head": 4, "block_size": 32}.items()},
    **{f"demo.lr.{m}": (0.002, "read only with demo.lr_from_sweep false (the sweep's choice is used)")
       for m in CONFIG["demo"]["lr"]},
    "local_learning.lr": (0.02, "read only with local_learning.lr_from_sweep false (every method takes "
                                "the sweep's choice; the benchmarks step a fixed optimizer)"),
    "pgc.coding.rounds": (5, "read only by the coding profile's measurement (rule pgc_coding_profile), which "
                             "runs with pgc.coding.source: measured; the default reads the stored profile"),
    "placement.bench.seconds": (1.0, "placement_bench_sim is outside the default workflow"),
    **{f"local_learning.bench.map.{k}": (v, "local_map is outside the default workflow (snakemake local_map)")
       for k, v in {"repeats": 2, "warmup": 2, "measure": 5, "d_model": [64, 128], "sections": [2, 4],
                    "block_size": [64, 128], "methods": ["bp", "rc-par"]}.items()},
    **{f"runtime.{k}": (v, "how a job runs (its timeouts, threads, checkpoints), not its results")
       for k, v in {"timeout_s": 40, "job_timeout_s": 2000, "threads": 1, "checkpoint.every_s": 30,
                    "checkpoint.every_steps": 5}.items()},
    **{f"jobs.step_s.{rule}": (1.0, "a cluster job's time request (SLURM resources), not its results")
       for rule in CONFIG["jobs"]["step_s"]},
    "jobs.margin": (3.0, "as above"),
    "jobs.startup_min": (7, "as above"),
    "jobs.base_mb": (900, "a cluster job's memory request, not its results"),
    "jobs.partitions.cpu": ("cpu2", "the SLURM partition a job is sent to"),
    "jobs.partitions.gpu": ("gpu2", "as above"),
    "placement.other_pair_methods": (["cpu_only", "gpu_only", "random", "heft", "hsdag_corrected"],
                                     "read only for a pair without its own methods; every other pair names its own"),
    "demo.bench.large_model.name": ("olmo", "demo_bench is outside the default workflow (snakemake demo_bench)"),
    "runtime.launcher": ("torchrun", "how a real job's ranks start (forked from one torch import, or torchrun), "
                                     "not its results"),
    **{f"placement.pairs.{p}.description": ("another description", "text for the tables; no job's spec carries it")
       for p in CONFIG["placement"]["pairs"]},
    **{f"atlas.bench.{k}": (v, "`distlab atlas bench`'s settings: no rule runs it, and the query benchmark's "
                               "spec leaves them out")
       for k, v in {"steps": 30, "repeats": 2, "n_workers": [2], "sizes": ["small"], "techniques": ["ddp"]}.items()},
    **{f"replicate.{k}": (v, "read only by make stability's replicate (distlab.scoring.replicate), which runs "
                             "the workflow in a tree of its own; no rule reads it")
       for k, v in {"enabled": False, "seed_offset": 2000, "kernels.ATEN_CPU_CAPABILITY": "avx2",
                    "power": 0.9, "directory": "replicate_b",
                    **{f"leave_out.{s}.enabled": True for s in ("pgc.real", "demo.real", "placement.real",
                                                               "local_learning.bench")}}.items()},
}

# keys neither a group nor NO_JOB covers, with why (a gap said, never silent): each has no other
# value the workflow accepts, or changes only a path Snakemake compares as an input file
_WHY = {
    'KIND': "the other kind is refused when the workflow is parsed: the models that read this data set need "
            "its kind (the config check names them)",
    'DATA': "the only data set of the kind its model needs; the other one is refused when the workflow is parsed",
    'ONE': "the schema allows one value here (gpt): nothing else to change it to",
    'PATH': "the path of a declared input file: Snakemake reruns its jobs when their set of input files changes, "
            "which it records when a job runs; this test's tree is made by --touch, which records no input sets",
}
NOT_COVERED: dict[str, str] = {
    'datasets.digits.kind': _WHY['KIND'],
    'datasets.pydoc.kind': _WHY['KIND'],
    'baseline.dataset': _WHY['DATA'],
    'pgc.dataset': _WHY['DATA'],
    'demo.dataset': _WHY['DATA'],
    'local_learning.dataset': _WHY['DATA'],
    'demo.real.backend': "names the real runs' folder (results/demo/<backend>/...): another backend is other jobs, "
                         "not a changed spec",
    'placement.pairs.cpu_h200.devices': "the H200 pair's second device is measured (its profile_dir), the only kind "
                                        "that pair can have; the profile names its devices",
    'placement.pairs.cpu_h200.profile_dir': _WHY['PATH'],
    'atlas.compute_profile': _WHY['PATH'],
    'local_learning.rc.model.name': _WHY['ONE'],
    'local_learning.pc.model.name': _WHY['ONE'],
    'local_learning.bench.model.name': _WHY['ONE'],
    'atlas.sizes.small.name': _WHY['ONE'],
    'atlas.sizes.large.name': _WHY['ONE'],
    'atlas.trend.sizes.xl.name': _WHY['ONE'],
    'local_learning.pc.methods': "its only other valid value reorders the two methods (the schema needs both)",
}


def inventory() -> dict[str, str]:
    """Each leaf key of config/config.yaml (a list is a leaf) -> where it is covered: a group's
    name, "NO_JOB" or "NOT_COVERED"."""
    where: dict[str, list[str]] = {k: [] for k in leaves(CONFIG)}
    for name, (changes, _) in GROUPS.items():
        for k in changes:
            where.setdefault(k, []).append(name)
    for k in NO_JOB:
        where.setdefault(k, []).append("NO_JOB")
    for k in NOT_COVERED:
        where.setdefault(k, []).append("NOT_COVERED")
    return {k: ",".join(v) for k, v in where.items()}


def leaves(d, prefix=()):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from leaves(v, prefix + (k,))
    else:
        yield ".".join(prefix)


def key_path(key: str) -> list[str]:
    """A dotted leaf key's path: ``stats.extra_seeds.<claim id>`` ends in a claim id, which has dots."""
    if key.startswith("stats.extra_seeds."):
        return ["stats", "extra_seeds", key[len("stats.extra_seeds."):]]
    return key.split(".")


def overlay(changes: dict) -> dict:
    out: dict = {}
    for key, value in changes.items():
        node = out
        *parents, last = key_path(key)
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
def touched_tree(results_tree) -> Path:
    """A fresh copy with every default output present and every job's provenance recorded: the
    session's ``results_tree`` (conftest), which no test changes (dry runs only; this module adds
    its overlay files beside the config, which no job reads)."""
    return results_tree


def batch_overlay(i: int) -> dict:
    """Batch ``i``'s settings: its groups' changes (the first batch's also every NO_JOB key's)."""
    changes: dict = {}
    for name in BATCHES[i]:
        changes.update(GROUPS[name][0])
    if i == NO_JOB_BATCH:
        changes.update({k: v for k, (v, _) in NO_JOB.items()})
    return overlay(changes)


@pytest.fixture(scope="module")
def planned(touched_tree) -> dict:
    """The dry run of the unchanged config ("none") and of each batch (its index)."""
    names = ["none", *range(len(BATCHES))]
    args = []
    for name in names:
        path = touched_tree / f"overlay_{name}.yaml"
        path.write_text(yaml.safe_dump(batch_overlay(name) if name != "none" else {}))
        args.append(["-n", "--configfile", "config/config.yaml", str(path)])
    runs = snakemake_runs(args, cwd=touched_tree, timeout=1800)
    return {n: r for n, r in zip(names, runs)}


def _batch_of(name: str) -> int:
    return next(i for i, names in enumerate(BATCHES) if name in names)


@pytest.mark.slow
def test_an_unchanged_config_plans_nothing(planned):
    r = planned["none"]
    assert r.returncode == 0, r.stderr[-2000:]
    assert planned_jobs(r.stdout) == [], r.stdout[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(BATCHES)))
def test_a_batch_reruns_no_job_its_groups_do_not_change(planned, i):
    """Every directly changed job of a batch's dry run is one a group of the batch declares: no
    job a setting does not change reruns for it (and, in the NO_JOB batch, none for those keys)."""
    r = planned[i]
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    declared = [GROUPS[name][1] for name in BATCHES[i]]
    stray = sorted({(rule, w) for rule, w, direct in planned_jobs(r.stdout)
                    if direct and not any(rule in exp and _matches(w, exp[rule]) for exp in declared)})
    assert not stray, f"batch {i} {BATCHES[i]}: jobs rerun though no setting changes them: {stray[:5]}"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(GROUPS))
def test_a_setting_reruns_the_jobs_it_changes(planned, name):
    """Every rule a group declares has a directly changed job in its batch's dry run (or, where
    DOWNSTREAM says so, a job downstream of the group's own change: Snakemake names only the first
    reason of a job whose input is rewritten); no other group of the batch claims that rule's
    jobs (test_batches_attribute_each_job_to_one_group), so the planned job is this group's."""
    r = planned[_batch_of(name)]
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    jobs = planned_jobs(r.stdout)
    expected = GROUPS[name][1]
    unplanned = sorted(rule for rule, want in expected.items()
                       if not any(j[0] == rule and (j[2] or (name, rule) in DOWNSTREAM) and _matches(j[1], want)
                                  for j in jobs))
    assert not unplanned, f"{name}: the setting changes these rules' jobs, none is planned for it: {unplanned}"


def _disjoint(a: str | None, b: str | None) -> bool:
    """Two wildcard filters of one rule select no common job: both name one wildcard, with no
    value in common."""
    if a is None or b is None:
        return False
    (ka, va), (kb, vb) = a.split("=", 1), b.split("=", 1)
    return ka == kb and not set(va.split("|")) & set(vb.split("|"))


def test_batches_attribute_each_job_to_one_group():
    """Each group is in one batch; within a batch no two groups claim one job (their rules
    differ, or a shared rule's filters are disjoint), and no two change one key."""
    names = [n for b in BATCHES for n in b]
    assert sorted(names) == sorted(GROUPS), "each group in exactly one batch"
    for batch in BATCHES:
        for x, a in enumerate(batch):
            for b in batch[x + 1:]:
                ea, eb = GROUPS[a][1], GROUPS[b][1]
                clash = [rule for rule in ea.keys() & eb.keys() if not _disjoint(ea[rule], eb[rule])]
                assert not clash, (a, b, clash)
                assert not GROUPS[a][0].keys() & GROUPS[b][0].keys(), (a, b)


def test_every_leaf_key_is_covered_once():
    """Every leaf key of config/config.yaml (a list is a leaf) is changed by exactly one group, or
    listed in NO_JOB or NOT_COVERED (with its reason), and every key named there is a leaf: no
    gap is silent.  The module docstring's counts are these."""
    where = inventory()
    config_leaves = set(leaves(CONFIG))
    assert not set(where) - config_leaves, f"not leaf keys of the config: {sorted(set(where) - config_leaves)}"
    twice = {k: v for k, v in where.items() if "," in v}
    assert not twice, f"keys covered more than once: {twice}"
    missing = sorted(k for k, v in where.items() if not v)
    assert not missing, f"keys neither changed by a group nor listed in NO_JOB / NOT_COVERED: {missing}"
    assert all(why for _, why in NO_JOB.values()) and all(NOT_COVERED.values())
    unchanged = sorted(k for changes in [GROUPS[n][0] for n in GROUPS] + [{k: v for k, (v, _) in NO_JOB.items()}]
                       for k, v in changes.items() if v == _default(k))
    assert not unchanged, f"a change equal to the default checks nothing: {unchanged}"
    n_no_job, n_not = len(NO_JOB), len(NOT_COVERED)
    n_covered = len(where) - n_no_job - n_not
    print(f"\n{len(where)} leaf keys: {n_covered} changed by {len(GROUPS)} groups in {len(BATCHES)} dry runs, "
          f"{n_no_job} change no job (NO_JOB), {n_not} not covered (NOT_COVERED)")
    assert f"{len(where)} leaf keys: {n_covered} changed by groups, {n_no_job} in NO_JOB, {n_not} in " \
           f"NOT_COVERED" in " ".join(__doc__.split()), "update the module docstring's counts"


def _default(key: str):
    node = CONFIG
    for part in key_path(key):
        node = node[part]
    return node


def test_every_overtriggered_rule_is_declared_by_its_group():
    """A listed over-trigger (or downstream-only rule) names a group and one of its declared rules
    (the lists stay in step with GROUPS as either changes)."""
    for (group, rule), why in {**OVERTRIGGERED, **DOWNSTREAM}.items():
        assert group in GROUPS and rule in GROUPS[group][1] and why, (group, rule)
