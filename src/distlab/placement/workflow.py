"""Workflow helpers of workflow/rules/placement.smk (torch-free): which runs
exist, the JSON spec of each, and the outputs of the ``placement`` target."""

from __future__ import annotations

import json
from typing import Any

from ..clihelp import as_json
from ..pipeline.extra_seeds import for_setting
from ..pipeline.workflow import RulesContext


def models(pl: dict) -> list[str]:
    """The models that run (``run_models``; a list, so an overlay config replaces it)."""
    return list(pl.get("run_models") or pl["models"])


def pairs(pl: dict) -> list[str]:
    return list(pl.get("run_pairs") or pl["pairs"])


LEARNERS = {"rnn": "rnn", "placeto": "placeto", "hsdag": "hsdag", "hsdag_corrected": "hsdag",
            "hsdag_fine": "hsdag", "hsdag_steady": "hsdag"}
DETERMINISTIC = ("cpu_only", "gpu_only", "heft", "optimum")
# ablations that change a learner's options rather than drop a feature
ABLATION_OPTIONS = {"weightless": {"partition": "coarsen_weightless"}, "no_pooling": {"pooling": False}}
SCENARIOS = {"serial": "serial", "rank": "concurrent", "topological": "concurrent (topological queues)",
             "ready": "concurrent (ready queues)"}


def pair_order(pl: dict, pair: str) -> str:
    """A pair's simulator order: its own ``sim_order`` or the section's."""
    return str(pl["pairs"][pair].get("sim_order", pl.get("sim_order", "topological")))


def scenario(order: str) -> str:
    """The timing scenario an order stands for: ``serial`` (the paper's HETERO timing, devices
    one after another) or ``concurrent`` (both devices at once, HEFT's schedule)."""
    return SCENARIOS.get(order, order)
CONTROL = "_const"          # <learner>_const: the same learner fed a constant reward


def all_methods(pl: dict) -> list[str]:
    """The methods, each learner's constant-reward control beside it, and the ablations of
    ``ablation_of`` (``<ablation_of>_<ablation>``), in the order of the config."""
    out = []
    for m in pl["methods"]:
        out.append(m)
        if m in (pl.get("controls") or []):
            out.append(m + CONTROL)
    return out


def ablation_methods(pl: dict) -> list[str]:
    base = pl.get("ablation_of", "hsdag")
    return [f"{base}_{a}" for a in (pl.get("ablations") or [])]


def method_info(pl: dict, method: str) -> dict[str, Any]:
    """What a method runs: ``{"algo", "options", "reward", "drop_features"}``; only its own
    learner's options, so a learner's setting reruns only that learner's runs."""
    if method in DETERMINISTIC:
        return {"algo": method}
    if method == "random":
        return {"algo": "random", "options": {"batch": 100}}
    reward, base = "latency", method
    if method.endswith(CONTROL) and method[: -len(CONTROL)] in LEARNERS:
        reward, base = "constant", method[: -len(CONTROL)]
    drop: list[str] = []
    extra: dict[str, Any] = {}
    if base not in LEARNERS:
        abl = pl.get("ablation_of", "hsdag")
        tail = base[len(abl) + 1:]
        if not base.startswith(abl + "_") or tail not in (pl.get("ablations") or []):
            raise ValueError(f"placement: unknown method {method!r}")
        if tail in ABLATION_OPTIONS:
            base, extra = abl, dict(ABLATION_OPTIONS[tail])
        else:
            base, drop = abl, [tail[3:] if tail.startswith("no_") else tail]
    return {"algo": LEARNERS[base], "options": {**dict(pl[base]), **extra}, "reward": reward,
            "drop_features": drop}


