"""The toy's run spec and config rules (torch-free)."""

from __future__ import annotations

from collections.abc import Mapping

CONFIG_SECTION = "toy"

SPEC_SCHEMA: dict = {
    "type": "object",
    "additionalProperties": False,
    "required": ["experiment", "seed", "steps", "lr"],
    "properties": {
        "experiment": {"const": "toy"},
        "seed": {"type": "integer", "minimum": 0},
        "steps": {"type": "integer", "minimum": 1, "maximum": 10000},
        "lr": {"type": "number", "exclusiveMinimum": 0},
        "backend": {"const": "simulated"},
    },
}


def nprocs(spec: dict) -> int:
    return 1


def check(config: Mapping) -> list[str]:
    t = config["toy"]
    return [] if t["lr"] < 1 else [f"toy.lr: {t['lr']} diverges on the unit quadratic; keep it under 1"]
