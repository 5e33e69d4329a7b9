"""Torch-free: the atlas run spec.

The techniques it runs, their kinds (``sync``, ``master``) and which of them are
arrival-dependent are the catalogue of :mod:`distlab.techniques.catalogue`, re-exported here.
"""

from __future__ import annotations

from ..config import specs
from ..techniques.catalogue import (CODED, OURS, TECHNIQUES, arrival_dependent, in_groups, kind,  # noqa: F401
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
        "trend": {"const": True},  # a trend cell (atlas.trend): the efficiency fit's, not the map's
    },
}


def nprocs(spec: dict) -> int:
    return int(spec["n_workers"])


def check_spec(spec: dict) -> None:
    """Cross-field rules; SpecError naming the key."""
    t, n, s = spec["technique"], int(spec["n_workers"]), int(spec.get("s", 1))
    if kind(t) == "master" and not 0 <= s < n:
        raise specs.SpecError(f"atlas spec: key 's': {t} needs 0 <= s < n_workers = {n}, got {s}")
    if in_groups(t) and n % (s + 1):
        raise specs.SpecError(f"atlas spec: key 's': {t} needs n_workers divisible by s+1 ({n}, s={s})")
    if "diloco" in option_sections(t) and spec["steps"] % int(spec.get("diloco", {}).get("H", 10)):
        raise specs.SpecError("atlas spec: key 'diloco.H': steps must be a multiple of H")
    m = spec["model"]
    if m.get("d_model", 64) % m.get("n_head", 4):
        raise specs.SpecError("atlas spec: key 'model.n_head': must divide model.d_model")


CONFIG_SECTION = "atlas"  # distlab.config.checks.paper_checks finds check() by it


def check(config) -> list[str]:
    """Cross-field rules of the ``atlas:`` section, one ``"key: why"`` line each: every size a
    part names is defined (the trend's sizes beside ``atlas.sizes``, not redefining one of them)
    and the trend pairs with DDP.  A headline or trend technique outside ``atlas.techniques`` is
    not an error: an overlay that runs fewer techniques runs their cells for those it keeps."""
    a = config.get("atlas")
    if not isinstance(a, dict) or not isinstance(a.get("sizes"), dict):
        return []
    errors: list[str] = []
    tr = a.get("trend") or {}
    trend_sizes = tr.get("sizes") or {}
    known = set(a["sizes"]) | set(trend_sizes)
    for key, size in (("headline.size", (a.get("headline") or {}).get("size")),
                      ("sweep.size", (a.get("sweep") or {}).get("size")),
                      ("reference.size", (a.get("reference") or {}).get("size")),
                      ("trend.workers_size", tr.get("workers_size"))):
        if size is not None and size not in a["sizes"]:
            errors.append(f"atlas.{key}: {size!r} is not one of atlas.sizes ({', '.join(sorted(a['sizes']))})")
    for size in (a.get("train_under") or {}).get("sizes") or []:
        if size not in known:
            errors.append(f"atlas.train_under.sizes: {size!r} is not a defined size")
    for name in sorted(set(trend_sizes) & set(a["sizes"])):
        errors.append(f"atlas.trend.sizes.{name}: already one of atlas.sizes; name the trend's own sizes apart")
    if tr and "ddp" not in (tr.get("techniques") or []):
        errors.append("atlas.trend.techniques: must include ddp (the step-efficiency ratios' denominator)")
    return errors