def pair_methods(pl: dict, pair: str) -> list[str]:
    """The methods of one pair: all of them (with controls and ablations) on the default pair;
    on the others, those of ``other_pair_methods`` (default: all) with their controls."""
    serial = pair_order(pl, pair) == "serial"
    if pair == pl["default_pair"]:
        out = all_methods(pl) + ablation_methods(pl)
    else:
        keep = set(pl["pairs"][pair].get("methods") or pl.get("other_pair_methods") or pl["methods"])
        out = [m for m in all_methods(pl) if (m[: -len(CONTROL)] if m.endswith(CONTROL) else m) in keep]
    # the exact optimum exists under serial timing only (a min cut); it is every serial pair's reference
    out = [m for m in out if m != "optimum"]
    return (out + ["optimum"]) if serial and len(pl["pairs"][pair]["devices"]) == 2 else out


def extra_seeds(pl: dict, reqs: list, pair: str, model: str, method: str) -> list[int]:
    """The seeds ``stats.extra_seeds`` adds to one run (``distlab.pipeline.extra_seeds.requests``),
    after the configured ``placement.seeds``."""
    return for_setting(reqs, [int(k) for k in pl["seeds"]], "placement",
                       {"pair": pair, "model": model, "method": method})


def all_extra_seeds(pl: dict, reqs: list) -> list[int]:
    """Every extra seed of any run (the extra-seed rule's wildcard values)."""
    return sorted({k for pair in pairs(pl) for model in models(pl) for m in pair_methods(pl, pair)
                   for k in extra_seeds(pl, reqs, pair, model, m)})


def runs(pl: dict, root: str, reqs: list | None = None) -> list[str]:
    """Every run file: the methods of each pair (``pair_methods``) on every model, then one
    file for each extra seed that ``stats.extra_seeds`` asks of a run (``extra/``: jobs of
    their own, so no configured run changes)."""
    out, extra = [], []
    for pair in pairs(pl):
        for model in models(pl):
            methods = pair_methods(pl, pair)
            out += [f"{root}/runs/{pair}/{model}/{m}.json" for m in methods]
            extra += [f"{root}/extra/{pair}/{model}/{m}/seed{k}.json"
                      for m in methods for k in extra_seeds(pl, reqs or [], pair, model, m)]
    return out + extra


PAIR_NOT_IN_SPEC = ("description", "methods")


def pair_spec(pl: dict, pair: str) -> dict:
    """A pair's settings as its jobs' specs carry them: its devices, link and order, without
    its ``description`` (text for the tables) and ``methods`` (which runs the pair has, not
    what one of them computes: no run reads another's), so editing either reruns no run."""
    return {k: v for k, v in pl["pairs"][pair].items() if k not in PAIR_NOT_IN_SPEC}


def run_spec(pl: dict, pair: str, model: str, method: str, seeds: list[int] | None = None,
             graph: str | None = None, profile: str | None = None) -> str:
    """One run's JSON spec: every configured seed, or ``seeds`` (an extra seed's job).  A
    seed's numbers do not depend on the other seeds of its run.  With ``graph`` and
    ``profile`` (the rule's input files) it is the spec of ``distlab train --experiment
    placement``: they go in as ``inputs``, which the run does not record."""
    info = method_info(pl, method)
    seeds = list(pl["seeds"]) if seeds is None else [int(k) for k in seeds]
    spec = {"method": method, **info, "pair_name": pair, "pair": pair_spec(pl, pair), "seeds": seeds,
            "model_name": model, "model": pl["models"][model], "sim_order": pair_order(pl, pair)}
    if method not in DETERMINISTIC:  # one evaluation decides a deterministic method: no budget
        spec.update(budget=int(pl["budget"]), single_device=pl["single_device"])
    if graph is not None or profile is not None:
        spec["inputs"] = {"graph": str(graph), "profile": str(profile)}
    return as_json(spec)


def graph_path(root: str, model: str = "{pl_model}") -> str:
    """A model's operator graph (rule placement_graph; by default the pattern of its wildcard)."""
    return f"{root}/graphs/{model}.json"


def profile_path(pl: dict, root: str, model: str, pair: str | None = None) -> str:
    """The profile the simulated runs score with: a pair's own measured profile (``profile_dir``
    of the pair, e.g. ``data/placement/h200``: both devices measured on one host), a stored one
    (``profile.source: stored``, ``data/placement/profiles/<model>.json``, versioned with the
    code) or this run's measurement."""
    own = (pl["pairs"].get(pair) or {}).get("profile_dir") if pair else None
    if own:
        return f"{own}/{model}.json"
    if pl["profile"].get("source", "measured") == "stored":
        return f"data/placement/profiles/{model}.json"
    return f"{root}/profiles/{model}.json"


