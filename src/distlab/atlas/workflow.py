"""Spec builders for the atlas rules (torch-free): from the ``atlas:`` config section to run specs.

One job per technique: its learning-rate and natural-setting sweep (one seed, the
sweep's size and N, chosen on the final validation loss of the fixed windows),
then its runs at the choice — every size x N x seed with no stragglers, and for
an arrival-dependent technique also under each straggler model of
``train_under.stragglers`` (``train_under.sizes`` x N x ``train_under.seeds``).

The spec is the whole truth: a job is passed the part of the ``atlas:`` section its results
depend on and no more (:func:`job_config` for a technique's job and the reference,
:func:`map_config` for the map and its figures), and a run spec holds only what its technique
reads (the option sections of :func:`distlab.techniques.catalogue.option_sections`, ``s`` for
the master kind).  So a changed setting reruns exactly the jobs whose results it changes
(``tests/test_atlas_spec.py`` changes each key and dry-runs).
"""

from __future__ import annotations

import itertools
import os

from ..pipeline.workflow import RulesContext
from .profile import DEFAULT_PATH, mode, spec_compute
from .spec import TECHNIQUES, arrival_dependent, option_sections, reads_s

# each technique's natural setting, (section, option): its spec's sweep key
SETTING_KEY = {t: spec.sweep_key for t, spec in TECHNIQUES.items() if spec.sweep_key}


def _sorted(value):
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def config_json(a: dict) -> str:
    """The ``atlas:`` section as the rules pass it: one setting, one text, whatever the order in
    which the configuration files were merged (a rule's params are a rerun trigger), with the
    keys sorted except the straggler axis's, whose order is its order of severity."""
    import json

    out = {k: _sorted(v) for k, v in sorted(a.items())}
    if "straggler_axis" in a:
        out["straggler_axis"] = {k: _sorted(v) for k, v in a["straggler_axis"].items()}
    return json.dumps(out)


def base_spec(a: dict, technique: str, size: str, n: int, seed: int, lr: float, straggler: dict,
              steps: int | None = None, setting: dict | None = None, eval_batches: int | None = None) -> dict:
    """A run spec, with ``s`` and the option sections only where the technique reads them; its
    ``cluster.compute`` is the stored profile's charge for this technique, size
    and N (``atlas.compute: stored``, :mod:`distlab.atlas.profile`) or measured compute."""
    spec = {"experiment": "atlas", "technique": technique, "backend": "simulated", "seed": int(seed),
            "model": dict(size_model(a, size)), "n_workers": int(n), "batch_size": int(a["batch_size"]),
            "lr": float(lr), "steps": int(steps or a["steps"]), "eval_every": int(a["eval_every"]),
            "eval_batches": int(eval_batches or a["eval_batches"]),
            "cluster": {"compute": spec_compute(a, size_model(a, size), int(a["batch_size"]), technique, int(n)),
                        "network": dict(a["cluster"]["network"]), "straggler": dict(straggler)}}
    if reads_s(technique):  # the stragglers the master waits past; a sync technique waits for all
        spec["s"] = int(a["s"])
    for sec in option_sections(technique):  # only the options the technique reads
        spec[sec] = dict(a[sec])
    for sec, val in (setting or {}).items():
        spec[sec] = {**spec[sec], **val}
    if "device" in a:  # the workers' device, where the config names one (config/gpu.yaml)
        spec["device"] = a["device"]
    return spec


def size_model(a: dict, size: str) -> dict:
    """A size's model: ``atlas.sizes`` (the full grid's) or ``atlas.trend.sizes`` (trend cells only)."""
    return {**(a.get("trend") or {}).get("sizes", {}), **a["sizes"]}[size]


def trend_cells(a: dict, technique: str) -> list[tuple[str, int, int]]:
    """(size, N, seed) of the technique's trend cells (``atlas.trend``): every trend size at
    ``size_n`` and ``workers_size`` at every trend N, on ``atlas.seeds``, less the full grid's
    cells (those run anyway)."""
    tr = a.get("trend")
    if not tr or technique not in tr["techniques"]:
        return []
    cells = [(size, int(tr["size_n"]), seed) for size in tr["sizes"] for seed in a["seeds"]]
    cells += [(tr["workers_size"], int(n), seed) for n in tr["n_workers"] for seed in a["seeds"]]
    return [c for c in cells if not (c[0] in a["sizes"] and c[1] in a["n_workers"])]


