"""The atlas's spec is the whole truth: each atlas job is passed exactly the part of
the ``atlas:`` section its results depend on (distlab.atlas.workflow.job_config, map_config),
so changing one setting reruns exactly the jobs whose results it changes, and no other.

Every key under ``atlas:`` in config/config.yaml (and each key one level below it) is changed
once, to another valid value, and the jobs whose rule parameters or declared inputs change are
compared with the jobs the key is documented to change (:data:`CHANGES`; a key missing there
fails the test, so a new setting must say which jobs it reruns).  That check calls the rules'
own functions (AtlasRules: the params and input functions of workflow/rules/atlas.smk), one
key at a time.  A handful of the changes are then dry-run through Snakemake itself
(``snakemake -n -p --forceall``, all in one interpreter): the jobs whose shell command (which
carries the ``--config`` text) or inputs differ from the unchanged config's plan are exactly
the same ones.  Downstream of a rerun technique job the map reruns anyway (its input is
rewritten); ``map`` in an expectation means the map's own parameters change.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import ROOT, snakemake_runs  # noqa: E402
from test_rules_unchanged import planned_jobs  # noqa: E402

from distlab.atlas.spec import arrival_dependent, kind  # noqa: E402
from distlab.atlas.workflow import AtlasRules  # noqa: E402

CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
ATLAS = CONFIG["atlas"]
ALL = frozenset(ATLAS["techniques"])
MASTER = frozenset(t for t in ALL if kind(t) == "master")
ARRIVAL = frozenset(t for t in ALL if arrival_dependent(t))
HEADLINE = frozenset(ATLAS["headline"]["techniques"])
TREND = frozenset(ATLAS["trend"]["techniques"])
REF, MAP = "reference", "map"


def _jobs(*techniques, ref=False, map_=False) -> frozenset:
    out = {f"techniques/{t}" for group in techniques for t in ([group] if isinstance(group, str) else group)}
    return frozenset(out | ({REF} if ref else set()) | ({MAP} if map_ else set()))


# key (dotted, under atlas:) -> (a changed valid value, the jobs whose results it changes)
CHANGES: dict[str, tuple[object, frozenset]] = {
    "in_default_target": (False, _jobs()),                      # which targets the map joins, no result
    "dataset": ("digits", _jobs(ALL, ref=True, map_=True)),      # the data and its floors are inputs
    "target_loss": (2.9, _jobs(map_=True)),
    "compute": ("measured", _jobs(ALL, ref=True, map_=True)),
    "compute_profile": ("data/atlas/another_profile.json", _jobs(ALL, ref=True, map_=True)),  # read under stored
    "sizes": ({**ATLAS["sizes"], "small": {**ATLAS["sizes"]["small"], "d_model": 24}}, _jobs(ALL, map_=True)),
    "sizes.large": ({**ATLAS["sizes"]["large"], "d_model": 48}, _jobs(ALL, ref=True, map_=True)),
    "n_workers": ([2, 6], _jobs(ALL)),
    "seeds": ([0, 1], _jobs(ALL)),
    "headline": ({**ATLAS["headline"], "techniques": sorted(HEADLINE - {"diloco-demo"})}, _jobs("diloco-demo")),
    "headline.seeds": ([3, 5], _jobs(HEADLINE)),
    "headline.size": ("small", _jobs(HEADLINE)),
    "headline.n_workers": (2, _jobs(HEADLINE)),
    "trend": ({**ATLAS["trend"], "techniques": sorted(TREND - {"diloco-demo"})}, _jobs("diloco-demo")),
    "trend.sizes": ({"xl": {**ATLAS["trend"]["sizes"]["xl"], "d_model": 128}}, _jobs(TREND)),
    "trend.size_n": (2, _jobs(TREND)),
    "trend.n_workers": ([6], _jobs(TREND)),
    "trend.workers_size": ("small", _jobs(TREND)),
    "batch_size": (16, _jobs(ALL, ref=True, map_=True)),
    "steps": (200, _jobs(ALL)),
    "eval_every": (20, _jobs(ALL, ref=True)),
    "eval_batches": (4, _jobs(ALL)),                             # the reference has its own
    "s": (0, _jobs(MASTER, map_=True)),
    "techniques": ([t for t in ATLAS["techniques"] if t != "is-demo"], _jobs(map_=True)),  # is-demo's job goes
    "demo": ({**ATLAS["demo"], "topk": 8}, _jobs("demo", "is-demo", "diloco-demo")),
    "demo.chunk": (16, _jobs("demo", "is-demo", "diloco-demo")),
    "demo.decay": (0.99, _jobs("demo", "is-demo", "diloco-demo")),
    "diloco": ({**ATLAS["diloco"], "H": 20}, _jobs("diloco", "diloco-demo")),
    "diloco.outer_lr": (0.5, _jobs("diloco", "diloco-demo")),
    "diloco.outer_momentum": (0.8, _jobs("diloco", "diloco-demo")),
    "powersgd": ({"rank": 3}, _jobs("powersgd")),
    "sweep": ({**ATLAS["sweep"], "lrs": [0.01, 0.1]}, _jobs(ALL)),
    "sweep.widen": (0, _jobs(ALL)),
    "sweep.size": ("large", _jobs(ALL)),
    "sweep.n_workers": (4, _jobs(ALL)),
    "sweep.seed": (1, _jobs(ALL)),
    "sweep.settings": ({**ATLAS["sweep"]["settings"], "diloco": [5, 20]}, _jobs("diloco")),
    "cluster": ({"network": {"latency_s": 0.002, "bandwidth_Bps": 1.25e9}}, _jobs(ALL, ref=True)),
    "straggler_axis": ({**ATLAS["straggler_axis"], "exp_20ms": {"model": "exponential", "mean": 0.03}},
                       _jobs(ARRIVAL, map_=True)),
    "straggler_axis.pareto_10ms": ({"model": "pareto", "mean": 0.01, "shape": 2.0}, _jobs(map_=True)),
    "train_under": ({**ATLAS["train_under"], "stragglers": ["exp_5ms"]}, _jobs(ARRIVAL)),
    "train_under.sizes": (["large"], _jobs(ARRIVAL)),
    "train_under.seeds": ([0], _jobs(ARRIVAL)),
    "reference": ({**ATLAS["reference"], "steps": 300}, _jobs(ref=True)),
    "reference.lr": (0.03, _jobs(ref=True)),
    "reference.seeds": ([0, 1], _jobs(ref=True)),
    "reference.size": ("small", _jobs(ref=True)),
    "reference.n_workers": (4, _jobs(ref=True)),
    "reference.eval_batches": (32, _jobs(ref=True)),
    "map": ({**ATLAS["map"], "latencies": [1.0e-5, 1.0e-2, 1.0e-1]}, _jobs(map_=True)),
    "map.bandwidths": ({**ATLAS["map"]["bandwidths"], "points": 13}, _jobs(map_=True)),
    "claims_networks": ({**ATLAS["claims_networks"], "wan_10mbit": {"latency_s": 0.01, "bandwidth_Bps": 1.25e6}},
                        _jobs(map_=True)),
    "extrapolate": ({**ATLAS["extrapolate"], "workers": [4, 16]}, _jobs(map_=True)),
    "extrapolate.flops_per_s": (1.0e10, _jobs(map_=True)),
    "extrapolate.max_params_ratio": (1.0e5, _jobs()),           # the query's limit, no job's
    "bench": ({**ATLAS["bench"], "steps": 30}, _jobs()),          # `distlab atlas bench`, not a rule
}
# the dicts some of whose entries are also changed one by one (the whole dict's entry changes one)
NESTED = ("sizes", "headline", "trend", "demo", "diloco", "sweep", "straggler_axis", "train_under", "reference", "map",
          "extrapolate")
# the changes also dry-run through Snakemake (each is one more dry run, about 10 s)
DRY_RUN_KEYS = ("demo", "s", "reference", "straggler_axis", "bench")


def changed(key: str, value) -> dict:
    """The default config with ``atlas.<key>`` (dotted) set to ``value``."""
    cfg = copy.deepcopy(CONFIG)
    node, *path = ["atlas", *key.split(".")]
    d = cfg[node]
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    return cfg


def rule_view(cfg: dict) -> dict[str, tuple]:
    """What the atlas's rules see of each job: its ``--config`` text and its declared inputs
    (AtlasRules, the functions workflow/rules/atlas.smk calls)."""
    a = cfg["atlas"]
    rules = AtlasRules(cfg)
    out = {}
    for job in [f"techniques/{t}" for t in a["techniques"]] + [REF]:
        w = SimpleNamespace(job=job)
        out[job] = (rules.config_json(w), rules.data(w), tuple(rules.compute_profile(w)), rules.verb(w))
    w = SimpleNamespace()
    out[MAP] = (rules.map_config_json(w), tuple(rules.technique_done(w)), rules.floors(w),
                tuple(rules.compute_profile(w)))
    return out


def changed_jobs(before: dict, after: dict) -> frozenset:
    """Jobs of ``after`` whose view differs from ``before`` (a job that is gone is not rerun)."""
    return frozenset(job for job, view in after.items() if before.get(job) != view)


def test_every_atlas_key_has_its_expected_jobs():
    """Every key of the section has an expectation (a new setting must say which jobs it reruns),
    and every expectation names a key the config has."""
    assert set(ATLAS) <= set(CHANGES), f"atlas keys without an expectation: {sorted(set(ATLAS) - set(CHANGES))}"
    keys = set(ATLAS) | {f"{k}.{sub}" for k in NESTED for sub in ATLAS[k]}
    assert set(CHANGES) <= keys, f"expectations for keys the config does not have: {set(CHANGES) - keys}"


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_a_changed_key_changes_exactly_its_jobs(key):
    value, expected = CHANGES[key]
    before = rule_view(CONFIG)
    after = rule_view(changed(key, value))
    assert changed_jobs(before, after) == expected


def test_the_run_specs_hold_only_what_their_technique_reads():
    from distlab.atlas.workflow import run_specs

    for t in ALL:
        spec = run_specs(ATLAS, t, 0.01, None)[0][1]
        assert ("s" in spec) == (t in MASTER), t
        assert {"demo", "diloco", "powersgd"} & set(spec) == {
            "demo": {"demo"}, "is-demo": {"demo"}, "diloco": {"diloco"}, "diloco-demo": {"demo", "diloco"},
            "powersgd": {"powersgd"}}.get(t, set()), t


def _plan(text: str) -> dict[str, str]:
    """The atlas jobs of a dry run's plan: ``techniques/<name>``, ``reference`` or ``map`` -> its block."""
    out = {}
    for block in planned_jobs(text):
        lines = block.splitlines()
        rule = lines[0].split()[1].rstrip(":")
        if rule == "atlas_job":
            job = next(ln.split("job=")[1].split(",")[0] for ln in lines if ln.strip().startswith("wildcards:"))
            out[job] = block
        elif rule == "atlas_map":
            out[MAP] = block
    return out


def test_snakemake_plans_the_same_reruns(clean_tree, tmp_path):
    """The same reruns, seen by Snakemake: a dry run per change (its command lines carry each job's
    --config), compared job by job with the unchanged config's plan."""
    paths = {}
    for key in (None, *DRY_RUN_KEYS):
        p = tmp_path / f"{key or 'unchanged'}.yaml"
        cfg = CONFIG if key is None else changed(key, CHANGES[key][0])
        p.write_text(yaml.safe_dump({"atlas": cfg["atlas"]}))
        paths[key] = p
    target = "results/atlas/map/cells.csv"
    runs = snakemake_runs([["-n", "-p", "--forceall", target, "--configfile", "config/config.yaml", str(p)]
                           for p in paths.values()], cwd=clean_tree)
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    plans = dict(zip(paths, (_plan(r.stdout) for r in runs)))
    base = plans.pop(None)
    assert set(base) == {f"techniques/{t}" for t in ALL} | {REF, MAP}
    for key, plan in plans.items():
        assert set(plan) == set(base)
        assert frozenset(j for j in plan if plan[j] != base[j]) == CHANGES[key][1], key
