"""Run specs and run-time settings: what a training job receives, checked first.

A *run spec* holds everything that changes a run's results; it is validated
against the trainer's JSON-Schema (``SPEC_SCHEMA``) before any work, and a
failure names the key.  *Run-time settings* (timeouts, checkpoint cadence)
change no number in the outputs and travel separately, so that editing them
reruns nothing (see docs/conventions.md).
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

RUNTIME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "timeout_s": {"type": "number", "exclusiveMinimum": 0},
        "job_timeout_s": {"type": "number", "exclusiveMinimum": 0},
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


class SpecError(ValueError):
    """A run spec or run-time setting is malformed; the message names the key."""


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
            raise SpecError(f"{what}: at {_path(e)}: {e.message}")
        raise SpecError(f"{what}: key {_path(e)!r}: {e.message}")


def validate_spec(spec: Any, schema: Mapping[str, Any], experiment: str) -> dict:
    if not isinstance(spec, Mapping):
        raise SpecError(f"{experiment} spec: expected a JSON object, got {type(spec).__name__}")
    check(spec, schema, f"{experiment} spec")
    from .checks import count_errors  # the config's count bounds hold for a spec given directly

    big = count_errors(spec)
    if big:
        raise SpecError(f"{experiment} spec: key {big[0]}")
    return dict(spec)


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