def sweep_specs(a: dict, technique: str, lrs: list[float] | None = None) -> list[tuple[str, dict]]:
    """(label, spec) of the technique's sweep: lrs (default ``sweep.lrs``) x its natural
    setting's values."""
    sw = a["sweep"]
    out = []
    for lr, setting in itertools.product(sw["lrs"] if lrs is None else lrs, setting_grid(a, technique)):
        label = f"lr{lr:g}" + "".join(f"_{k}{v:g}" for sec in (setting or {}).values() for k, v in sec.items())
        out.append((label, base_spec(a, technique, sw["size"], sw["n_workers"], sw["seed"], lr,
                                     {"model": "none"}, setting=setting)))
    return out


def setting_grid(a: dict, technique: str) -> list[dict | None]:
    """The technique's settings to sweep: ``sweep.settings.<technique>`` is a list of values of its
    natural setting (:data:`SETTING_KEY`), or a mapping of option -> values in its section
    (e.g. DiLoCo's ``{H: [5, 10, 20], outer_lr: [0.3, 0.7, 1.0], outer_momentum: [0.8, 0.9]}``),
    whose product is swept; None: nothing beside the learning rate."""
    key = SETTING_KEY.get(technique)
    values = a["sweep"].get("settings", {}).get(technique) if key else None
    if values is None:
        return [None]
    if isinstance(values, dict):
        names = sorted(values)
        return [{key[0]: dict(zip(names, combo))} for combo in itertools.product(*(values[k] for k in names))]
    return [{key[0]: {key[1]: v}} for v in values]


def widened_lr(lrs: list[float], best: float) -> float | None:
    """The next learning rate beyond the grid's edge when the best one is at that edge
    (one grid ratio further; None inside the grid)."""
    lo, hi = sorted(lrs)[:2], sorted(lrs)[-2:]
    if len(lrs) < 2:
        return None
    if best == hi[1]:
        return hi[1] * hi[1] / hi[0]
    if best == lo[0]:
        return lo[0] * lo[0] / lo[1]
    return None


def run_specs(a: dict, technique: str, lr: float, setting: dict | None) -> list[tuple[str, dict]]:
    """Every size x N x seed with no stragglers (plus ``headline.seeds`` at the headline
    claims' size and N for their techniques, and the technique's :func:`trend_cells`), then the
    arrival-dependent technique's straggler models."""
    cells = list(itertools.product(a["sizes"], a["n_workers"], a["seeds"]))
    hl = a.get("headline")
    if hl and technique in hl["techniques"]:
        cells += [(hl["size"], hl["n_workers"], seed) for seed in hl["seeds"] if seed not in a["seeds"]]
    out = []
    for size, n, seed in cells:
        out.append((f"{size}/n{n}/none/seed{seed}",
                    base_spec(a, technique, size, n, seed, lr, {"model": "none"}, setting=setting)))
    for size, n, seed in trend_cells(a, technique):
        spec = base_spec(a, technique, size, n, seed, lr, {"model": "none"}, setting=setting)
        out.append((f"trend/{size}/n{n}/none/seed{seed}", {**spec, "trend": True}))
    if arrival_dependent(technique):
        tu = a["train_under"]
        for sname, size, n, seed in itertools.product(tu["stragglers"], tu["sizes"], a["n_workers"], tu["seeds"]):
            strag = straggler_for(a["straggler_axis"][sname], n)
            out.append((f"{size}/n{n}/{sname}/seed{seed}",
                        base_spec(a, technique, size, n, seed, lr, strag, setting=setting)))
    return out


def straggler_for(cfg: dict, n: int) -> dict:
    """An axis entry at N workers: ``slow_workers: last`` is the last worker."""
    cfg = dict(cfg)
    if cfg.get("slow_workers") == "last":
        cfg["slow_workers"] = [n - 1]
    return cfg


