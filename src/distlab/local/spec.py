"""Local learning's run spec and config checks (torch-free).

``SPEC_SCHEMA`` is the JSON-Schema of a run spec ``distlab train --experiment local``
takes, ``check_spec(spec)`` its cross-field rules (``ValueError`` naming the key);
``check(config)`` returns one ``"key: why"`` string per problem of the ``local_learning:``
config section, which the Snakefile's ``distlab.config.checks.check_config`` runs before any job.
"""

from __future__ import annotations

import math
from typing import Any

CONFIG_SECTION = "local_learning"  # distlab.config.checks.paper_checks finds check() by it

PC_VARIANTS = ("strict", "fixed")  # predictive coding's variants (distlab.local.pc)

_pos_int = {"type": "integer", "minimum": 1}
_pos_num = {"type": "number", "exclusiveMinimum": 0}

SPEC_SCHEMA = {
    "type": "object",
    "additionalProperties": True,
    "properties": {
        "experiment": {"const": "local"},
        "method": {"enum": ["bp", "rc", "pc"]},
        "mode": {"enum": ["sequential", "parallel", "async"]},
        "variant": {"enum": list(PC_VARIANTS)},
        "group": {"type": "string", "pattern": "^[a-z0-9_]+$"},
        "seed": {"type": "integer", "minimum": 0},
        # several seeds in one process (the untimed jobs: one start-up instead of one a seed)
        "seeds": {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1,
                  "uniqueItems": True},
        "model": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"name": {"const": "gpt"}, "n_layer": _pos_int, "n_head": _pos_int,
                           "d_model": _pos_int, "block_size": _pos_int},
            "required": ["n_layer", "n_head", "d_model", "block_size"],
        },
        "batch_size": _pos_int,
        "steps": _pos_int,
        # a number, or the sweep's choice read when the job starts (distlab.local.sweep)
        "lr": {"anyOf": [_pos_num, {"type": "object", "additionalProperties": False, "required": ["sweep", "key"],
                                    "properties": {"sweep": {"type": "string", "minLength": 1},
                                                   "key": {"type": "string", "minLength": 1}}}]},
        # {"<seed>": folder}: the sweep's run of that seed at the chosen lr, picked by the workflow
        "reuse": {"type": "object", "additionalProperties": {"type": "string", "minLength": 1}},
        "lr_warmup": {"type": "integer", "minimum": 0, "maximum": 100000},
        "optimizer": {"enum": ["adamw", "sgd"]},
        "staleness_bound": {"type": "integer", "minimum": 0, "maximum": 1000},
        "heads": {"enum": ["shared", "separate"]},  # separate: the per-section heads ablation
        "feedback": {  # the RC + PC hybrid: PC-style error from above, T iterations
            "type": "object",
            "additionalProperties": False,
            "properties": {"T": {"type": "integer", "minimum": 0, "maximum": 1000},
                           "eta": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                           "gamma": {"type": "number", "minimum": 0}},
            "required": ["T", "eta", "gamma"],
        },
        "betas": {"type": "array", "items": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
                  "minItems": 2, "maxItems": 2},
        "weight_decay": {"type": "number", "minimum": 0},
        "sections": _pos_int,
        "delay": {"type": "integer", "minimum": 0, "maximum": 16},
        "concurrency": {"enum": ["process", "thread"]},
        "worker_threads": _pos_int,
        "threads": _pos_int,
        "warmup_steps": {"type": "integer", "minimum": 0},
        "save_model": {"type": "boolean"},
        "timed": {"type": "boolean"},  # its clock is compared (else: an untimed one-thread run)
        "dataset": {"type": "string"},
        "pc": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"T": _pos_int, "eta": {"type": "number", "exclusiveMinimum": 0,
                                                  "maximum": 1},
                           "beta": _pos_num},
            "required": ["T", "eta", "beta"],
        },
        "eval_every": _pos_int,
        "eval": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"batches": _pos_int, "batch_size": _pos_int, "final_batches": _pos_int},
            "required": ["batches", "batch_size", "final_batches"],
        },
    },
    "required": ["experiment", "method", "model", "batch_size", "steps", "lr",
                 "eval_every", "eval"],
    "oneOf": [{"required": ["seed"]}, {"required": ["seeds"]}],
    "allOf": [
        {"if": {"properties": {"method": {"const": "rc"}}},
         "then": {"required": ["mode", "sections", "delay"]}},
        {"if": {"properties": {"method": {"const": "pc"}}},
         "then": {"required": ["variant", "pc"]}},
    ],
}


def check_spec(spec: dict) -> None:
    """Cross-field checks the schema cannot express; ``ValueError`` naming the key."""
    m = spec["model"]
    if m["d_model"] % m["n_head"]:
        raise ValueError(f"model.d_model: {m['d_model']} is not divisible by model.n_head = {m['n_head']}")
    if "sections" in spec and m["n_layer"] % spec["sections"]:
        raise ValueError(f"sections: {spec['sections']} does not divide model.n_layer = {m['n_layer']}")
    if "feedback" in spec and (spec["method"] != "rc" or spec.get("mode") != "sequential"
                               or int(spec.get("delay", 0)) != 0):
        raise ValueError("feedback: the RC + PC hybrid is sequential RC with delay 0")
    if spec.get("heads", "shared") == "separate" and spec.get("mode") != "sequential":
        raise ValueError("heads: separate heads (the ablation) run in the sequential mode")
    for key in ("lr", "weight_decay"):
        if key in spec and not math.isfinite(float(spec[key])):
            raise ValueError(f"{key}: must be finite, got {spec[key]}")


S = "local_learning"


