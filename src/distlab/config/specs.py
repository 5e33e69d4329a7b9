"""Run specs and run-time settings: what a training job receives, checked first.

A *run spec* holds everything that changes a run's results; it is validated
against the trainer's JSON-Schema (``SPEC_SCHEMA``) before any work, and a
failure names the key.  *Run-time settings* (timeouts, checkpoint cadence)
change no number in the outputs and travel separately, so that editing them
reruns nothing (see docs/design.md).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

import jsonschema

RUNTIME_DEFAULTS: dict[str, Any] = {
    "timeout_s": 60.0,
    "job_timeout_s": 3600.0,
    "checkpoint": {"every_s": 60.0, "every_steps": 0},
    "launcher": "fork",
}

# the longest wait a timeout may set: 30 days (a deadline past it overflows the clocks a job's
# launcher and its store compute with, e.g. 1e300 s)
MAX_TIMEOUT_S = 30 * 86400

RUNTIME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S},
        "job_timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S},
        "threads": {"type": "integer", "minimum": 1},
        "launcher": {"enum": ["fork", "torchrun"]},
        "checkpoint": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "every_s": {"type": "number", "minimum": 0},
                "every_steps": {"type": "integer", "minimum": 0},
            },
        },
    },
}

# Reusable schema pieces for the trainers' SPEC_SCHEMAs.
NAME = {"type": "string", "pattern": r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"}
POS_INT = {"type": "integer", "minimum": 1}
NONNEG_INT = {"type": "integer", "minimum": 0}
POS_NUM = {"type": "number", "exclusiveMinimum": 0}
NONNEG_NUM = {"type": "number", "minimum": 0}
BACKEND = {"type": "string", "enum": ["simulated", "gloo", "nccl"]}
DTYPE = {"type": "string", "enum": ["float32", "float64"]}
CLUSTER = {
    "type": "object",
    "required": ["compute", "network", "straggler"],
    "properties": {
        "compute": {"type": "object", "required": ["mode"]},
        "network": {"type": "object"},
        "straggler": {"type": "object", "required": ["model"]},
    },
}


# The largest value a count may take, by key name, wherever the key appears in
# the configuration (a list of counts: each element; a list of seeds: its
# length).  Every bound is far past any configured run (config/paper.yaml's
# largest: 127000 steps, 25 episodes x 20 samples, 10 epochs, 10 seeds, 12
# workers); most are below the configured values with three zeros appended.
# (steps: 10**6, eight times the largest paper-scale run; a 150-step run typed
# as 150000 is within it: its deadline and its SLURM runtime grow with it, so only
# this limit and the memory ceiling bound it.)
COUNT_LIMITS: dict[str, int] = {
    "steps": 10**6, "epochs": 1000, "episodes": 10**4, "samples": 10**4, "budget": 10**5,
    "n_workers": 1024, "n": 1024, "sections": 1024, "threads": 1024, "worker_threads": 1024,
    "batch_size": 10**6, "batch": 10**6, "eval_batches": 10**5, "batches": 10**5,
    "final_batches": 10**5, "repeats": 10**4, "measure": 10**4, "warmup": 10**5,
    "warmup_steps": 10**7, "pc_measure": 10**4, "pc_repeats": 10**3, "pc_warmup": 10**4, "eval_every": 10**7,
    "T": 10**4, "pc_T": 10**4, "H": 10**6, "points": 10**4, "n_resamples": 10**8,
    "n_layer": 1024, "layers": 1024, "d_model": 65536, "hidden": 65536, "n_head": 1024,
    "block_size": 10**6, "seq": 10**6, "max_chars": 10**11, "numel": 10**11,
    "every_steps": 10**7, "topk": 10**8, "chunk": 4096, "rank": 4096,
}
# lists whose length is a count: a job per element
LIST_LIMITS: dict[str, int] = {"seeds": 100, "parallel_seeds": 100}

# Seeds, wherever they appear: numpy's legacy generators and scikit-learn take a seed below
# 2**32, and a job may add a small offset to it (the data split's hold-out draws seed + 1),
# so a seed is at most 2**31 - 1; a larger one was refused by a generator deep in a job.
SEED_KEYS = ("seed", "seeds", "data_seed", "code_seed", "parallel_seeds")
SEED_MAX = 2**31 - 1

# Values that set a simulated step's time, by key name: within these ranges every step time
# is a finite number of seconds (bandwidth 1e-300 B/s made steps of 1e305 s; a straggler
# mean of 1e308 s overflowed).  Far past any configured value (config/config.yaml: links
# from 1.25e6 to 5e10 B/s, latencies to 0.1 s, straggler means to 1 s, slowdowns of 4).
VALUE_RANGES: dict[str, tuple[float, float, str]] = {
    "bandwidth_Bps": (1.0, 1e15, "bytes per second"),
    "latency_s": (0.0, 3600.0, "seconds"),
    "latencies": (0.0, 3600.0, "seconds"),
    "unit_seconds": (0.0, 3600.0, "seconds"),
    "slowdown": (1.0, 1e4, "times"),
}
# and learning rates: up to 1e6 (configured: 4e-4 to 0.1); past it a float32 step overflows
VALUE_RANGES["lr"] = (0.0, 1e6, "(a learning rate)")
STRAGGLER_MODELS = ("none", "exponential", "pareto", "persistent", "dead")
STRAGGLER_MEAN_MAX = 3600.0



class SpecError(ValueError):
    """A run spec or run-time setting is malformed; the message names the key."""


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def _path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def _non_finite(obj: Any, prefix: str = "") -> list[str]:
    """Keys whose value is NaN or infinite (JSON has no such numbers, Python's json does)."""
    bad: list[str] = []
    if isinstance(obj, float) and not math.isfinite(obj):
        bad.append(prefix or "(top level)")
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            bad += _non_finite(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            bad += _non_finite(v, f"{prefix}.{i}" if prefix else str(i))
    return bad


def strict_validator_class():
    """Draft 2020-12 with strict types: ``4.0`` is not an integer and NaN or an
    infinity is not a number (the stock validator accepts all three)."""
    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda _, x: isinstance(x, int) and not isinstance(x, bool)
    ).redefine(
        "number", lambda _, x: isinstance(x, (int, float)) and not isinstance(x, bool)
        and math.isfinite(x)
    )
    return jsonschema.validators.extend(base, type_checker=checker)


def check(instance: Any, schema: Mapping[str, Any], what: str) -> None:
    """Validate ``instance`` against ``schema``; raise :class:`SpecError` naming the key."""
    bad = _non_finite(instance)
    if bad:
        raise SpecError(f"{what}: key {bad[0]!r} is not a finite number")
    validator = strict_validator_class()(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: (len(e.path), e.message))
    if errors:
        e = errors[0]
        if e.validator == "required":
            missing = e.message.split("'")[1] if "'" in e.message else e.message
            key = f"{_path(e)}.{missing}" if e.absolute_path else missing
            raise SpecError(f"{what}: missing key {key!r}")
        if e.validator == "additionalProperties":
            from .nearmiss import additional_note

            note = additional_note(e)
            raise SpecError(f"{what}: at {_path(e)}: {e.message}{': ' + note if note else ''}")
        raise SpecError(f"{what}: key {_path(e)!r}: {e.message}")


def validate_spec(spec: Any, schema: Mapping[str, Any], experiment: str) -> dict:
    if not isinstance(spec, Mapping):
        raise SpecError(f"{experiment} spec: expected a JSON object, got {type(spec).__name__}")
    check(spec, schema, f"{experiment} spec")
    # the config's count bounds hold for a spec given directly
    big = count_errors(spec)
    if big:
        raise SpecError(f"{experiment} spec: key {big[0]}")
    return dict(spec)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def count_errors(config: Any, path: tuple = ()) -> list[str]:
    """Counts past their bound (:data:`COUNT_LIMITS`, :data:`LIST_LIMITS`), one line each."""
    out: list[str] = []
    if isinstance(config, Mapping):
        for k, v in config.items():
            key = path + (k,)
            limit = COUNT_LIMITS.get(str(k))
            if limit is not None:
                values = v if isinstance(v, list) else [v]
                big = [x for x in values if _is_int(x) and x > limit]
                if big:
                    out.append(f"{_key(key)}: {big[0] if not isinstance(v, list) else big} is past the "
                               f"limit {limit:,} for {k!r} (no run of this size is meant: a typo?)")
            limit = LIST_LIMITS.get(str(k))
            if limit is not None and isinstance(v, list) and len(v) > limit:
                out.append(f"{_key(key)}: {len(v):,} entries, past the limit {limit:,}")
            out += _value_errors(str(k), v, key, config)
            out += count_errors(v, key)
    elif isinstance(config, list):
        for i, v in enumerate(config):
            if isinstance(v, (Mapping, list)):
                out += count_errors(v, path + (i,))
    return out


def _value_errors(k: str, v: Any, key: tuple, parent: Mapping) -> list[str]:
    """A seed past :data:`SEED_MAX`, a value outside :data:`VALUE_RANGES`, a straggler mean
    past :data:`STRAGGLER_MEAN_MAX`: one line naming the key."""
    values = v if isinstance(v, list) else [v]
    if k in SEED_KEYS:
        big = [x for x in values if _is_int(x) and x > SEED_MAX]
        if big:
            return [f"{_key(key)}: seed {big[0]} is past the largest seed {SEED_MAX:,} (2**31 - 1: the "
                    f"random generators take seeds below 2**32)"]
    rng = VALUE_RANGES.get(k)
    if k == "mean" and parent.get("model") in STRAGGLER_MODELS:
        rng = (0.0, STRAGGLER_MEAN_MAX, "seconds")
    if k == "bandwidths" and isinstance(v, Mapping):  # a grid's lo and hi
        rng, values = VALUE_RANGES["bandwidth_Bps"], [v.get("lo"), v.get("hi")]
    if rng is not None:
        lo, hi, unit = rng
        bad = [x for x in values if isinstance(x, (int, float)) and not isinstance(x, bool)
               and math.isfinite(x) and not lo <= x <= hi]
        if bad:
            if k == "lr":
                return [f"{_key(key)}: {bad[0]!r} is outside 0 to {hi:g}, the range of learning rates a "
                        f"run can take without overflowing"]
            return [f"{_key(key)}: {bad[0]!r} is outside {lo:g} to {hi:g} {unit}, the range in which "
                    f"a simulated step takes a finite time"]
    return []


def each_seed(spec: dict) -> list[dict]:
    """A spec listing ``seeds`` as one spec per seed: ``seed`` set, ``seeds`` removed
    (what a simulated job running several seeds in one process trains)."""
    base = {k: v for k, v in spec.items() if k != "seeds"}
    return [{**base, "seed": int(seed)} for seed in spec["seeds"]]


def runtime_defaults(runtime: Mapping[str, Any] | None = None) -> dict:
    """Run-time settings with defaults filled in, validated."""
    runtime = dict(runtime or {})
    check(runtime, RUNTIME_SCHEMA, "runtime settings")
    out = {**RUNTIME_DEFAULTS, **runtime}
    out["checkpoint"] = {**RUNTIME_DEFAULTS["checkpoint"], **runtime.get("checkpoint", {})}
    return out


def spec_hash(spec: Mapping[str, Any]) -> str:
    """A stable digest of a spec: the identity of the run it describes."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
