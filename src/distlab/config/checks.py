"""The whole configuration checked, in one pass, before any job starts.

:func:`check_config` runs first in the Snakefile (before Snakemake's own
``validate``, which stops at its first error and then only fills defaults), and
lists every problem, one line each, naming its key:

* duplicate keys in the YAML files Snakemake loaded (``--configfile`` and the
  Snakefile's ``configfile:``) and in ``config/claims.yaml``, at any level: a
  YAML loader keeps the last value silently;
* the JSON-Schema, with strict types;
* an upper bound on every count (steps, epochs, episodes, workers, seeds, ...)
  that no run reaches on purpose (:data:`distlab.config.specs.COUNT_LIMITS`), so a count with a
  few zeros too many is refused instead of running for years;

* strict types: ``4.0`` is not an integer, NaN and infinities are not
  numbers (YAML's ``.nan``/``.inf``);
* cross-field rules: s < n, fractional repetition needs (s + 1) | n, a batch
  divides among the workers, c <= n, an image model on an image data set,
  slow workers within n, every data set named by an experiment configured;
* each paper's own rules (its ``Paper.config_check``: ``CONFIG_SECTION`` and ``check``; the
  registry's papers, which the Snakefile and ``distlab check-config`` hand in, see
  :func:`paper_checks`), and each paper's section against its own schema file;
* ``config/claims.yaml`` (malformed claims, duplicated ids), so a typo there
  fails now rather than in the last job.

Every problem is reported, each naming its key; the cross-field rules run
even when the schema found errors (a rule that trips over an ill-typed value
adds nothing); nothing here imports torch.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from . import bounds, nearmiss
from .specs import COUNT_LIMITS, LIST_LIMITS, count_errors, strict_validator_class  # noqa: F401 (re-exported)



def paper_checks(papers=None) -> dict[str, Any]:
    """Each paper's config check (``check(config) -> list of "key: why"``), by config section.

    ``papers``: the registry's (``distlab.papers.papers()``; a shared module names no paper, so
    its callers hand them in), each checked against the ConfigCheck protocol; None: the paper
    packages found by their ``paper.py`` (:func:`_papers`), the same papers."""
    return {p.section: mod.check for p in _papers(papers) if (mod := p.config_checker()) is not None}


IMAGE_MODELS = ("cnn", "resnet18", "logreg", "mlp")
TEXT_MODELS = ("gpt",)


class ConfigError(ValueError):
    """The configuration is invalid; the message lists every problem with its key."""


def _papers(papers) -> tuple:
    """The papers handed in (the registry's), or, for a caller without them (None), the paper
    packages found by their ``paper.py`` (:func:`distlab.pipeline.paper.discovered`)."""
    if papers is not None:
        return tuple(papers)
    from ..pipeline.paper import discovered

    return tuple(dict.fromkeys(discovered().values()))


def paper_schemas(papers, schema_dir: str | Path) -> dict[str, Path]:
    """The schema file of each paper's section, by section: config.schema.yaml names no paper,
    each registered paper's ``Paper.schema`` is its section's (``papers`` None: the packages
    found).  A paper whose ``schema`` is None keeps its section in config.schema.yaml."""
    root = Path(schema_dir).resolve().parents[1]  # the repository: workflow/schemas -> .
    return {p.section: root / p.schema for p in _papers(papers) if p.schema}


def _registered(node):
    """``node`` with each ``x-registry: <name>`` replaced by the enum of that registry's names
    (:data:`distlab.techniques.catalogue.REGISTRIES`): a schema names no technique by hand."""
    if isinstance(node, dict):
        out = {k: _registered(v) for k, v in node.items() if k != "x-registry"}
        if "x-registry" in node:
            from ..techniques.catalogue import REGISTRIES

            out["enum"] = REGISTRIES[node["x-registry"]].names()
        return out
    if isinstance(node, list):
        return [_registered(v) for v in node]
    return node


def load_schema(path: str | Path) -> dict:
    """A schema file as every validation here reads it (the registries' enums filled in)."""
    return _registered(yaml.safe_load(Path(path).read_text(encoding="utf-8")))


def config_schema(schema_dir: str | Path, papers=None) -> dict:
    """The whole configuration's schema, assembled: config.schema.yaml (the shared sections)
    with each paper's section a ``$ref`` to its own schema file (:func:`paper_schemas`)."""
    path = Path(schema_dir) / "config.schema.yaml"
    main = load_schema(path)
    main["$id"] = path.resolve().as_uri()
    for section, schema in paper_schemas(papers, schema_dir).items():
        main.setdefault("properties", {})[section] = {"$ref": schema.resolve().as_uri()}
    main["required"] = [*main.get("required", ()), *(p.section for p in _papers(papers) if p.config_required)]
    return main


def validate_defaults(config: dict, schema_dir: str | Path, papers=None) -> None:
    """Fill the schemas' defaults into ``config``, as Snakemake's ``validate`` does (it stops at
    the first error: Snakemake's ``WorkflowError``), over the whole schema as
    :func:`config_schema` assembles it: config.schema.yaml and each paper's own schema file
    under its section.

    One validation from the assembled root (Snakemake's ``validate`` reads a schema from a file
    only), resolved as Snakemake resolves config.schema.yaml's ``$ref`` s, so the defaults filled
    are the ones they always were.  A schema file that declares ``$schema`` (the five papers')
    is validated by jsonschema's stock class for that draft, which fills no defaults: their
    ``default:`` values are documentation, and filling them would change recorded job specs
    (PGC's stragglers would gain ``shape``, ``slowdown``, ``slow_workers``).  A file without the
    line (the toy paper's in the tests) has its defaults filled."""
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012
    from snakemake.exceptions import WorkflowError

    schema = config_schema(schema_dir, papers)
    missing = [s for s in schema.get("required", ()) if s not in config]
    if missing:
        raise WorkflowError("Error validating config file.",
                            jsonschema.ValidationError(f"{missing[0]!r} is a required property"))
    for section, path in paper_schemas(papers, schema_dir).items():  # as config.schema.yaml once named them
        if path.resolve().parent == Path(schema_dir).resolve():
            schema["properties"][section] = {"$ref": path.name}

    def retrieve(uri: str) -> Resource:
        from urllib.parse import urlparse
        from urllib.request import url2pathname

        contents = load_schema(url2pathname(urlparse(uri).path))
        return Resource.from_contents(contents, default_specification=DRAFT202012)

    registry = Registry(retrieve=retrieve).with_resource(uri=str(Path(schema_dir) / "config.schema.yaml"),
                                                         resource=Resource.from_contents(schema))
    base = jsonschema.Draft202012Validator
    fill = base.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, subschema):
        for name, sub in properties.items():
            if "default" in sub:
                instance.setdefault(name, sub["default"])
        yield from fill(validator, properties, instance, subschema)

    try:
        jsonschema.validators.extend(base, {"properties": set_defaults})(schema, registry=registry).validate(config)
    except jsonschema.ValidationError as e:
        raise WorkflowError("Error validating config file.", e) from e


def _strict_validator(schema_dir: Path, papers=None) -> jsonschema.protocols.Validator:
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    # without "$schema" in the referenced files, jsonschema keeps this strict
    # validator class across $refs instead of switching to the stock one
    resources = []
    for path in sorted(schema_dir.glob("*.yaml")) + sorted(paper_schemas(papers, schema_dir).values()):
        contents = load_schema(path)
        contents.pop("$schema", None)
        resource = Resource(contents=contents, specification=DRAFT202012)
        resources += [(path.resolve().as_uri(), resource), (path.name, resource)]
    registry = Registry().with_resources(resources)
    main = config_schema(schema_dir, papers)
    main.pop("$schema", None)
    return strict_validator_class()(main, registry=registry)


def foreign_file_errors(config_files, schema_dir: str | Path, papers=None) -> list[str]:
    """A file none of whose top-level keys is a setting of this workflow (a link to some other
    file, ``/etc/shadow`` say) is not a config file: one line naming it, and none of its text
    (its keys would otherwise be quoted back as unknown settings)."""
    from .yamlio import load_file_bounded

    try:
        main = yaml.safe_load((Path(schema_dir) / "config.schema.yaml").read_text(encoding="utf-8"))
        known = set(main.get("properties", {})) | set(paper_schemas(papers, schema_dir))
    except (OSError, yaml.YAMLError, AttributeError):
        return []
    out = []
    for path in config_files:
        try:
            data = load_file_bounded(path)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue  # named by duplicate_key_errors
        if isinstance(data, Mapping) and data and not any(k in known for k in data):
            out.append(f"{path}: none of its {len(data)} top-level key(s) is a setting of this workflow "
                       f"(not a config file?); its text is not shown")
    return out


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def _stamp(paths) -> tuple:
    """What a cached result depends on: each file's path, size and modification time."""
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((str(p), st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((str(p), None, None))
    return tuple(out)


_CACHE: dict[tuple, Any] = {}  # (what, stamp) -> validator or errors: one process checks many configs


def schema_errors(config: Mapping[str, Any], schema_dir: str | Path, papers=None) -> list[str]:
    """Strict-type schema errors, one per key (each paper's section against its own schema
    file: :func:`config_schema`)."""
    extra = paper_schemas(papers, schema_dir)
    stamp = ("schema", _stamp(sorted(Path(schema_dir).glob("*.yaml")) + sorted(extra.values())))
    if stamp not in _CACHE:
        _CACHE[stamp] = _strict_validator(Path(schema_dir), papers)
    validator = _CACHE[stamp]
    out = []
    for e in sorted(validator.iter_errors(dict(config)), key=lambda e: list(map(str, e.absolute_path))):
        msg = e.message
        if e.validator == "type" and isinstance(e.instance, float):
            msg = (f"{e.instance!r} is not a finite number" if not math.isfinite(e.instance)
                   else f"{e.instance!r} is not of type {e.validator_value!r}")
        elif e.validator == "type":
            msg = bounds.type_hint(e.instance, e.validator_value) or msg
        msg = bounds.shorten(msg)
        if e.validator == "additionalProperties":  # a look-alike or near-miss of a known key
            msg += "".join(f": {n}" for n in [nearmiss.additional_note(e)] if n)
        out.append(f"{_key(e.absolute_path)}: {msg}")
    return out


def duplicate_key_errors(path: str | Path) -> list[str]:
    """Keys that appear twice in one mapping of a YAML file, at any level, one line each
    (``file:line: key ...``); a file that is not valid YAML gives one line too."""
    from .yamlio import YamlLimitError, check_yaml_limits, read_yaml_text, yaml_error_line

    name = str(path)
    try:
        text = read_yaml_text(path)
        check_yaml_limits(text, name)
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except YamlLimitError as e:
        return [str(e)]
    except OSError as e:
        return [f"{name}: cannot be read ({e.strerror or e})"]
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        return [f"{name}: not valid YAML: {yaml_error_line(e)}"]
    out: list[str] = []

    # in document order, each node once (an alias's target was walked where it was defined;
    # the caps above bound the rest), without recursion
    todo: list = [(root, ())]
    done: set[int] = set()
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        node, keys = item
        if id(node) in done:
            continue
        done.add(id(node))
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            then: list = []
            for knode, vnode in node.value:
                k = knode.value if isinstance(knode, yaml.ScalarNode) else "<complex key>"
                line = knode.start_mark.line + 1
                if k == "<<":
                    continue
                if k in seen:
                    then.append(f"{_key(keys + (k,))}: duplicate key {k!r} in {name} (lines {seen[k]} and "
                                f"{line}); YAML would keep the last value silently")
                else:
                    seen[k] = line
                then.append((vnode, keys + (k,)))
            todo.extend(reversed(then))
        elif isinstance(node, yaml.SequenceNode):
            todo.extend(reversed([(item, keys + (i,)) for i, item in enumerate(node.value)]))
    return out


def check_straggler(errors: list[str], key: str, straggler: Mapping | None, n: int) -> None:
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


def check_dataset(errors: list[str], config: Mapping, key: str, name: Any, model: Mapping | None) -> None:
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


def check_workers(errors: list[str], key: str, section: Mapping, n: int) -> None:
    """A config section run on ``n`` workers: its ``batch_size`` splits evenly among them
    and its ``straggler`` model names workers within ``n``."""
    bs = section.get("batch_size")
    if isinstance(bs, int) and isinstance(n, int) and n > 0 and bs % n:
        errors.append(f"{key}.batch_size: {bs} is not divisible by the {n} workers "
                      f"(each worker draws batch_size / n samples)")
    check_straggler(errors, f"{key}.straggler", section.get("straggler"), n)


def _check_splits(config: Mapping, errors: list[str]) -> None:
    """A data set's validation and test fractions leave at least half of it to train on (two
    fractions under 0.5 each could leave one training sample)."""
    for name, d in (config.get("datasets") or {}).items():
        if not isinstance(d, Mapping):
            continue
        v, t = d.get("val_fraction", 0.1), d.get("test_fraction", 0.1)
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (v, t)) and v + t > 0.5:
            errors.append(f"datasets.{name}: val_fraction + test_fraction = {v + t:g} leaves under half "
                          f"the data to train on; keep their sum at most 0.5")


def claims_paper_errors(claims_path: str | Path, papers, claims: list | None = None) -> list[str]:
    """Claims whose ``paper`` is no registered paper's scorecard section, or whose id does not
    start with that paper's claims prefix, one line each (``claims``: the file's, read already)."""
    from ..scoring.claims import ClaimError, load_claims

    if claims is None:
        try:
            claims = load_claims(claims_path)
        except (ClaimError, OSError, yaml.YAMLError):
            return []  # named by _claims_errors
    by_id = {p.scorecard: p for p in papers}
    out = []
    for c in claims:
        p = by_id.get(c["paper"])
        if p is None:
            out.append(f"{claims_path}: claim {c['id']!r}: bad key 'paper': {c['paper']!r} is not a registered "
                       f"paper's scorecard section ({', '.join(by_id)})")
        elif not c["id"].startswith(p.claims_prefix + "."):
            out.append(f"{claims_path}: claim {c['id']!r}: its id does not start with {p.claims_prefix + '.'!r}, "
                       f"the prefix of paper {p.scorecard}'s claims")
    return out


def _selected(node, key: str):
    """Each value a claim's or condition's selectors give ``key`` (its a, b, links, wherever)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key and isinstance(v, (str, list)):
                yield from ([v] if isinstance(v, str) else [x for x in v if isinstance(x, str)])
            else:
                yield from _selected(v, key)
    elif isinstance(node, list):
        for v in node:
            yield from _selected(v, key)


def claims_technique_errors(claims_path: str | Path, papers) -> list[str]:
    """Claims and conditions whose selector names a technique no registry holds (by name or
    label), where their paper's ``claim_registries`` says which registry its selectors read: one
    line each; a misspelt method would otherwise match no rows and read "not run"."""
    from ..techniques.catalogue import REGISTRIES

    data = yaml.safe_load(Path(claims_path).read_text(encoding="utf-8")) or {}
    entries = [(c.get("id", "?"), c) for c in data.get("claims") or [] if isinstance(c, dict)]
    entries += list((data.get("conditions") or {}).items())
    out = []
    for ident, entry in entries:
        p = next((p for p in papers if str(ident).startswith(p.claims_prefix + ".")), None)
        for key, name in (p.claim_registries if p else ()):
            reg = REGISTRIES[name]
            known = set(reg) | {s.label for s in reg.values()}
            out += [f"{claims_path}: {ident!r}: bad key {key!r}: {v!r} is no registered {reg.what} "
                    f"({', '.join(reg)})" for v in dict.fromkeys(_selected(entry, key)) if v not in known]
    return out


def _check_claims(claims_path: str | Path | None, errors: list[str], papers=None) -> None:
    if claims_path is None:
        return
    names = None if papers is None else tuple((p.scorecard, p.claims_prefix) for p in papers)
    stamp = ("claims", _stamp([claims_path]), names)
    if stamp not in _CACHE:
        found: list[str] = []
        _claims_errors(claims_path, found, papers)
        _CACHE[stamp] = found
    errors += _CACHE[stamp]


def _claims_errors(claims_path: str | Path, errors: list[str], papers=None) -> None:
    from ..scoring.claims import ClaimError, load_claims

    if Path(claims_path).exists():
        dups = duplicate_key_errors(claims_path)
        if dups:
            errors += dups
            return

    try:
        if papers is not None:  # an undeclared method or technique first: it explains what follows from it
            named = claims_technique_errors(claims_path, papers)  # (a selection then matching no side)
            if named:
                errors += named
                return
        claims = load_claims(claims_path)
        if papers is not None:  # each claim's paper registered, its id under the paper's prefix
            errors += claims_paper_errors(claims_path, papers, claims)
    except ClaimError as e:
        errors.append(f"{claims_path}: {e}")
    except yaml.YAMLError as e:
        errors.append(f"{claims_path}: not valid YAML: {e}")


def _line_key(line: str) -> str:
    """The key an error line names (``a.b[1].c: why`` -> ``a.b.1.c``)."""
    import re

    return re.sub(r"\[(\d+)\]", r".\1", line.split(": ", 1)[0])


def _dataset_name_errors(config: Mapping) -> list[str]:
    """A data set's name becomes a folder and a shell word: letters, digits, underscore."""
    import re

    out = []
    datasets = config.get("datasets")
    if isinstance(datasets, Mapping):
        for name in datasets:
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,63}", name):
                out.append(f"datasets.{name}: the name {name!r} may hold only letters, digits and "
                           f"underscores, starting with a letter (it becomes a folder and a shell word)")
    return out


def _check_extra_seeds(config: Mapping[str, Any], claims_path: str | Path | None, errors: list[str]) -> None:
    """``stats.extra_seeds`` names claims (or preconditions) of config/claims.yaml (a typo
    would add no seed)."""
    wanted = (config.get("stats") or {}).get("extra_seeds") if isinstance(config.get("stats"), Mapping) else None
    if not wanted or not isinstance(wanted, Mapping) or claims_path is None or not Path(claims_path).exists():
        return
    from ..scoring.claims import ClaimError, load_claims_file

    try:
        claims, conditions = load_claims_file(claims_path)
    except (ClaimError, yaml.YAMLError):
        return  # the claims file's own line says why
    ids = {c["id"] for c in claims} | set(conditions)
    for cid in wanted:
        if cid not in ids:
            errors.append(f"stats.extra_seeds.{cid}: no claim or condition with this id in {claims_path}")


def config_errors(config: Mapping[str, Any], schema_dir: str | Path,
                  claims_path: str | Path | None = None,
                  config_files: list[str | Path] | tuple = (), papers=None) -> list[str]:
    """Every problem of ``config`` (its files and the claims file), each naming its key.

    ``config_files``: the YAML files the configuration was read from, checked for
    duplicate keys (a loader keeps the last value silently)."""
    from .yamlio import YamlLimitError, check_tree_limits, check_yaml_limits, read_yaml_text

    errors: list[str] = []
    for path in config_files:  # the caps first: nothing below walks a file or config over them
        try:
            check_yaml_limits(read_yaml_text(path), str(path))
        except YamlLimitError as e:
            errors.append(str(e))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            pass  # named by duplicate_key_errors below
    try:
        check_tree_limits(config)
    except YamlLimitError as e:
        errors.append(str(e))
    if not errors and config_files:
        errors = foreign_file_errors(config_files, schema_dir, papers)
    if errors:
        return errors
    for path in config_files:
        errors += bounds.config_file_errors(path) + duplicate_key_errors(path)
    names = _dataset_name_errors(config)
    errors += names
    schema = schema_errors(config, schema_dir, papers)
    if names:  # the schema's own line for these names says less than the one above
        schema = [e for e in schema if not (e.startswith("datasets:") and "does not match" in e)]
    paths = bounds.path_errors(config)  # names and hub paths that climb out (distlab.config.bounds)
    said = {_line_key(e) for e in paths}
    schema = [e for e in schema if not (_line_key(e) in said and "does not match" in e)]
    errors += paths
    errors += schema
    flagged = {_line_key(e) for e in schema}

    def fresh(line: str) -> bool:
        """Not a consequence of a value the schema already refused: the same key, or a
        list or mapping holding it (``pgc.s`` when ``pgc.s.1`` is refused)."""
        key = _line_key(line)
        return not any(key == f or f.startswith(key + ".") for f in flagged)

    errors += [e for e in count_errors(config) if fresh(e)]
    # cross-field rules assume well-typed values: with schema errors, a rule that
    # trips over one adds nothing (the schema's line already names the key)
    cross: list[str] = []
    try:
        _check_splits(config, cross)
    except Exception as e:  # noqa: BLE001
        if not schema:
            cross.append(f"datasets: its cross-field check failed ({type(e).__name__}: {e})")
    for section, check in paper_checks(papers).items():
        if section not in config:
            continue
        try:
            cross += check(config)
        except Exception as e:  # noqa: BLE001
            if not schema:
                cross.append(f"{section}: its cross-field check failed ({type(e).__name__}: {e})")
    if any(f == "seeds" or f.startswith("seeds.") for f in flagged):  # no seeds to be among
        cross = [e for e in cross if "among the configured seeds" not in e]
    if any(f.startswith("pgc.") for f in flagged):  # the stored profile's rows follow from pgc's settings
        cross = [e for e in cross if not e.startswith("pgc.coding.source:")]
    errors += [e for e in cross if fresh(e)]
    if not schema:  # memory estimates read well-typed values only
        errors += bounds.memory_errors(config) + bounds.data_size_errors(config)
    _check_claims(claims_path, errors, papers)
    _check_extra_seeds(config, claims_path, errors)
    seen: set[str] = set()
    return [e for e in errors if not (e in seen or seen.add(e))]


def retype_overrides(config: Any, overrides: Any) -> None:
    """Give ``--config`` values their YAML types in ``config``, in place.

    Snakemake parses ``--config key=value`` with YAML's base loader, so a list or mapping
    given there holds strings only (``seeds=[0,1]`` is ``['0', '1']``, ``baseline={n_workers:
    4}`` has ``'4'``), which a strict check would refuse though the user wrote numbers.
    Every string leaf of ``overrides`` that YAML reads as a number or a boolean (unquoted, as
    ``--config`` cannot quote) replaces the same string in ``config``."""
    if isinstance(overrides, Mapping) and isinstance(config, dict):
        for k, v in overrides.items():
            if k in config:
                if isinstance(v, str) and config[k] == v:
                    config[k] = _typed(v)
                else:
                    retype_overrides(config[k], v)
    elif isinstance(overrides, (list, tuple)) and isinstance(config, list) and len(config) == len(overrides):
        for i, v in enumerate(overrides):
            if isinstance(v, str) and config[i] == v:
                config[i] = _typed(v)
            else:
                retype_overrides(config[i], v)


def _typed(text: str) -> Any:
    try:
        value = yaml.safe_load(text) if len(text) < 100 else text
    except yaml.YAMLError:
        return text
    return value if isinstance(value, (int, float, bool)) else text


def check_config(config: Mapping[str, Any], schema_dir: str | Path,
                 claims_path: str | Path | None = None,
                 config_files: list[str | Path] | tuple = (), overrides: Mapping | None = None,
                 papers=None) -> None:
    """Raise :class:`ConfigError` listing every problem (see :func:`config_errors`).

    ``overrides``: Snakemake's ``--config`` values (``workflow.config_settings.config``),
    whose strings get their YAML types in ``config`` first (:func:`retype_overrides`)."""
    if overrides:
        retype_overrides(config, overrides)
    errors = config_errors(config, schema_dir, claims_path, config_files, papers)
    if errors:
        lines = "\n".join(f"  - {e}" for e in errors)
        raise ConfigError(f"invalid configuration ({len(errors)} problem(s)); nothing was run:\n{lines}")
    for line in config_notes(config, papers):
        print(f"distlab: note: {line}", file=sys.stderr)


def config_notes(config: Mapping[str, Any], papers=None) -> list[str]:
    """One line for each setting a paper accepts but applies to some of its runs only (its
    config check's optional ``notes(config)``), so nothing is dropped without a word."""
    out: list[str] = []
    for p in _papers(papers):
        mod = p.config_checker()
        if mod is not None and callable(getattr(mod, "notes", None)):
            out += mod.notes(config)
    return out