def _model(out: list[str], key: str, m: dict) -> None:
    if not isinstance(m, dict):
        return
    d, h = m.get("d_model"), m.get("n_head")
    if isinstance(d, int) and isinstance(h, int) and h > 0 and d % h:
        out.append(f"{key}.n_head: {h} does not divide {key}.d_model = {d}")


def check(config: dict[str, Any]) -> list[str]:
    c = config.get(S)
    if not isinstance(c, dict):
        return []
    out: list[str] = []
    datasets = config.get("datasets") or {}
    name = c.get("dataset")
    if name not in datasets:
        out.append(f"{S}.dataset: {name!r} is not configured under datasets (configured: {sorted(datasets)})")
    elif datasets[name].get("kind") != "text":
        out.append(f"{S}.dataset: {name!r} is a {datasets[name].get('kind')!r} data set; "
                   "the GPT needs a text data set")
    steps = c.get("steps", 0)
    if isinstance(c.get("warmup_steps"), int) and c["warmup_steps"] >= steps:
        out.append(f"{S}.warmup_steps: {c['warmup_steps']} leaves no timed step of the {steps} steps")
    rc, pc, bench = c.get("rc") or {}, c.get("pc") or {}, c.get("bench") or {}
    for key, group in ((f"{S}.rc", rc), (f"{S}.pc", pc)):
        _model(out, f"{key}.model", group.get("model"))
        if "bp" not in (group.get("methods") or []):
            out.append(f"{key}.methods: must include bp (every method is tested against it)")
    _model(out, f"{S}.bench.model", bench.get("model"))
    n_layer = (rc.get("model") or {}).get("n_layer")
    k = rc.get("sections")
    if isinstance(n_layer, int) and isinstance(k, int) and k > 0 and n_layer % k:
        out.append(f"{S}.rc.sections: {k} sections do not divide rc.model.n_layer = {n_layer}")
    bl = (bench.get("model") or {}).get("n_layer")
    if isinstance(bl, int) and isinstance(k, int) and k > 0 and bl % k:
        out.append(f"{S}.rc.sections: {k} sections do not divide bench.model.n_layer = {bl}")
    if isinstance(steps, int) and isinstance(k, int) and isinstance(rc.get("delay"), int) \
            and (k - 1) * rc["delay"] >= steps:
        out.append(f"{S}.rc.delay: with {k} sections the last one would start after all {steps} steps")
    for m in (m for m in pc.get("methods") or [] if m.startswith("pc-")):
        v = m.split("-")[1]
        if v not in (pc.get("variants") or {}):
            out.append(f"{S}.pc.variants.{v}: method {m} is configured but has no settings (eta, beta)")
    pl = (pc.get("model") or {}).get("n_layer")
    T = pc.get("T")
    if isinstance(pl, int) and isinstance(T, int):
        methods = pc.get("methods") or []
        if "pc-fixed" in methods and T < pl + 1:
            out.append(f"{S}.pc.methods: pc-fixed at T = {T} < n_layer + 1 = {pl + 1} is truncated "
                       "(the lowest layers get no error): name it pc-fixed-trunc")
        if "pc-fixed-trunc" in methods and T >= pl + 1:
            out.append(f"{S}.pc.methods: pc-fixed-trunc at T = {T} >= n_layer + 1 = {pl + 1} is not "
                       "truncated (it equals BP): name it pc-fixed")
    hybrid = rc.get("hybrid") or {}
    extra_h = sorted(set(hybrid.get("seeds") or []) - set(config.get("seeds") or []))
    if extra_h:
        out.append(f"{S}.rc.hybrid.seeds: {extra_h} are not among the configured seeds")
    par = rc.get("parallel_seeds") or []
    extra = sorted(set(par) - set(config.get("seeds") or []))
    if extra:
        out.append(f"{S}.rc.parallel_seeds: {extra} are not among the configured seeds")
    methods = bench.get("methods") or []
    if "bp" not in methods or not ({"rc-par", "rc-thread", "rc-async"} & set(methods)):
        out.append(f"{S}.bench.methods: must include bp and a parallel RC (rc-par, rc-async or rc-thread)")
    grid = bench.get("map") or {}
    if grid and "bp" not in (grid.get("methods") or []):
        out.append(f"{S}.bench.map.methods: must include bp (every ratio is to BP's)")
    for kk in grid.get("sections") or []:
        if isinstance(bl, int) and isinstance(kk, int) and kk > 0 and bl % kk:
            out.append(f"{S}.bench.map.sections: {kk} sections do not divide bench.model.n_layer = {bl}")
    hd = (bench.get("model") or {}).get("n_head")
    for dd in grid.get("d_model") or []:
        if isinstance(hd, int) and isinstance(dd, int) and hd > 0 and dd % hd:
            out.append(f"{S}.bench.map.d_model: {dd} is not divisible by bench.model.n_head = {hd}")
    if "rc-par" in (rc.get("methods") or []) and rc.get("concurrency") == "thread" and "rc-thread" not in methods:
        out.append(f"{S}.bench.methods: rc.concurrency is thread, so the benchmark needs rc-thread")
    for key, m in ((f"{S}.rc.model", rc.get("model")), (f"{S}.pc.model", pc.get("model")),
                   (f"{S}.bench.model", bench.get("model"))):
        if isinstance(m, dict) and isinstance(m.get("block_size"), int) and m["block_size"] > 4096:
            out.append(f"{key}.block_size: {m['block_size']} is beyond what this CPU study supports (4096)")
    from .workflow import sweep_problems  # the lr sweep's rules (torch-free)

    out += sweep_problems(c, list(config.get("seeds") or []))
    return out