def profile_spec(pl: dict, model: str) -> str:
    cuda = any(d.get("measure_on_cuda", False) for pr in pl["pairs"].values() for d in pr["devices"])
    prof = {k: v for k, v in pl["profile"].items() if k != "source"}
    return as_json({"model": pl["models"][model], **prof, "cuda": cuda})


def options(pl: dict) -> str:
    return as_json({"methods": all_methods(pl) + ["optimum"], "learners": [m for m in pl["methods"] if m in LEARNERS],
                    "controls": list(pl.get("controls") or []), "ablations": ablation_methods(pl),
                    "ablation_of": pl.get("ablation_of", "hsdag"), "default_pair": pl["default_pair"]})


def tables(paper: str) -> dict[str, list[str]]:
    main = [f"{paper}/tables/placement_{t}.{ext}"
            for t in ("main", "graphs", "convergence", "headline", "learning", "optimum") for ext in ("csv", "md")]
    return {"main": main,
            "ablation": [f"{paper}/tables/placement_ablation.{ext}" for ext in ("csv", "md")],
            "real": [f"{paper}/tables/placement_sim_error.{ext}" for ext in ("csv", "md")],
            "figures": [f"{paper}/figures/placement_curves.png", f"{paper}/figures/placement_learned.png"]}


def outputs(pl: dict, paper: str) -> list[str]:
    t = tables(paper)
    out = t["main"] + t["figures"]
    if pl.get("ablations"):
        out += t["ablation"]
    if pl.get("real", {}).get("enabled", False) and pl["real"]["models"]:
        out += t["real"]
    return out


def space_learners(pl: dict) -> list[str]:
    """The learners whose search space the space table checks: the configured
    learners and the ablated variant, without their controls."""
    return [m for m in pl["methods"] if m in LEARNERS]


def space_spec(pl: dict) -> str:
    pair = pl["default_pair"]
    return as_json({"pair": pair_spec(pl, pair), "pair_name": pair, "sim_order": pair_order(pl, pair),
                    "learners": space_learners(pl)})


def space_runs(pl: dict, root: str) -> list[str]:
    """The run files the space table reads: the default pair's baselines and learners."""
    pair = pl["default_pair"]
    keep = [m for m in ("cpu_only", "gpu_only", "heft", "random") if m in pl["methods"]] + space_learners(pl)
    return [f"{root}/runs/{pair}/{model}/{m}.json" for model in models(pl) for m in keep]


# the claim whose margin carries the paper's headline speedup (config/claims.yaml)
HEADLINE_CLAIM = "placement.inception_v3.hsdag_corrected.speedup_58pct"


def paper_speedup_pct(claims_path: str) -> float:
    """The paper's headline speedup over CPU-only, in %, from its claim's relative margin
    (s >= x <=> HSDAG <= CPU / (1 + x), a margin of 1 - 1 / (1 + x)): the figure's reference line
    reads the claims file rather than a copy of the paper's number."""
    import yaml

    with open(claims_path, encoding="utf-8") as f:
        rows = yaml.safe_load(f)["claims"]
    margin = next(float(c["margin"]) for c in rows if c["id"] == HEADLINE_CLAIM)
    return round(100.0 * (1.0 / (1.0 - margin) - 1.0), 1)