def reference_specs(a: dict) -> list[tuple[str, dict]]:
    r = a["reference"]
    return [(f"seed{seed}", base_spec(a, "ddp", r["size"], r["n_workers"], seed, r["lr"], {"model": "none"},
                                      steps=r["steps"], eval_batches=r.get("eval_batches")))
            for seed in r["seeds"]]


def _compute_keys(a: dict) -> dict:
    """What decides a run's ``cluster.compute``: ``compute`` (and ``device``), and the stored profile's
    path only where the clock charges it (its file is a declared input: AtlasRules.compute_profile)."""
    out = {"compute": a.get("compute", "stored")}
    if "device" in a:
        out["device"] = a["device"]
    if mode(a) == "stored":
        out["compute_profile"] = a.get("compute_profile", DEFAULT_PATH)
    return out


def job_config(a: dict, job: str) -> dict:
    """The part of the ``atlas:`` section atlas_job ``job`` (``techniques/<name>`` or ``reference``)
    reads, and nothing else: the section its rule passes (``--config``), so that a setting reruns
    the jobs whose runs it changes and no other.  A technique's job reads the sizes, N, seeds and
    horizon of its cells, its sweep (its own ``sweep.settings`` entry only), the headline seeds
    where it is a headline technique, ``s`` and the option sections it reads (the master kind, its
    own sections) and, when its trajectory depends on who arrives first, ``train_under`` and the
    straggler models named there, and its trend cells where it is a trend technique.  The reference
    reads its own section and its size."""
    common = {"batch_size": a["batch_size"], "eval_every": a["eval_every"],
              "cluster": {"network": a["cluster"]["network"]}, **_compute_keys(a)}
    if job == "reference":
        r = a["reference"]
        out = {**common, "reference": r, "sizes": {r["size"]: a["sizes"][r["size"]]}}
        if not r.get("eval_batches"):
            out["eval_batches"] = a["eval_batches"]
        return out
    t = job.rpartition("/")[2]
    sw = a["sweep"]
    sweep = {k: sw[k] for k in ("lrs", "widen", "size", "n_workers", "seed") if k in sw}
    if t in SETTING_KEY and (sw.get("settings") or {}).get(t) is not None:
        sweep["settings"] = {t: sw["settings"][t]}
    out = {**common, "sizes": a["sizes"], "n_workers": a["n_workers"], "seeds": a["seeds"], "steps": a["steps"],
           "eval_batches": a["eval_batches"], "sweep": sweep}
    hl = a.get("headline")
    if hl and t in hl["techniques"]:
        out["headline"] = {"techniques": [t], "size": hl["size"], "n_workers": hl["n_workers"], "seeds": hl["seeds"]}
    tr = a.get("trend")
    if tr and t in tr["techniques"]:  # its trend cells (the efficiency fit's)
        out["trend"] = {**tr, "techniques": [t]}
    if reads_s(t):
        out["s"] = a["s"]
    for sec in option_sections(t):
        out[sec] = a[sec]
    if arrival_dependent(t):
        tu = a["train_under"]
        out["train_under"] = tu
        out["straggler_axis"] = {k: a["straggler_axis"][k] for k in tu["stragglers"]}
    return out


# what the map and its figures read of the section (the runs they map are their input files), and
# of ``extrapolate`` (its ``max_params_ratio`` is the query's)
MAP_KEYS = ("target_loss", "map", "straggler_axis", "batch_size", "sizes", "s", "claims_networks")
MAP_EXTRAPOLATE_KEYS = ("sizes", "workers", "flops_per_s")


def map_config(a: dict) -> dict:
    """The part of the ``atlas:`` section atlas_map reads (the map's grid, target, straggler axis,
    extrapolation, the claims' networks, how compute is charged), and nothing else."""
    return {**{k: a[k] for k in MAP_KEYS}, **_compute_keys(a),
            "extrapolate": {k: a["extrapolate"][k] for k in MAP_EXTRAPOLATE_KEYS}}


def techniques(a: dict) -> list[str]:
    """The section's techniques; one the catalogue does not hold is refused by name, not left out."""
    return [TECHNIQUES[t].name for t in a["techniques"]]


