"""Cross-field checks of the ``placement:`` config section (torch-free), and the schema of
one search job's spec (``distlab train --experiment placement``).

``check(config) -> list of "key: why"``; called by ``distlab.config.checks``
before any job runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

CONFIG_SECTION = "placement"  # distlab.config.checks.paper_checks finds check() by it

ALGOS = ("cpu_only", "gpu_only", "random", "heft", "optimum", "rnn", "placeto", "hsdag")

_OBJECT = {"type": "object"}  # model, pair and a learner's options: checked by check() and their code
_STR = {"type": "string"}
_INT = {"type": "integer", "minimum": 0}

# One search job (workflow.run_spec), plus ``inputs``: the operator graph and the profile it
# scores with.  Those are files, not settings: placement.train.run_simulated takes them out
# before the search, so they reach neither the run's record nor its checkpoint's spec hash.
SPEC_SCHEMA: dict = {
    "type": "object",
    "additionalProperties": False,
    "required": ["algo", "method", "model", "model_name", "pair", "pair_name", "seeds", "inputs"],
    "properties": {
        "algo": {"enum": list(ALGOS)},
        "method": _STR,
        "model": {**_OBJECT, "required": ["name"]},
        "model_name": _STR,
        "pair": {**_OBJECT, "required": ["devices"]},
        "pair_name": _STR,
        "seeds": {"type": "array", "items": _INT, "minItems": 1},
        "sim_order": _STR,
        "budget": {"type": "integer", "minimum": 1},
        "single_device": {"enum": ["allow", "invalid"]},
        "options": _OBJECT,
        "reward": {"enum": ["latency", "constant"]},
        "drop_features": {"type": "array", "items": _STR},
        "inputs": {"type": "object", "additionalProperties": False, "required": ["graph", "profile"],
                   "properties": {"graph": _STR, "profile": _STR}},
    },
}


def _pair_errors(p: Mapping[str, Any], pairs: Mapping[str, Any]) -> list[str]:
    """The device pairs: a profiled host first, named devices, each kind's own keys, finite
    numbers, known methods, and a measured CUDA device's profiles."""
    errs: list[str] = []
    for name, pair in pairs.items():
        devs = pair.get("devices") or []
        if devs and devs[0].get("kind") != "profiled":
            errs.append(f"placement.pairs.{name}.devices[0]: the host (device 0) must be kind profiled "
                        "(this machine's measured CPU times)")
        names = [d.get("name") for d in devs]
        if len(set(names)) != len(names):
            errs.append(f"placement.pairs.{name}.devices: duplicate device names {names}")
        for i, d in enumerate(devs):
            where = f"placement.pairs.{name}.devices[{i}]"
            if d.get("kind") == "roofline":
                for key in ("peak_gflops", "mem_gbps"):
                    if key not in d:
                        errs.append(f"{where}.{key}: a roofline device needs it")
            elif d.get("kind") == "profiled":
                for key in ("peak_gflops", "mem_gbps", "launch_us", "efficiency", "default_efficiency",
                            "measure_on_cuda"):
                    if key in d:
                        errs.append(f"{where}.{key}: only applies to kind roofline")
            for key in ("peak_gflops", "mem_gbps", "launch_us", "scale"):
                v = d.get(key)
                if isinstance(v, float) and not math.isfinite(v):
                    errs.append(f"{where}.{key}: must be finite, got {v}")
    for name, pair in pairs.items():
        for m in pair.get("methods") or []:
            if m not in (p.get("methods") or []):
                errs.append(f"placement.pairs.{name}.methods: {m!r} is not in placement.methods")
        devs = pair.get("devices") or []
        if any(d.get("kind") == "measured_cuda" for d in devs) and not pair.get("profile_dir"):
            errs.append(f"placement.pairs.{name}.profile_dir: a measured_cuda device needs the pair's own "
                        "measured profiles (seconds and cuda_seconds of one host)")
    return errs


