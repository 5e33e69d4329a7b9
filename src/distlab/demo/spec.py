"""DeMo's run spec and config checks (torch-free).

``SPEC_SCHEMA`` is the JSON-Schema of a run spec ``distlab train --experiment demo`` takes,
``check_spec(spec)`` its cross-field rules (a :class:`distlab.config.specs.SpecError` naming the
key); ``check(config)`` returns one ``"key: why"`` string per problem of the ``demo:``
config section, which the Snakefile's ``distlab.config.checks.check_config`` runs before any job.

The methods are the registry :data:`distlab.techniques.catalogue.METHODS` (each one's option
sections, label, order and builder); their options' defaults, bounds and the rule between
DeMo's are :mod:`distlab.techniques.options`.
"""

from __future__ import annotations

from typing import Any

from ..config import specs
from ..techniques.catalogue import METHODS
from ..techniques.options import SECTIONS, demo_errors, section_schema, value

CONFIG_SECTION = "demo"  # the ConfigCheck protocol (distlab.pipeline.paper): the section check() reads


SPEC_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["experiment", "method", "backend", "model", "n_workers", "batch_size", "lr",
                 "steps"],  # and, on the simulated backend, "cluster" (check_spec)
    # one seed, or (simulated backend) a list run one after another in this process
    "oneOf": [{"required": ["seed"]}, {"required": ["seeds"]}],
    "properties": {
        "experiment": {"const": "demo"},
        "method": {"enum": list(METHODS)},
        "backend": specs.BACKEND,
        "seed": specs.NONNEG_INT,
        "seeds": {"type": "array", "items": specs.NONNEG_INT, "minItems": 1, "uniqueItems": True},
        "device": {"enum": ["auto", "cpu", "cuda"]},   # simulated: distlab.runtime.device; absent: auto
        "model": {
            "type": "object", "required": ["name"], "additionalProperties": False,
            "properties": {"name": {"enum": ["gpt", "olmo"]}, "n_layer": specs.POS_INT,
                           "d_model": specs.POS_INT, "n_head": specs.POS_INT,
                           "block_size": specs.POS_INT, "mlp_ratio": specs.POS_INT},
        },
        "n_workers": specs.POS_INT,
        "batch_size": specs.POS_INT,
        "lr": {"oneOf": [specs.POS_NUM, {
            "type": "object", "additionalProperties": False, "required": ["sweep", "method"],
            "properties": {"sweep": {"type": "string", "minLength": 1}, "method": {"enum": list(METHODS)}}}]},
        "lr_chosen_by": {"type": "string"},
        # {"<seed>": folder}: the sweep's run of that seed at the chosen lr, picked by the workflow
        # (rule demo_table_sweep); taken instead of trained again when its spec is this one's but for
        # where the lr came from (the same computation: distlab.results.sweeps)
        "reuse": {"type": "object", "additionalProperties": {"type": "string", "minLength": 1}},
        "steps": specs.POS_INT,
        "eval_every": specs.POS_INT,
        "eval_batches": specs.POS_INT,
        "dtype": specs.DTYPE,
        **{section: section_schema(section) for section in SECTIONS},
        "cluster": specs.CLUSTER,
    },
}


def nprocs(spec: dict) -> int:
    return int(spec["n_workers"])


def check_spec(spec: dict) -> None:
    """Cross-field rules the schema cannot state; raise SpecError naming the key."""
    if spec["backend"] != "simulated" and "seeds" in spec:
        raise specs.SpecError("demo spec: key 'seeds': a list of seeds runs only on the simulated backend")
    if spec["backend"] != "simulated" and "reuse" in spec:
        raise specs.SpecError("demo spec: key 'reuse': only simulated runs are taken from the sweep")
    if spec["backend"] == "simulated" and "cluster" not in spec:
        raise specs.SpecError("demo spec: key 'cluster': a simulated run needs its cluster (compute, network)")
    if spec["method"] == "diloco" and spec["steps"] % int(value(spec, "diloco", "H")):
        raise specs.SpecError("demo spec: key 'diloco.H': steps must be a multiple of H, so the run "
                              "ends on a synchronisation")
    for key, why in demo_errors(spec.get("demo") or {}):
        raise specs.SpecError(f"demo spec: key 'demo.{key}': {why}")
    if "n_head" in spec["model"] and spec["model"].get("d_model", 128) % spec["model"]["n_head"]:
        raise specs.SpecError("demo spec: key 'model.n_head': must divide model.d_model")