class AtlasRules:
    """workflow/rules/atlas.smk's functions of a job's wildcards, bound to the config's ``atlas:``
    section (``None`` where the config has none: the rules exist, no job asks for them), and to
    the ``context`` every paper's helper is built with (distlab.pipeline.workflow.RulesContext)."""

    def __init__(self, config: dict, context: RulesContext | None = None) -> None:
        ctx = context or RulesContext()
        atlas, out, paper = config.get("atlas"), f"{ctx.results}/atlas", ctx.paper
        self.atlas, self.out = atlas, out
        self._data_manifest, self._floors_table = ctx.data_manifest, ctx.floors_table
        # atlas.in_default_target: the map is part of the default target (make reproduce): the
        # scorecard's atlas section reads its time-to-target table (atlas_map's output ttt), and its
        # figures and winners table join paper/ with the papers' outputs; else neither is registered
        default = bool(atlas and atlas.get("in_default_target"))
        self.summary_tables = {"atlas_ttt": f"{out}/map/ttt.csv"} if default else None
        self.outputs = [*(f"{paper}/figures/atlas_{name}.png"
                          for name in ("winners_bandwidth_straggler", "winners_bandwidth_size", "time_vs_bandwidth")),
                        f"{paper}/tables/atlas_winners.md", *self.query_files] if default else None

    @staticmethod
    def job_pattern() -> str:
        """atlas_job's ``job`` wildcard: a registered technique's job, or the DDP reference."""
        return f"techniques/(?:{TECHNIQUES.pattern()})|reference"

    @property
    def query_files(self) -> list[str]:
        """What the query reads, packed (the snapshot carries it), and the query's benchmark table:
        atlas_query_pack's and atlas_query_bench's outputs (``make reproduce`` puts them in
        paper/atlas/)."""
        return [f"{self.out}/query/pack.json.gz", f"{self.out}/query/bench.csv", f"{self.out}/query/bench.md"]

    def data(self, wildcards) -> str:
        """The atlas's data set (its manifest)."""
        return self._data_manifest(self.atlas["dataset"])

    def compute_profile(self, wildcards) -> list:
        """The stored compute profile, an input where the clock charges it (``atlas.compute:
        stored``), so a new profile reruns the atlas's jobs; nothing under ``measured``."""
        if not self.atlas or self.atlas.get("compute", "stored") != "stored":
            return []
        return [self.atlas.get("compute_profile", "data/atlas/compute_profile.json")]

    def floors(self, wildcards) -> str:
        """The bigram floors of the atlas's data set."""
        return self._floors_table(self.atlas["dataset"])

    def config_json(self, wildcards) -> str:
        """The part of the ``atlas:`` section atlas_job ``wildcards.job`` reads (--config: :func:`job_config`)."""
        return config_json(job_config(self.atlas, wildcards.job))

    def map_config_json(self, wildcards) -> str:
        """The part of the ``atlas:`` section atlas_map reads (--config: :func:`map_config`)."""
        return config_json(map_config(self.atlas))

    def pack_config_json(self, wildcards) -> str:
        """What atlas_query_pack reads of the section: how compute is charged (a measured atlas's
        pack keeps its compute seconds)."""
        return config_json({k: v for k, v in _compute_keys(self.atlas).items() if k != "compute_profile"})

    def query_config_json(self, wildcards) -> str:
        """The ``atlas:`` section but ``bench`` (the settings of ``distlab atlas bench``, which no
        rule runs): the query checks every run it asks for (atlas_query_bench)."""
        return config_json({k: v for k, v in self.atlas.items() if k != "bench"})

    def verb(self, wildcards) -> str:
        """atlas_job's command: ``reference`` or ``technique --technique <name>``."""
        if wildcards.job == "reference":
            return "reference"
        return f"technique --technique {os.path.basename(wildcards.job)}"

    def technique_done(self, wildcards) -> list[str]:
        """Every configured technique's job marker (atlas_map's inputs)."""
        return [f"{self.out}/techniques/{t}/done.json" for t in (self.atlas["techniques"] if self.atlas else [])]

    def map_file(self, wildcards) -> str:
        """The map's figure or table that atlas_paper_copy copies into paper/."""
        return f"{self.out}/{'figures' if wildcards.kind == 'figures' else 'map'}/{wildcards.name}.{wildcards.ext}"
