"""The whole configuration checked before any job starts.

Snakemake's ``validate`` (JSON-Schema, defaults) runs first; then
:func:`check_config`, called from the Snakefile, adds what a schema cannot
say or Snakemake's validator lets through:

* strict types: ``4.0`` is not an integer, NaN and infinities are not
  numbers (YAML's ``.nan``/``.inf``);
* cross-field rules: s < n, fractional repetition needs (s + 1) | n, a batch
  divides among the workers, c <= n, an image model on an image data set,
  slow workers within n, every data set named by an experiment configured;
* each paper's own rules (``distlab.<package>.checks.check``);
* ``config/claims.yaml`` (malformed claims, duplicated ids), so a typo there
  fails now rather than in the last job.

Every problem is reported, each naming its key; nothing here imports torch.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .specs import strict_validator_class

# package of a paper -> its config section
PAPER_CHECKS = {
    "distlab.placement.checks": "placement",
    "distlab.local.checks": "local_learning",
    "distlab.demo.checks": "demo",
}
IMAGE_MODELS = ("cnn", "resnet18", "logreg", "mlp")
TEXT_MODELS = ("gpt",)


class ConfigError(ValueError):
    """The configuration is invalid; the message lists every problem with its key."""


def _strict_validator(schema_dir: Path) -> jsonschema.protocols.Validator:
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    # without "$schema" in the referenced files, jsonschema keeps this strict
    # validator class across $refs instead of switching to the stock one
    resources = []
    for path in sorted(schema_dir.glob("*.yaml")):
        contents = yaml.safe_load(path.read_text(encoding="utf-8"))
        contents.pop("$schema", None)
        resource = Resource(contents=contents, specification=DRAFT202012)
        resources += [(path.resolve().as_uri(), resource), (path.name, resource)]
    registry = Registry().with_resources(resources)
    main = yaml.safe_load((schema_dir / "config.schema.yaml").read_text(encoding="utf-8"))
    main.pop("$schema", None)
    main["$id"] = (schema_dir / "config.schema.yaml").resolve().as_uri()
    return strict_validator_class()(main, registry=registry)


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def schema_errors(config: Mapping[str, Any], schema_dir: str | Path) -> list[str]:
    """Strict-type schema errors, one per key."""
    validator = _strict_validator(Path(schema_dir))
    out = []
    for e in sorted(validator.iter_errors(dict(config)), key=lambda e: list(map(str, e.absolute_path))):
        msg = e.message
        if e.validator == "type" and isinstance(e.instance, float):
            msg = (f"{e.instance!r} is not a finite number" if not math.isfinite(e.instance)
                   else f"{e.instance!r} is not of type {e.validator_value!r}")
        out.append(f"{_key(e.absolute_path)}: {msg}")
    return out


def _has_fr(schemes) -> bool:
    return any(str(x).endswith("-fr") for x in schemes or [])


def _check_straggler(errors: list[str], key: str, straggler: Mapping | None, n: int) -> None:
    if not straggler:
        return
    slow = straggler.get("slow_workers") or []
    bad = [w for w in slow if isinstance(w, int) and w >= n]
    if bad:
        errors.append(f"{key}.slow_workers: {bad} not below the number of workers n = {n}")
    if len(set(slow)) != len(slow):
        errors.append(f"{key}.slow_workers: duplicated workers {slow}")
    if straggler.get("model") in ("persistent", "dead") and not slow:
        errors.append(f"{key}.slow_workers: model {straggler['model']!r} needs at least one slow worker")


def _check_dataset(errors: list[str], config: Mapping, key: str, name: Any, model: Mapping | None) -> None:
    datasets = config.get("datasets") or {}
    if name not in datasets:
        errors.append(f"{key}: data set {name!r} is not configured under datasets "
                      f"(configured: {sorted(datasets)})")
        return
    kind = datasets[name].get("kind")
    mname = (model or {}).get("name")
    if mname in IMAGE_MODELS and kind != "image":
        errors.append(f"{key}: model {mname!r} needs an image data set, {name!r} is {kind!r}")
    if mname in TEXT_MODELS and kind != "text":
        errors.append(f"{key}: model {mname!r} needs a text data set, {name!r} is {kind!r}")


def _check_baseline(config: Mapping, errors: list[str]) -> None:
    b = config.get("baseline")
    if not b:
        return
    n = b.get("n_workers", 1)
    _check_dataset(errors, config, "baseline.dataset", b.get("dataset"), b.get("model"))
    if isinstance(n, int) and n > 0 and b.get("batch_size", 0) % n:
        errors.append(f"baseline.batch_size: {b['batch_size']} is not divisible by n_workers = {n}")
    _check_straggler(errors, "baseline.straggler", b.get("straggler"), n)


def _check_pgc(config: Mapping, errors: list[str]) -> None:
    p = config.get("pgc")
    if not p:
        return
    n = p.get("n", 0)
    _check_dataset(errors, config, "pgc.dataset", p.get("dataset"), p.get("model"))
    for group in ("motivating", "simulation", "cloud", "real"):
        g = p.get(group) or {}
        if "dataset" in g:
            _check_dataset(errors, config, f"pgc.{group}.dataset", g["dataset"], p.get("model"))
        gn = g.get("n", n) if group == "real" else n
        key = f"pgc.{group}"
        if not isinstance(gn, int) or gn < 1:
            continue
        bs = g.get("batch_size")
        if isinstance(bs, int) and bs % gn:
            errors.append(f"{key}.batch_size: {bs} is not divisible by the {gn} workers "
                          f"(each partition draws batch_size / n samples)")
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
        _check_straggler(errors, f"{key}.straggler", g.get("straggler"), gn)


def _check_claims(claims_path: str | Path | None, errors: list[str]) -> None:
    if claims_path is None:
        return
    from .scorecard import ClaimError, load_claims

    try:
        load_claims(claims_path)
    except ClaimError as e:
        errors.append(f"{claims_path}: {e}")
    except yaml.YAMLError as e:
        errors.append(f"{claims_path}: not valid YAML: {e}")


def config_errors(config: Mapping[str, Any], schema_dir: str | Path,
                  claims_path: str | Path | None = None) -> list[str]:
    """Every problem of ``config`` (and the claims file), each naming its key."""
    errors = schema_errors(config, schema_dir)
    if errors:  # cross-field rules assume well-typed values
        return errors
    _check_baseline(config, errors)
    _check_pgc(config, errors)
    for module, section in PAPER_CHECKS.items():
        if section not in config:
            continue
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            errors.append(f"{section}: configured, but its package {module} is missing ({e})")
            continue
        errors += mod.check(config)
    _check_claims(claims_path, errors)
    return errors


def check_config(config: Mapping[str, Any], schema_dir: str | Path,
                 claims_path: str | Path | None = None) -> None:
    """Raise :class:`ConfigError` listing every problem (see :func:`config_errors`)."""
    errors = config_errors(config, schema_dir, claims_path)
    if errors:
        lines = "\n".join(f"  - {e}" for e in errors)
        raise ConfigError(f"invalid configuration ({len(errors)} problem(s)); nothing was run:\n{lines}")
