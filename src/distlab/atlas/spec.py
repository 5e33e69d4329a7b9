"""Torch-free: the atlas run spec.

The techniques it runs, their kinds (``sync``, ``master``) and which of them are
arrival-dependent are the catalogue of :mod:`distlab.techniques.catalogue`, re-exported here.
"""

from __future__ import annotations

from ..config import specs
from ..techniques.catalogue import (CODED, OURS, TECHNIQUES, arrival_dependent, kind,  # noqa: F401
                                    option_sections, reads_s)
from ..techniques.options import DEMO_COMPRESSION, DILOCO_OPTIONS, POWERSGD_OPTIONS

SPEC_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["experiment", "technique", "backend", "seed", "model", "n_workers", "batch_size", "lr",
                 "steps", "cluster"],
    "properties": {
        "experiment": {"const": "atlas"},
        "technique": {"enum": list(TECHNIQUES)},
        "backend": specs.BACKEND,
        "seed": specs.NONNEG_INT,
        "model": {"type": "object", "required": ["name"], "additionalProperties": False,
                  "properties": {"name": {"enum": ["gpt"]}, "n_layer": specs.POS_INT, "d_model": specs.POS_INT,
                                 "n_head": specs.POS_INT, "block_size": specs.POS_INT}},
        "n_workers": specs.POS_INT,
        "batch_size": specs.POS_INT,
        "lr": specs.POS_NUM,
        "steps": specs.POS_INT,
        "eval_every": specs.POS_INT,
        "eval_batches": specs.POS_INT,
        "s": specs.NONNEG_INT,
        "demo": {"type": "object", "additionalProperties": False, "properties": DEMO_COMPRESSION},
        "diloco": DILOCO_OPTIONS,
        "powersgd": POWERSGD_OPTIONS,
        "cluster": specs.CLUSTER,
        "device": {"enum": ["auto", "cpu", "cuda"]},   # distlab.runtime.device; absent: the CPU
    },
}


def nprocs(spec: dict) -> int:
    return int(spec["n_workers"])


def check_spec(spec: dict) -> None:
    """Cross-field rules; SpecError naming the key."""
    t, n, s = spec["technique"], int(spec["n_workers"]), int(spec.get("s", 1))
    if kind(t) == "master" and not 0 <= s < n:
        raise specs.SpecError(f"atlas spec: key 's': {t} needs 0 <= s < n_workers = {n}, got {s}")
    if t in ("gc-fr", "pgc-fr") and n % (s + 1):
        raise specs.SpecError(f"atlas spec: key 's': {t} needs n_workers divisible by s+1 ({n}, s={s})")
    if t.startswith("diloco") and spec["steps"] % int(spec.get("diloco", {}).get("H", 10)):
        raise specs.SpecError("atlas spec: key 'diloco.H': steps must be a multiple of H")
    m = spec["model"]
    if m.get("d_model", 64) % m.get("n_head", 4):
        raise specs.SpecError("atlas spec: key 'model.n_head': must divide model.d_model")