def _method_errors(p: Mapping[str, Any], methods: list, pairs: Mapping[str, Any]) -> list[str]:
    """The methods: the CPU-only reference, the ablation's, the other pair's and the controls'
    methods among them, each learned method's options within the budget, GPU-only's second device."""
    errs: list[str] = []
    if "cpu_only" not in methods:
        errs.append("placement.methods: cpu_only is needed (speedups are against it)")
    base = p.get("ablation_of", "hsdag")
    if p.get("ablations") and base not in methods:
        errs.append(f"placement.ablation_of: {base!r} must be in placement.methods to compare against")
    for m in p.get("other_pair_methods") or []:
        if m not in methods:
            errs.append(f"placement.other_pair_methods: {m!r} is not in placement.methods")
    for c in p.get("controls") or []:
        if c not in methods:
            errs.append(f"placement.controls: {c!r} is not in placement.methods")
    for v in ("hsdag", "hsdag_corrected", "hsdag_fine"):
        if v in methods and not isinstance(p.get(v), Mapping):
            errs.append(f"placement.{v}: method {v} needs its options")
    budget = p.get("budget")
    if isinstance(budget, int):
        for v in ("hsdag", "hsdag_corrected", "hsdag_fine", "rnn"):
            opts = p.get(v)
            if v in methods and isinstance(opts, Mapping) and isinstance(opts.get("samples"), int) \
                    and opts["samples"] > budget:
                errs.append(f"placement.{v}.samples: {opts['samples']} is more than the budget {budget}")
    if "gpu_only" in methods and any(len(pr.get("devices") or []) < 2 for pr in pairs.values()):
        errs.append("placement.methods: gpu_only needs a second device in every pair")
    return errs


def _model_errors(models: Mapping[str, Any]) -> list[str]:
    """The models' shapes: BERT's hidden size a multiple of its heads, Inception's image size."""
    errs: list[str] = []
    for name, m in models.items():
        if m.get("name") == "bert":
            h, heads = m.get("hidden", 768), m.get("heads", 12)
            if isinstance(h, int) and isinstance(heads, int) and heads > 0 and h % heads:
                errs.append(f"placement.models.{name}.hidden: {h} is not a multiple of heads {heads}")
        if m.get("name") == "inception_v3" and m.get("image_size", 299) < 75:
            errs.append(f"placement.models.{name}.image_size: inception_v3 needs at least 75")
    return errs


def check(config: Mapping[str, Any]) -> list[str]:
    """The placement section's checks across keys, each problem one line naming its key."""
    p = config.get("placement")
    if not isinstance(p, Mapping):
        return []
    errs: list[str] = []
    pairs = p.get("pairs") or {}
    models = p.get("models") or {}
    if p.get("default_pair") not in pairs:
        errs.append(f"placement.default_pair: {p.get('default_pair')!r} is not one of the pairs {sorted(pairs)}")
    errs += _pair_errors(p, pairs)
    for key, pool in (("run_models", models), ("run_pairs", pairs)):
        for name in p.get(key) or []:
            if name not in pool:
                errs.append(f"placement.{key}: {name!r} is not one of {sorted(pool)}")
    if p.get("run_pairs") and p.get("default_pair") not in p["run_pairs"]:
        errs.append(f"placement.run_pairs: must include the default pair {p.get('default_pair')!r}")
    methods = p.get("methods") or []
    errs += _method_errors(p, methods, pairs)
    real = p.get("real") or {}
    for m in real.get("models") or []:
        if m not in models:
            errs.append(f"placement.real.models: {m!r} is not one of placement.models {sorted(models)}")
    learned = {"rnn", "placeto", "hsdag", "hsdag_corrected", "hsdag_fine"} & set(methods)
    if learned and len(p.get("seeds") or []) < 2:
        errs.append("placement.seeds: learned methods need at least 2 seeds for an interval")
    errs += _model_errors(models)
    return errs