def _divides(n: int, h: int) -> bool:
    return h > 0 and n % h == 0


def check(config: dict[str, Any]) -> list[str]:
    d = config.get("demo")
    if not isinstance(d, dict):
        return []
    out: list[str] = []
    datasets = config.get("datasets", {}) or {}
    name = d.get("dataset")
    if name not in datasets:
        out.append(f"demo.dataset: {name!r} is not configured under datasets")
    elif datasets[name].get("kind") != "text":
        out.append(f"demo.dataset: {name!r} is a {datasets[name].get('kind')} data set; DeMo trains a language model on text")
    lr = d.get("lr", {}) or {}
    sweep = d.get("sweep", {}) or {}
    real = d.get("real", {}) or {}
    more = d.get("more_workers") or {}
    needed = set(d.get("methods", [])) | set(more.get("methods", []))
    if real.get("enabled"):
        needed |= set(real.get("methods", []))
    for m in sorted(needed):
        if m not in lr:
            out.append(f"demo.lr.{m}: method {m!r} is configured but has no learning rate")
    follows = d.get("lr_follows") or {}
    if d.get("lr_from_sweep"):
        for m in sorted(needed):
            leader = follows.get(m, m)
            if leader not in sweep.get("methods", []):
                out.append(f"demo.sweep.methods: {m!r} takes the sweep's choice for {leader!r} "
                           f"(demo.lr_from_sweep), which the sweep does not run")
    if d.get("lr_from_sweep") and not sweep.get("share_seeds"):
        # the lr is chosen on seeds the comparison does not use (a choice made on the compared runs
        # favours the chosen lr on exactly those runs); share_seeds: the tiny test config's mechanics
        compared = {int(k) for k in config.get("seeds") or []} | (
            {int(k) for k in real.get("seeds") or []} if real.get("enabled") else set())
        shared = sorted(compared & {int(k) for k in sweep.get("seeds") or []})
        if shared:
            out.append(f"demo.sweep.seeds: {shared} are also the comparison's seeds (seeds, demo.real.seeds); "
                       f"the lr would be chosen on the runs it is compared on: give the sweep other seeds")
    for m in sorted(sweep.get("lrs_extra") or {}):
        if m not in sweep.get("methods", []):
            out.append(f"demo.sweep.lrs_extra.{m}: the sweep does not run {m!r} (demo.sweep.methods)")
    for f, leader in follows.items():
        if leader in follows:
            out.append(f"demo.lr_follows.{f}: follows {leader!r}, itself a follower (one level only)")
    model = d.get("model", {}) or {}
    if model.get("d_model", 128) % model.get("n_head", 4):
        out.append("demo.model.n_head: must divide demo.model.d_model")
    H = (d.get("diloco") or {}).get("H")
    H = 1 if H is None else H  # absent: the schema names it; no sync for a run to end on
    for key, steps, methods in (("demo.steps", d.get("steps", 0), d.get("methods", []) + more.get("methods", [])),
                                ("demo.sweep.steps", sweep.get("steps", 0), sweep.get("methods", [])),
                                ("demo.real.steps", real.get("steps", 0),
                                 real.get("methods", []) if real.get("enabled") else [])):
        if "diloco" in methods and not _divides(int(steps), int(H)):
            out.append(f"{key}: DiLoCo synchronises every demo.diloco.H = {H} steps; the run must end on "
                       f"a synchronisation (steps a multiple of H)")
    out += [f"demo.demo.{key}: {why}" for key, why in demo_errors(d.get("demo") or {})]
    every = d.get("eval_every", 1)
    if d.get("steps", 0) and every > d.get("steps", 0):
        out.append("demo.eval_every: larger than demo.steps (the run would evaluate only at the start and end)")
    for name, net in (d.get("networks") or {}).items():
        if not isinstance(net, dict):
            out.append(f"demo.networks.{name}: must be a mapping")
    if len(d.get("networks") or {}) < 2:
        out.append("demo.networks: give two networks (the loss-vs-time figure compares them)")
    return out