class PlacementRules:
    """workflow/rules/placement.smk's functions of a job's wildcards, bound to the config's
    ``placement:`` section (empty where the config has none), the runs' folder ``root`` and the
    ``context`` every paper's helper is built with (its ``partition_for_gpus`` names a job's batch
    partition; distlab.pipeline.workflow.RulesContext)."""

    def __init__(self, config: dict, context: RulesContext | None = None) -> None:
        ctx = context or RulesContext()
        pl, root, paper = config.get("placement", {}), f"{ctx.results}/placement", ctx.paper
        self.pl, self.root, self._partition_for_gpus = pl, root, ctx.partition_for_gpus
        self.tables = tables(paper)  # main, ablation, real, figures
        self.options = options(pl) if pl else "{}"
        self.pic_model = models(pl)[0] if pl else ""  # the model of the learned-placement figure
        self.report = "Device placement (HSDAG)"  # the report's category of P2's figures
        # what a simulated run on one model reads (placement_run, placement_bench_sim): its graph
        # and the profile it scores with (stored, or this run's measurement)
        self.scored = {"graph": graph_path(root), "profile": self.scored_profile}
        # the scorecard's tables and the paper's outputs: the runs' summary, the fair comparison
        # (can each learner's search space express HEFT's placement?) and the regime (where
        # does a mixed placement pay?); none without a placement section
        self.summary_tables = {"placement": f"{root}/summary.csv", "placement_space": f"{root}/space.csv",
                               "placement_regime": f"{root}/regime.csv"} if pl else None
        self.outputs = [*outputs(pl, paper), f"{paper}/tables/placement_space.md",
                        f"{paper}/tables/placement_regime.md", f"{paper}/figures/placement_regime.png"] if pl else None

    def scored_profile(self, w) -> str:
        """The profile a simulated run on the ``pl_model`` wildcard's model scores with (its pair's)."""
        return profile_path(self.pl, self.root, w.pl_model, getattr(w, "pair", None))

    def model_spec(self, w) -> str:
        """placement_graph's spec: the model's config."""
        return as_json(self.pl["models"][w.pl_model])

    def profile_spec(self, w) -> str:
        """placement_profile's spec."""
        return profile_spec(self.pl, w.pl_model)

    def profile_gpus(self, w) -> int:
        """A roofline device with measure_on_cuda is profiled on one GPU."""
        return int(json.loads(profile_spec(self.pl, w.pl_model))["cuda"])

    def profile_partition(self, w) -> str:
        return self._partition_for_gpus(json.loads(profile_spec(self.pl, w.pl_model))["cuda"])

    def run_spec(self, w) -> str:
        """placement_run's spec: a function of the wildcards only (Snakemake compares a params
        function that reads ``input`` only when the job runs, so a learner's setting would not
        rerun its runs); it names the graph and the profile the run scores with."""
        return run_spec(self.pl, w.pair, w.pl_model, w.pl_method, graph=graph_path(self.root, w.pl_model),
                        profile=profile_path(self.pl, self.root, w.pl_model, w.pair))

    def extra_run_spec(self, w) -> str:
        """placement_run_extra's spec: the run's spec at the one extra seed of the ``seed`` wildcard."""
        return run_spec(self.pl, w.pair, w.pl_model, w.pl_method, seeds=[int(w.seed)],
                        graph=graph_path(self.root, w.pl_model),
                        profile=profile_path(self.pl, self.root, w.pl_model, w.pair))

    @staticmethod
    def learned_inputs(w, input) -> str:
        """placement_fig_placement's --inputs: the run and its graph."""
        return as_json({"run": input.run, "graph": input.graph})

    @staticmethod
    def learned_options(w, input) -> str:
        """placement_fig_placement's --options: the profile the run scored with."""
        return as_json({"profile": input.profile})

    def real_runs(self, w) -> list[str]:
        """placement_real's inputs: every method's run on the model, default pair."""
        pl = self.pl
        return [f"{self.root}/runs/{pl['default_pair']}/{w.pl_model}/{m}.json" for m in pl["methods"]]

    def real_spec(self, w) -> str:
        pl = self.pl
        return as_json({"model": pl["models"][w.pl_model], "model_name": w.pl_model,
                        "repeats": pl["real"]["repeats"], "warmup": pl["real"]["warmup"]})

    def bench_spec(self, w) -> str:
        pl = self.pl
        return as_json({"pair": pair_spec(pl, pl["default_pair"]), "model_name": w.pl_model, **pl.get("bench", {})})
