"""The pgc run spec: its schema, cross-field checks and process count.

Torch-free, so that ``distlab train`` can validate a spec and launch a
torchrun job without importing torch in the launching process (about 2.4 s
of every real job); the trainer (:mod:`distlab.pgc.train`) re-exports these.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from ..runtime.stragglers import MODELS as STRAGGLER_MODELS
from ..techniques.gradient_codes import SCHEMES

DTYPES = ("float32", "float64")
CODING_MODES = ("none", "measured", "profile")

_NUM = {"type": "number"}
_POS = {"type": "number", "exclusiveMinimum": 0}
_NONNEG = {"type": "number", "minimum": 0}
_INT0 = {"type": "integer", "minimum": 0}
_INT1 = {"type": "integer", "minimum": 1}

SPEC_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "pgc run spec",
    "type": "object",
    "additionalProperties": False,
    "required": ["experiment", "scheme", "backend", "n", "s", "model", "lr", "batch_size",
                 "cluster"],
    "oneOf": [{"required": ["seed"]}, {"required": ["seeds"]}],
    "properties": {
        "experiment": {"const": "pgc"},
        "group": {"type": "string", "pattern": "^[a-z0-9_]+$"},
        "scheme": {"enum": list(SCHEMES)},
        "backend": {"enum": ["simulated", "gloo"]},
        "n": _INT1, "s": _INT0, "c": _INT1,
        "seed": _INT0,
        "seeds": {"type": "array", "items": _INT0, "minItems": 1, "uniqueItems": True},
        "model": {"type": "object", "required": ["name"],
                  "properties": {"name": {"enum": ["logreg", "mlp", "cnn", "resnet18"]}}},
        "lr": _POS,
        "dtype": {"enum": list(DTYPES)},  # the keys of distlab.train.common.DTYPES (tested)
        "code_seed": _INT0,
        "eval_every": _INT1,
        "batch_size": _INT1,
        "steps": _INT1,
        "epochs": _INT1,
        "threshold": {"type": "object", "required": ["loss"],
                      "properties": {"loss": _NUM, "repeat": _INT1, "window": _INT1,
                                     "stop": {"type": "boolean"}}},
        "calibrate_from": {"type": "string"},
        "device": {"enum": ["auto", "cpu", "cuda"]},   # simulated: distlab.runtime.device; absent: the CPU
        "cluster": {
            "type": "object", "required": ["compute", "network", "straggler"],
            "properties": {
                "compute": {"type": "object", "properties": {
                    "mode": {"enum": ["calibrated", "measured"]},
                    "unit_seconds": _NONNEG, "scale": _POS}},
                "network": {"type": "object", "properties": {
                    "latency_s": _NONNEG, "bandwidth_Bps": _POS}},
                "straggler": {"type": "object", "properties": {
                    "model": {"enum": list(STRAGGLER_MODELS)},
                    "mean": _NONNEG, "shape": _NUM, "slowdown": _NUM,
                    "slow_workers": {"type": "array", "items": _INT0, "uniqueItems": True},
                    "from_step": _INT0, "trace": {"type": "string"}, "scale": _POS}},
                "coding": {"type": "object", "properties": {
                    "mode": {"enum": list(CODING_MODES)}, "numel": _INT1,
                    "profile": {"type": "string"}}},
            },
        },
    },
    "not": {"required": ["steps", "epochs"]},
}


def check_spec(spec: dict) -> None:
    """Cross-field checks the schema cannot express; ValueError naming the key."""
    n, s = int(spec["n"]), int(spec["s"])
    if not 0 <= s < n:
        raise ValueError(f"s: need 0 <= s < n, got s={s}, n={n}")
    if "steps" not in spec and "epochs" not in spec:
        raise ValueError("steps: give steps or epochs")
    for k in ("lr",):
        if not math.isfinite(float(spec[k])) or float(spec[k]) <= 0:
            raise ValueError(f"{k}: must be a finite number > 0, got {spec[k]}")
    strag = spec["cluster"]["straggler"]
    bad = [w for w in strag.get("slow_workers", ()) if not 0 <= int(w) < n]
    if bad:
        raise ValueError(f"cluster.straggler.slow_workers: workers {bad} are not in 0..{n - 1}")
    if spec.get("backend") != "simulated" and "seeds" in spec:
        raise ValueError("seeds: a list of seeds runs only on the simulated backend")


def nprocs(spec: dict) -> int:
    """Processes of a real job: a master and ``n`` workers."""
    return int(spec["n"]) + 1


def expendable_ranks(spec: dict) -> tuple[list[int], int]:
    """The ranks a real job may lose without ending, and how many of them: any of the
    ``n`` workers (ranks 1..n), up to the ``n - wait_for`` the master does not wait for
    (s; none under DGD).  The fork launcher lets that many die of a signal, the rank
    process itself or its work child (see ``train._supervise_worker``)."""
    n = int(spec["n"])
    return list(range(1, n + 1)), 0 if spec["scheme"] == "dgd" else int(spec["s"])


# ------------------------------------------------------------------ the config's pgc section
CONFIG_SECTION = "pgc"  # distlab.config.checks.paper_checks finds check() by it


def check(config: Mapping) -> list[str]:
    """Cross-field rules of the ``pgc:`` config section, one ``"key: why"`` line each
    (s < n, fractional repetition needs (s + 1) | n, batches divide among the workers,
    c <= n, slow workers within n, the data sets configured, a stored coding profile
    that holds every setting run)."""
    errors: list[str] = []
    _check(config, errors)
    return errors


def _has_fr(schemes) -> bool:
    return any(str(x).endswith("-fr") for x in schemes or [])


def _check(config: Mapping, errors: list[str]) -> None:
    from ..config.checks import check_dataset, check_workers

    p = config.get("pgc")
    if not p:
        return
    n = p.get("n", 0)
    check_dataset(errors, config, "pgc.dataset", p.get("dataset"), p.get("model"))
    for group in ("motivating", "simulation", "cloud", "real"):
        g = p.get(group) or {}
        if "dataset" in g:
            check_dataset(errors, config, f"pgc.{group}.dataset", g["dataset"], p.get("model"))
        gn = g.get("n", n) if group == "real" else n
        key = f"pgc.{group}"
        if not isinstance(gn, int) or gn < 1:
            continue
        check_workers(errors, key, g, gn)
        s_values = g.get("s")
        s_list = s_values if isinstance(s_values, list) else [s_values] if s_values is not None else []
        if group == "motivating":
            s_list = [c - 1 for c in g.get("c") or [] if isinstance(c, int)]
            for c in g.get("c") or []:
                if isinstance(c, int) and c > gn:
                    errors.append(f"{key}.c: c = {c} partitions a worker exceeds n = {gn}")
        for s in s_list:
            if not isinstance(s, int):
                continue
            if s >= gn:
                errors.append(f"{key}.s: s = {s} must be below n = {gn} (a master needs n - s >= 1 workers)")
            elif _has_fr(g.get("schemes")) and gn % (s + 1):
                errors.append(f"{key}.s: fractional repetition needs (s + 1) | n; s = {s}, n = {gn} "
                              f"(drop the -fr schemes or change s)")
    if not any(e.startswith("pgc") for e in errors):  # settings refused above would only repeat here
        _check_stored_coding_profile(config, errors)


def _check_stored_coding_profile(config: Mapping, errors: list[str]) -> None:
    """``pgc.coding.source: stored``: the versioned profile holds every setting the config runs."""
    coding = config["pgc"].get("coding") or {}
    if coding.get("source") != "stored" or coding.get("mode") != "measured" or "numel" not in coding:
        return
    from .workflow import STORED_CODING_PROFILE, PGCWorkflow, stored_profile_gaps

    root = Path(__file__).resolve().parents[3]
    path = root / STORED_CODING_PROFILE if (root / STORED_CODING_PROFILE).exists() else Path(STORED_CODING_PROFILE)
    o = json.loads(PGCWorkflow(dict(config)).coding_profile_options())
    gaps = stored_profile_gaps(str(path), o["settings"], o["numel"], o["dtype"])
    if gaps:
        errors.append(f"pgc.coding.source: stored, but {STORED_CODING_PROFILE} has no row for {', '.join(gaps)} "
                      f"(numel {o['numel']}, {o['dtype']}): set source: measured, or run the rule "
                      f"pgc_coding_profile and copy its output there")
